package mongostore_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
	"github.com/acme/platform/services/auth/internal/password"
	"github.com/acme/platform/services/auth/internal/usercache"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// signInRoundTrips is the most database commands (round trips) one
// successful password sign-in may send with the user in the cache: the
// admission of both throttle keys, the session, and the throttle given
// back (docs/auth.md, throttling). A regression fails here.
const signInRoundTrips = 3

// A successful sign-in of a known, cached user with an account and an
// address key, through the real stores on the test's server: its
// commands, counted by the driver's command monitor.
func TestSignInRoundTrips(t *testing.T) {
	kit := testkit.Get(t)
	var c testkit.Commands
	client, err := mongo.Connect(options.Client().ApplyURI(kit.MongoURL).SetMonitor(c.Monitor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database(kit.Database(t))
	ctx := context.Background()
	if err := mongostore.EnsureIndexes(ctx, db); err != nil {
		t.Fatal(err)
	}
	h, err := password.NewHasher(password.Params{MemoryKiB: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}, 2)
	if err != nil {
		t.Fatal(err)
	}
	rule := account.ThrottleRule{Max: 5, Window: 15 * time.Minute, Lock: time.Minute, LockMax: time.Hour}
	svc := account.NewService(mongostore.NewUsers(db), mongostore.NewSessions(db), mongostore.NewThrottle(db), h, nil,
		account.Config{SessionTTL: time.Hour, SessionIdle: time.Hour, Account: rule,
			Address: account.ThrottleRule{Max: 50, Window: 15 * time.Minute, Lock: time.Minute, LockMax: time.Hour}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	svc.SetUserCache(usercache.New(time.Minute, 100, nil))
	if _, err := svc.CreateUser(ctx, account.NewUserInput{Email: "rt@example.com", Password: "the-password", FullName: "R", EDV: "1"}); err != nil {
		t.Fatal(err)
	}
	in := account.SignInInput{Email: "rt@example.com", Password: "the-password", Client: account.Client{IP: "192.0.2.80"}}
	// The first sign-ins read the user into the cache and write each key's
	// first state.
	for range 2 {
		if _, _, _, err := svc.SignIn(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	c.Take()
	const n = 5
	for range n {
		if _, _, _, err := svc.SignIn(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	got := c.Take()
	per := float64(len(got)) / n
	t.Logf("%d sign-ins: %d commands (%.1f each): %v", n, len(got), per, got[:len(got)/n])
	if per > signInRoundTrips {
		t.Fatalf("a successful sign-in sends %.1f commands, want at most %d: %v", per, signInRoundTrips, got)
	}
	if slices.Contains(got, "find") {
		t.Errorf("a sign-in of a cached user read something: %v", got)
	}
}
