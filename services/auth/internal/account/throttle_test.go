package account_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
)

// A sign-in is admitted on the account and address keys before anything
// else: a throttled attempt never reaches the user or the hash; a wrong
// password keeps its tickets (they count, no second write); a right one
// gives the address's back and resets the account's.
func TestSignInIsAdmittedBeforeTheHash(t *testing.T) {
	f := newFixture(t)
	u := alice(t, f, "alice-password")
	f.withUser(u)
	lookups := 0
	byEmail := f.users.ByEmailFn
	f.users.ByEmailFn = func(ctx context.Context, email string) (account.User, error) {
		lookups++
		return byEmail(ctx, email)
	}
	in := account.SignInInput{Email: u.Email, Password: "wrong-password", Client: account.Client{IP: "192.0.2.7"}}

	if _, _, _, err := f.svc.SignIn(ctx, in); !errors.Is(err, account.ErrInvalidCredentials) {
		t.Fatalf("wrong password: %v", err)
	}
	if got := f.throttle.counted(); len(got) != 2 || !strings.HasPrefix(got[0], "account:") || got[1] != "address:192.0.2.7" {
		t.Fatalf("a wrong password counted %v, want its account and address tickets kept", got)
	}

	// Locked address: refused before the user is read (so before the
	// hash), and the account's ticket is given back.
	f.throttle.clear()
	f.throttle.CheckFn = func(_ context.Context, keys []string) (map[string]time.Time, error) {
		if keys[0] == "address:192.0.2.7" {
			return map[string]time.Time{keys[0]: time.Now().Add(time.Minute)}, nil
		}
		return nil, nil
	}
	lookups = 0
	in.Password = "alice-password"
	var te *account.ThrottledError
	if _, _, _, err := f.svc.SignIn(ctx, in); !errors.As(err, &te) {
		t.Fatalf("locked address: %v, want ThrottledError", err)
	}
	if lookups != 0 || len(f.throttle.counted()) != 0 {
		t.Fatalf("throttled attempt: %d user lookups, counted %v; want none", lookups, f.throttle.counted())
	}

	// Right password: nothing stays counted, the account is reset.
	f.throttle.CheckFn = nil
	f.throttle.clear()
	var reset []string
	f.throttle.ResetFn = func(_ context.Context, key string) error {
		reset = append(reset, key)
		return nil
	}
	if _, _, _, err := f.svc.SignIn(ctx, in); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.throttle.released, []string{"address:192.0.2.7"}) || len(reset) != 1 || !strings.HasPrefix(reset[0], "account:") {
		t.Fatalf("success: released %v, reset %v; want the address released and the account reset", f.throttle.released, reset)
	}
}
