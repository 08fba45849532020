package mongostore_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
	"github.com/acme/platform/services/auth/internal/password"
	"github.com/acme/platform/services/auth/internal/usercache"
)

// TestSignInCosts measures the embedded server's CPU per successful
// sign-in through the real stores (the throttle's two keys, the session;
// the user from the cache): SIGNIN_COSTS sign-ins (e.g. 2000) one at a
// time, then as many four at a time on one account and address (the
// bench's load), on a server of its own without the test kit's scan
// report. A measurement: it asserts nothing (-v prints it).
func TestSignInCosts(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SIGNIN_COSTS"))
	if n <= 0 {
		t.Skip("a measurement: SIGNIN_COSTS=<sign-ins> runs it")
	}
	ctx := context.Background()
	fp, mc := costServer(t)
	db := mc.Database("costs")
	if err := mongostore.EnsureIndexes(ctx, db); err != nil {
		t.Fatal(err)
	}
	h, err := password.NewHasher(password.Params{MemoryKiB: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}, 4)
	if err != nil {
		t.Fatal(err)
	}
	// The service's defaults (AUTH_THROTTLE_*).
	svc := account.NewService(mongostore.NewUsers(db), mongostore.NewSessions(db), mongostore.NewThrottle(db), h, nil,
		account.Config{SessionTTL: time.Hour, SessionIdle: time.Hour,
			Account: account.ThrottleRule{Max: 5, Window: 15 * time.Minute, Lock: time.Minute, LockMax: time.Hour},
			Address: account.ThrottleRule{Max: 50, Window: 15 * time.Minute, Lock: time.Minute, LockMax: time.Hour}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	svc.SetUserCache(usercache.New(time.Hour, 100, nil))
	if _, err := svc.CreateUser(ctx, account.NewUserInput{Email: "cost@example.com", Password: "the-password", FullName: "C", EDV: "1"}); err != nil {
		t.Fatal(err)
	}
	in := account.SignInInput{Email: "cost@example.com", Password: "the-password", Client: account.Client{IP: "192.0.2.90"}}
	signIn := func() {
		if _, _, _, err := svc.SignIn(ctx, in); err != nil {
			t.Error(err)
		}
	}
	signIn() // the user into the cache
	for _, workers := range []int{1, 4} {
		t0 := cpuTicks(t, fp.Pid())
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for range n / workers {
					signIn()
				}
				_ = w
			})
		}
		wg.Wait()
		t.Logf("%d sign-ins, %d at a time: FerretDB %.0f µs each", n, workers, float64(cpuTicks(t, fp.Pid())-t0)*1e4/float64(n))
	}
}
