package account

// The passkey ceremonies against hand-written fakes of the stores, with a
// software authenticator (pkg/testkit/authenticator) in place of a browser:
// registration, discoverable sign-in, single-use ceremonies, expiry, the
// origin, an unknown credential, a rewound sign count and the throttle.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/authenticator"
	"github.com/go-webauthn/webauthn/webauthn"
)

const testOrigin = "https://console.example.com"

// fakeUsers answers ByID from a map; other methods are not used here.
type fakeUsers struct {
	UserStore
	users map[string]User
}

func (f *fakeUsers) LockMethods(context.Context, string, string, time.Time, time.Time) (bool, error) {
	return true, nil
}

func (f *fakeUsers) UnlockMethods(context.Context, string, string) error { return nil }

func (f *fakeUsers) ByID(_ context.Context, id string) (User, error) {
	if u, ok := f.users[id]; ok {
		return u, nil
	}
	return User{}, ErrUserNotFound
}

type fakeSessions struct {
	SessionStore
	created []Session
}

func (f *fakeSessions) Create(_ context.Context, s Session) error {
	f.created = append(f.created, s)
	return nil
}

// fakeTokens is a TokenStore in a map, expiring like the real one.
type fakeTokens struct {
	mu sync.Mutex
	m  map[string]Token
}

func (f *fakeTokens) Create(_ context.Context, t Token) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[t.ID] = t
	return nil
}

func (f *fakeTokens) Take(_ context.Context, id, purpose string, now time.Time) (Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.m[id]
	if !ok || t.Purpose != purpose {
		return Token{}, ErrInvalidToken
	}
	delete(f.m, id)
	if !now.Before(t.ExpiresAt) {
		return Token{}, ErrInvalidToken
	}
	return t, nil
}

func (f *fakeTokens) Put(ctx context.Context, t Token) error { return f.Create(ctx, t) }
func (f *fakeTokens) Confirm(context.Context, string, string, string, string, time.Time) (Token, error) {
	return Token{}, ErrInvalidToken
}
func (f *fakeTokens) TakeConfirmed(context.Context, string, string, string, []string, time.Time) (Token, error) {
	return Token{}, ErrInvalidToken
}
func (f *fakeTokens) DeleteByUser(context.Context, string, string) error { return nil }
func (f *fakeTokens) DeleteExpired(context.Context, time.Time) error     { return nil }

// fakeThrottle admits every attempt unless CheckFn locks its key, and
// keeps the tickets not given back.
type fakeThrottle struct {
	n       int
	held    map[string]string // slot -> key
	CheckFn func(keys []string) map[string]time.Time
}

func (f *fakeThrottle) Admit(ctx context.Context, now time.Time, reqs ...ThrottleRequest) ([]Ticket, error) {
	if f.CheckFn != nil {
		for _, r := range reqs {
			if until, ok := f.CheckFn([]string{r.Key})[r.Key]; ok && until.After(now) {
				return nil, &ThrottledError{RetryAfter: until.Sub(now), Key: r.Key}
			}
		}
	}
	if f.held == nil {
		f.held = map[string]string{}
	}
	var tks []Ticket
	for _, r := range reqs {
		f.n++
		slot := fmt.Sprintf("%s#%d", r.Key, f.n)
		f.held[slot] = r.Key
		tks = append(tks, Ticket{Key: r.Key, Slot: slot, Fresh: true})
	}
	return tks, nil
}
func (f *fakeThrottle) Release(_ context.Context, tks ...Ticket) error {
	for _, t := range tks {
		delete(f.held, t.Slot)
	}
	return nil
}
func (f *fakeThrottle) Check(_ context.Context, keys []string) (map[string]time.Time, error) {
	if f.CheckFn != nil {
		return f.CheckFn(keys), nil
	}
	return map[string]time.Time{}, nil
}
func (f *fakeThrottle) Reset(context.Context, string, time.Time) error { return nil }
func (f *fakeThrottle) Succeed(ctx context.Context, _ string, tks ...Ticket) error {
	return f.Release(ctx, tks...)
}
func (f *fakeThrottle) Forget(context.Context, time.Time, time.Time) error { return nil }

// failed lists the sign-in keys (account, address) whose tickets were
// kept: the attempts counted as failures.
func (f *fakeThrottle) failed() []string {
	var out []string
	for _, k := range f.held {
		if strings.HasPrefix(k, "account:") || strings.HasPrefix(k, "address:") {
			out = append(out, k)
		}
	}
	return out
}

// fakePasskeys keeps passkeys in a map; MarkClonedFn observes clone marks.
type fakePasskeys struct {
	m            map[string]Passkey
	MarkClonedFn func(id string)
}

func (f *fakePasskeys) Create(_ context.Context, p Passkey) error {
	if _, ok := f.m[p.ID]; ok {
		return ErrPasskeyExists
	}
	f.m[p.ID] = p
	return nil
}
func (f *fakePasskeys) ByID(_ context.Context, id string) (Passkey, error) {
	p, ok := f.m[id]
	if !ok {
		return Passkey{}, ErrPasskeyNotFound
	}
	return p, nil
}
func (f *fakePasskeys) ListByUser(_ context.Context, userID string) ([]Passkey, error) {
	var out []Passkey
	for _, p := range f.m {
		if p.UserID == userID {
			out = append(out, p)
		}
	}
	// As the store orders them: oldest first, then by id.
	slices.SortFunc(out, func(a, b Passkey) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}
func (f *fakePasskeys) Used(_ context.Context, id string, prev uint32, cred webauthn.Credential, at time.Time) error {
	p, ok := f.m[id]
	if !ok {
		return ErrPasskeyNotFound
	}
	if p.Credential.Authenticator.SignCount != prev {
		return ErrPasskeyMoved
	}
	p.Credential, p.LastUsedAt = cred, at
	f.m[id] = p
	return nil
}
func (f *fakePasskeys) MarkCloned(_ context.Context, id string) error {
	if f.MarkClonedFn != nil {
		f.MarkClonedFn(id)
	}
	p := f.m[id]
	p.CloneWarning = true
	f.m[id] = p
	return nil
}
func (f *fakePasskeys) Delete(_ context.Context, userID, id string) error {
	if p, ok := f.m[id]; !ok || p.UserID != userID {
		return ErrPasskeyNotFound
	}
	delete(f.m, id)
	return nil
}
func (f *fakePasskeys) DeleteByUser(_ context.Context, userID string) (int64, error) {
	var n int64
	for id, p := range f.m {
		if p.UserID == userID {
			delete(f.m, id)
			n++
		}
	}
	return n, nil
}

type passkeyRig struct {
	svc      *Service
	clock    time.Time
	sessions *fakeSessions
	throttle *fakeThrottle
	passkeys *fakePasskeys
	user     User
}

func newPasskeyRig(t *testing.T) *passkeyRig {
	t.Helper()
	r := &passkeyRig{
		clock:    time.Now().UTC().Truncate(time.Millisecond),
		sessions: &fakeSessions{},
		throttle: &fakeThrottle{},
		passkeys: &fakePasskeys{m: map[string]Passkey{}},
		user:     User{ID: "0123456789abcdef01234567", Email: "pia@example.com", FullName: "Pia", Role: RoleUser},
	}
	users := &fakeUsers{users: map[string]User{r.user.ID: r.user}}
	cfg := Config{SessionTTL: time.Hour, SessionIdle: time.Hour,
		Account: ThrottleRule{Max: 5, Window: time.Minute, Lock: time.Minute, LockMax: time.Hour},
		Address: ThrottleRule{Max: 50, Window: time.Minute, Lock: time.Minute, LockMax: time.Hour}}
	r.svc = NewService(users, r.sessions, r.throttle, nil, nil, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.svc.now = func() time.Time { return r.clock }
	err := r.svc.SetPasskeys(r.passkeys, &fakeTokens{m: map[string]Token{}}, PasskeyConfig{
		RPID: "example.com", Origins: []string{testOrigin}, CeremonyTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func options(t *testing.T, pc PasskeyCeremony) []byte {
	t.Helper()
	b, err := json.Marshal(pc.Options)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// register adds a passkey of a to the rig's user through both steps.
func (r *passkeyRig) register(t *testing.T, a *authenticator.Authenticator, name string) Passkey {
	t.Helper()
	ctx := context.Background()
	c := Caller{UserID: r.user.ID}
	pc, err := r.svc.BeginPasskeyRegistration(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := a.Create(options(t, pc))
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.svc.FinishPasskeyRegistration(ctx, c, pc.ID, name, resp)
	if err != nil {
		t.Fatalf("FinishPasskeyRegistration: %v", err)
	}
	return p
}

// signIn runs a sign-in ceremony with a; the ceremony id is returned too.
func (r *passkeyRig) signIn(t *testing.T, a *authenticator.Authenticator) (string, []byte, Session, Passkey, error) {
	t.Helper()
	ctx := context.Background()
	pc, err := r.svc.BeginPasskeySignIn(ctx, Client{IP: "192.0.2.7"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := a.Get(options(t, pc))
	if err != nil {
		t.Fatal(err)
	}
	_, sess, _, p, err := r.svc.FinishPasskeySignIn(ctx, pc.ID, resp, Client{IP: "192.0.2.7"})
	return pc.ID, resp, sess, p, err
}

func wantPasskeyError(t *testing.T, err error, code string) {
	t.Helper()
	var pe *PasskeyError
	if !errors.As(err, &pe) || pe.Code != code || pe.Detail == "" {
		t.Fatalf("got %v, want a PasskeyError %s with a detail", err, code)
	}
}

func TestPasskeyRegisterAndSignIn(t *testing.T) {
	r := newPasskeyRig(t)
	a := authenticator.New(testOrigin)
	p := r.register(t, a, "")
	if p.Name != "Passkey 1" || p.UserID != r.user.ID || !p.LastUsedAt.IsZero() || !p.Credential.Flags.UserVerified {
		t.Fatalf("registered passkey: %+v", p)
	}
	r.clock = r.clock.Add(time.Second) // oldest first: the second is listed second
	r.register(t, authenticator.New(testOrigin), "  Laptop ")
	list, _ := r.svc.Passkeys(context.Background(), r.user.ID)
	if len(list) != 2 || list[1].Name != "Laptop" {
		t.Fatalf("passkeys: %+v", list)
	}

	r.clock = r.clock.Add(time.Second)
	_, _, sess, used, err := r.signIn(t, a)
	if err != nil {
		t.Fatalf("sign-in: %v", err)
	}
	if !sess.TwoFactor || sess.UserID != r.user.ID || len(r.sessions.created) != 1 {
		t.Fatalf("session: %+v (%d created)", sess, len(r.sessions.created))
	}
	stored := r.passkeys.m[used.ID]
	if !stored.LastUsedAt.Equal(r.clock) || used.ID != p.ID || stored.Credential.Authenticator.SignCount != a.Creds[0].Count {
		t.Fatalf("after sign-in: last used %v, count %d, authenticator at %d", stored.LastUsedAt, stored.Credential.Authenticator.SignCount, a.Creds[0].Count)
	}
	if len(r.throttle.failed()) != 0 {
		t.Fatalf("failures counted on success: %v", r.throttle.failed())
	}
	// The excluded credential: one authenticator holds one passkey per
	// account (the browser refuses; so does this authenticator).
	pc, _ := r.svc.BeginPasskeyRegistration(context.Background(), Caller{UserID: r.user.ID})
	if _, err := a.Create(options(t, pc)); err == nil {
		t.Fatal("registration options did not exclude the registered credentials")
	}
}

func TestPasskeyCeremonies(t *testing.T) {
	r := newPasskeyRig(t)
	ctx := context.Background()
	a := authenticator.New(testOrigin)
	r.register(t, a, "")

	// Replay: the ceremony and its response a second time.
	id, resp, _, _, err := r.signIn(t, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := r.svc.FinishPasskeySignIn(ctx, id, resp, Client{}); !errors.Is(err, ErrInvalidCeremony) {
		t.Fatalf("replayed ceremony: %v", err)
	}
	// Unknown, malformed and expired ceremonies.
	for _, bad := range []string{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "short"} {
		if _, _, _, _, err := r.svc.FinishPasskeySignIn(ctx, bad, resp, Client{}); !errors.Is(err, ErrInvalidCeremony) {
			t.Fatalf("ceremony %q: %v", bad, err)
		}
	}
	pc, _ := r.svc.BeginPasskeySignIn(ctx, Client{IP: "192.0.2.7"})
	resp, _ = a.Get(options(t, pc))
	r.clock = r.clock.Add(time.Minute) // the TTL
	if _, _, _, _, err := r.svc.FinishPasskeySignIn(ctx, pc.ID, resp, Client{}); !errors.Is(err, ErrInvalidCeremony) {
		t.Fatalf("expired ceremony: %v", err)
	}
	// A registration ceremony is the caller's own, and not a sign-in's.
	rc, _ := r.svc.BeginPasskeyRegistration(ctx, Caller{UserID: r.user.ID})
	created, _ := authenticator.New(testOrigin).Create(options(t, rc))
	if _, _, _, _, err := r.svc.FinishPasskeySignIn(ctx, rc.ID, created, Client{}); !errors.Is(err, ErrInvalidCeremony) {
		t.Fatalf("registration ceremony used to sign in: %v", err)
	}
	rc, _ = r.svc.BeginPasskeyRegistration(ctx, Caller{UserID: r.user.ID})
	if _, err := r.svc.FinishPasskeyRegistration(ctx, Caller{UserID: "another"}, rc.ID, "", created); !errors.Is(err, ErrInvalidCeremony) {
		t.Fatalf("another user's registration ceremony: %v", err)
	}
	if _, err := r.svc.FinishPasskeyRegistration(ctx, Caller{UserID: r.user.ID}, "", "", created); err == nil {
		t.Fatal("no ceremony accepted")
	}
	// A registration signed for another origin.
	rc, _ = r.svc.BeginPasskeyRegistration(ctx, Caller{UserID: r.user.ID})
	evil := authenticator.New("https://evil.example")
	created, _ = evil.Create(options(t, rc))
	_, err = r.svc.FinishPasskeyRegistration(ctx, Caller{UserID: r.user.ID}, rc.ID, "", created)
	wantPasskeyError(t, err, "passkey_rejected")
}

func TestPasskeySignInRefusals(t *testing.T) {
	r := newPasskeyRig(t)
	ctx := context.Background()
	a := authenticator.New(testOrigin)
	p := r.register(t, a, "")
	acct := accountKey(NormalizeEmail(r.user.Email))

	// Another origin: refused, counted against the address and the account.
	a.Origin = "https://evil.example"
	_, _, _, _, err := r.signIn(t, a)
	wantPasskeyError(t, err, "passkey_failed")
	if !slices.Contains(r.throttle.failed(), acct) || !slices.Contains(r.throttle.failed(), addressKey("192.0.2.7")) {
		t.Fatalf("failures counted: %v", r.throttle.failed())
	}
	a.Origin = testOrigin

	// Malformed responses.
	pc, _ := r.svc.BeginPasskeySignIn(ctx, Client{IP: "192.0.2.7"})
	_, _, _, _, err = r.svc.FinishPasskeySignIn(ctx, pc.ID, []byte(`{"id":"x"}`), Client{})
	wantPasskeyError(t, err, "invalid_passkey_response")

	// A rewound sign count: a copy of the key is signing.
	if _, _, _, _, err := r.signIn(t, a); err != nil {
		t.Fatal(err)
	}
	var marked []string
	r.passkeys.MarkClonedFn = func(id string) { marked = append(marked, id) }
	a.Creds[0].Count -= 2
	_, _, _, _, err = r.signIn(t, a)
	wantPasskeyError(t, err, "passkey_cloned")
	if !slices.Equal(marked, []string{p.ID}) || !r.passkeys.m[p.ID].CloneWarning {
		t.Fatalf("clone marks: %v", marked)
	}

	// A locked account: no verification at all.
	r.throttle.CheckFn = func(keys []string) map[string]time.Time {
		return map[string]time.Time{acct: r.clock.Add(time.Minute)}
	}
	a.Creds[0].Count += 10
	_, _, _, _, err = r.signIn(t, a)
	var te *ThrottledError
	if !errors.As(err, &te) {
		t.Fatalf("locked account: %v", err)
	}
	r.throttle.CheckFn = nil

	// Removed: the authenticator still offers it; the sign-in says so.
	// Pia has no password: her only passkey is her only way in.
	users := r.svc.users.(*fakeUsers)
	users.users["another"] = User{ID: "another", PasswordHash: "h"}
	if err := r.svc.RemovePasskey(ctx, Caller{UserID: "another"}, p.ID); !errors.Is(err, ErrPasskeyNotFound) {
		t.Fatalf("another user removed the passkey: %v", err)
	}
	if err := r.svc.RemovePasskey(ctx, Caller{UserID: r.user.ID}, p.ID); !errors.Is(err, ErrLastSignInMethod) {
		t.Fatalf("removing the last way in: %v, want ErrLastSignInMethod", err)
	}
	if _, err := r.passkeys.ByID(ctx, p.ID); err != nil {
		t.Fatalf("the refused removal removed it: %v", err)
	}
	withPassword := r.user
	withPassword.PasswordHash = "h"
	users.users[r.user.ID] = withPassword
	if err := r.svc.RemovePasskey(ctx, Caller{UserID: r.user.ID}, p.ID); err != nil {
		t.Fatal(err)
	}
	_, _, _, _, err = r.signIn(t, a)
	wantPasskeyError(t, err, "passkey_unknown")
}

func TestPasskeyLimit(t *testing.T) {
	r := newPasskeyRig(t)
	r.svc.passkeys.cfg.MaxPerUser = 2
	for range 2 {
		r.register(t, authenticator.New(testOrigin), "")
	}
	if _, err := r.svc.BeginPasskeyRegistration(context.Background(), Caller{UserID: r.user.ID}); !errors.Is(err, ErrTooManyPasskeys) {
		t.Fatalf("third passkey: %v", err)
	}
}

func TestEffectiveRoleTwoFactor(t *testing.T) {
	s := &Service{now: now}
	if err := s.SetMFA(nil, nil, MFAConfig{RequireAdmin: true}); err != nil {
		t.Fatal(err)
	}
	admin := User{Role: RoleAdmin}
	for _, c := range []struct {
		u         User
		twoFactor bool
		want      string
	}{
		{admin, false, RoleUser},
		{admin, true, RoleAdmin},
		{User{Role: RoleAdmin, MFAEnabled: true}, false, RoleAdmin},
		{User{Role: RoleUser}, true, RoleUser},
	} {
		if got := s.EffectiveRole(c.u, c.twoFactor); got != c.want {
			t.Errorf("EffectiveRole(%+v, %v) = %s, want %s", c.u, c.twoFactor, got, c.want)
		}
	}
}

func TestValidatePasskeyConfig(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     PasskeyConfig
		wantErr bool
	}{
		{"localhost", PasskeyConfig{RPID: "localhost", Origins: []string{"http://localhost:8080"}}, false},
		{"subdomain", PasskeyConfig{RPID: "example.com", Origins: []string{"https://app.example.com", "https://example.com/"}}, false},
		{"ipAddress", PasskeyConfig{RPID: "127.0.0.1", Origins: []string{"http://127.0.0.1:8080"}}, true},
		{"withPort", PasskeyConfig{RPID: "localhost:8080", Origins: []string{"http://localhost:8080"}}, true},
		{"otherDomain", PasskeyConfig{RPID: "example.com", Origins: []string{"https://example.org"}}, true},
		{"suffixOnly", PasskeyConfig{RPID: "example.com", Origins: []string{"https://badexample.com"}}, true},
		{"path", PasskeyConfig{RPID: "example.com", Origins: []string{"https://example.com/console"}}, true},
		{"noOrigin", PasskeyConfig{RPID: "example.com"}, true},
	} {
		err := ValidatePasskeyConfig(c.cfg)
		if (err != nil) != c.wantErr {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// The user handle the authenticator keeps is the user id.
func TestPasskeyUserHandle(t *testing.T) {
	r := newPasskeyRig(t)
	a := authenticator.New(testOrigin)
	r.register(t, a, "")
	if !bytes.Equal(a.Creds[0].UserHandle, []byte(r.user.ID)) {
		t.Fatalf("user handle %q", a.Creds[0].UserHandle)
	}
}
