package account_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mailer"
)

// sentMail is one message handed to the fake mailer.
type sentMail struct{ name, to string }

// mailbox is a Mailer that records what it was asked to send.
type mailbox struct {
	mu   sync.Mutex
	sent []sentMail
}

func (m *mailbox) Send(_ context.Context, name, to string, _ mailer.Data) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, sentMail{name, to})
	return nil
}

func (m *mailbox) all() []sentMail {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]sentMail(nil), m.sent...)
	slices.SortFunc(out, func(a, b sentMail) int { return strings.Compare(a.name+a.to, b.name+b.to) })
	return out
}

// linkTokens is a TokenStore that keeps nothing.
type linkTokens struct{}

func (linkTokens) Create(context.Context, account.Token) error { return nil }
func (linkTokens) Take(context.Context, string, string, time.Time) (account.Token, error) {
	return account.Token{}, account.ErrInvalidToken
}
func (linkTokens) DeleteByUser(context.Context, string, string) error { return nil }
func (linkTokens) DeleteExpired(context.Context, time.Time) error     { return nil }

var emailRule = account.ThrottleRule{Max: 3, Window: time.Hour, Lock: time.Hour, LockMax: time.Hour}

// emailFixture is a Service with mail on, the address throttles set, and
// two users: alice (the caller) and bob (who owns bob@example.com).
func emailFixture(t *testing.T) (*fixture, *mailbox, account.User) {
	t.Helper()
	f := newFixture(t)
	cfg := policy
	cfg.EmailAccount, cfg.EmailTarget = emailRule, emailRule
	f.svc = account.NewService(f.users, f.sessions, f.throttle, f.hasher, f.pub, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mb := &mailbox{}
	f.svc.SetMail(mb, linkTokens{}, account.MailConfig{PublicURL: "http://console.test", ResetTTL: time.Minute, VerifyTTL: time.Hour})
	t.Cleanup(f.svc.Close)
	u := alice(t, f, "alice-password")
	bob := account.User{ID: "u2", Email: "Bob@Example.com", FullName: "Bob"}
	f.users.ByIDFn = func(_ context.Context, id string) (account.User, error) {
		if id == u.ID {
			return u, nil
		}
		return account.User{}, account.ErrUserNotFound
	}
	f.users.ByEmailFn = func(_ context.Context, email string) (account.User, error) {
		switch email {
		case account.NormalizeEmail(u.Email):
			return u, nil
		case account.NormalizeEmail(bob.Email):
			return bob, nil
		}
		return account.User{}, account.ErrUserNotFound
	}
	f.users.UpdateFn = func(context.Context, string, account.UserPatch, time.Time) (account.User, error) {
		t.Error("the user was updated by an address change that waits for verification")
		return u, nil
	}
	return f, mb, u
}

func TestEmailChangeNeedsTheCurrentPassword(t *testing.T) {
	f, mb, u := emailFixture(t)
	var failed []string
	f.throttle.FailFn = func(_ context.Context, key string, _ account.ThrottleRule, _ time.Time) error {
		failed = append(failed, key)
		return nil
	}
	caller := account.Caller{UserID: u.ID}
	_, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("bob@example.com")})
	wantInvalid(t, err, "currentPassword", "missing_field")
	_, _, err = f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("bob@example.com"), CurrentPassword: ptr("")})
	wantInvalid(t, err, "currentPassword", "missing_field")
	_, _, err = f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("new@example.com"),
		CurrentPassword: ptr("alice-password"), Password: &account.PasswordChange{Old: ptr("other-password"), New: ptr("new-password-1")}})
	wantInvalid(t, err, "currentPassword", "invalid_value")
	if _, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("new@example.com"), CurrentPassword: ptr("wrong-password")}); !errors.Is(err, account.ErrWrongPassword) {
		t.Fatalf("wrong password: %v, want ErrWrongPassword", err)
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "account:") {
		t.Fatalf("failures counted %v, want one on the sign-in account key", failed)
	}
	// The own address unchanged needs no password (the console sends
	// only what changed, other clients may send everything).
	f.users.UpdateFn = func(_ context.Context, _ string, p account.UserPatch, _ time.Time) (account.User, error) {
		if p.Email != nil {
			t.Errorf("the address was written: %q", *p.Email)
		}
		return u, nil
	}
	if _, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr(u.Email), FullName: ptr("Alice L.")}); err != nil {
		t.Fatalf("own address and a name: %v", err)
	}
	f.svc.Close()
	if got := mb.all(); len(got) != 0 {
		t.Fatalf("mail sent without a proven password: %v", got)
	}
}

// A taken and a free address get the same answer; what differs goes by
// mail: the free address gets the verification link, the taken one's
// owner a notice, and the caller's address is told in both cases.
func TestEmailChangeAnswersAlikeForTakenAndFreeAddresses(t *testing.T) {
	f, mb, u := emailFixture(t)
	caller := account.Caller{UserID: u.ID}
	type outcome struct {
		user account.User
		ns   *account.NewSession
		err  error
	}
	var got []outcome
	for _, addr := range []string{"bob@EXAMPLE.com", "free@example.com"} {
		v, ns, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr(addr), CurrentPassword: ptr("alice-password")})
		got = append(got, outcome{v, ns, err})
	}
	for i, o := range got {
		if o.err != nil || o.ns != nil || o.user.Email != u.Email || o.user.ID != u.ID {
			t.Fatalf("change %d: %+v, want the unchanged user and no error", i, o)
		}
	}
	f.svc.Close()
	want := []sentMail{
		{mailer.EmailChanged, u.Email}, {mailer.EmailChanged, u.Email},
		{mailer.EmailInUse, "Bob@Example.com"},
		{mailer.Verify, "free@example.com"},
	}
	slices.SortFunc(want, func(a, b sentMail) int { return strings.Compare(a.name+a.to, b.name+b.to) })
	if m := mb.all(); !slices.Equal(m, want) {
		t.Fatalf("mail sent %v, want %v", m, want)
	}
}

// Every change and every verification mail counts per account and per
// target address; a locked key refuses before the password is checked
// and before anything is sent.
func TestEmailMailsAreThrottled(t *testing.T) {
	f, mb, u := emailFixture(t)
	var mu sync.Mutex
	counts := map[string]int{}
	f.throttle.FailFn = func(_ context.Context, key string, rule account.ThrottleRule, _ time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(key, "email-") && rule != emailRule {
			t.Errorf("%s counted under %+v", key, rule)
		}
		counts[key]++
		return nil
	}
	locked := map[string]bool{}
	f.throttle.CheckFn = func(_ context.Context, keys []string) (map[string]time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]time.Time{}
		for _, k := range keys {
			if counts[k] >= emailRule.Max && strings.HasPrefix(k, "email-") {
				out[k] = time.Now().Add(time.Hour)
				locked[k] = true
			}
		}
		return out, nil
	}
	caller := account.Caller{UserID: u.ID}
	change := func(addr string) error {
		_, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr(addr), CurrentPassword: ptr("alice-password")})
		return err
	}
	for i := range 3 {
		if err := change("target@example.com"); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	var te *account.ThrottledError
	if err := change("TARGET@example.com"); !errors.As(err, &te) || te.RetryAfter <= 0 || !strings.Contains(te.Message(), "e-mail") {
		t.Fatalf("fourth change to one address: %v, want a ThrottledError", err)
	}
	// Another address: the account's own count is spent too (3 of 3).
	if err := change("other@example.com"); !errors.As(err, &te) {
		t.Fatalf("a change past the account's limit: %v, want a ThrottledError", err)
	}
	if counts["email-user:u1"] != 3 || len(locked) != 2 {
		t.Fatalf("counts %v, locked %v", counts, locked)
	}
	// Verification mails count on the same keys.
	if err := f.svc.ResendVerification(ctx, u.ID); !errors.As(err, &te) {
		t.Fatalf("resend past the account's limit: %v, want a ThrottledError", err)
	}
	f.svc.Close()
	if n := len(mb.all()); n != 6 { // three changes: a link and a notice each
		t.Fatalf("%d mails sent, want 6", n)
	}
}

func TestResendVerificationCountsPerAccountAndAddress(t *testing.T) {
	f, mb, u := emailFixture(t)
	var keys []string
	f.throttle.FailFn = func(_ context.Context, key string, _ account.ThrottleRule, _ time.Time) error {
		keys = append(keys, key)
		return nil
	}
	if err := f.svc.ResendVerification(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	f.svc.Close()
	if len(keys) != 2 || keys[0] != "email-user:u1" || !strings.HasPrefix(keys[1], "email-to:") {
		t.Fatalf("counted %v, want the account's and the address's keys", keys)
	}
	if m := mb.all(); len(m) != 1 || m[0] != (sentMail{mailer.Verify, u.Email}) {
		t.Fatalf("mail %v", m)
	}
}
