package account_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
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
	data []mailer.Data
}

func (m *mailbox) Send(_ context.Context, name, to string, d mailer.Data) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, sentMail{name, to})
	m.data = append(m.data, d)
	return nil
}

// token is the secret of the last link of message name sent to to ("" if
// none), and the address the message names as the new one.
func (m *mailbox) token(name, to string) (secret, newEmail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.sent) - 1; i >= 0; i-- {
		if m.sent[i] == (sentMail{name, to}) {
			link := m.data[i].Link
			return link[strings.Index(link, "token=")+len("token="):], m.data[i].NewEmail
		}
	}
	return "", ""
}

func (m *mailbox) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent, m.data = nil, nil
}

func (m *mailbox) all() []sentMail {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]sentMail(nil), m.sent...)
	slices.SortFunc(out, func(a, b sentMail) int { return strings.Compare(a.name+a.to, b.name+b.to) })
	return out
}

// memTokens is a TokenStore in a map, with the real one's conditions; each
// method holds the lock throughout, as one find-and-modify is atomic.
type memTokens struct {
	mu sync.Mutex
	m  map[string]account.Token
}

func newMemTokens() *memTokens { return &memTokens{m: map[string]account.Token{}} }

func (s *memTokens) Create(_ context.Context, t account.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[t.ID]; ok {
		return errors.New("duplicate key")
	}
	s.m[t.ID] = t
	return nil
}

func (s *memTokens) Put(_ context.Context, t account.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[t.ID] = t
	return nil
}

func (s *memTokens) Take(_ context.Context, id, purpose string, now time.Time) (account.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[id]
	if !ok || t.Purpose != purpose {
		return account.Token{}, account.ErrInvalidToken
	}
	delete(s.m, id)
	if !now.Before(t.ExpiresAt) {
		return account.Token{}, account.ErrInvalidToken
	}
	return t, nil
}

func (s *memTokens) Confirm(_ context.Context, id, purpose, change, side string, now time.Time) (account.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[id]
	if !ok || t.Purpose != purpose || t.Change != change || !now.Before(t.ExpiresAt) {
		return account.Token{}, account.ErrInvalidToken
	}
	if !slices.Contains(t.Confirmed, side) {
		t.Confirmed = append(slices.Clone(t.Confirmed), side)
	}
	s.m[id] = t
	return t, nil
}

func (s *memTokens) TakeConfirmed(_ context.Context, id, purpose, change string, sides []string, now time.Time) (account.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[id]
	if !ok || t.Purpose != purpose || t.Change != change || !now.Before(t.ExpiresAt) {
		return account.Token{}, account.ErrInvalidToken
	}
	for _, sd := range sides {
		if !slices.Contains(t.Confirmed, sd) {
			return account.Token{}, account.ErrInvalidToken
		}
	}
	delete(s.m, id)
	return t, nil
}

func (s *memTokens) DeleteByUser(_ context.Context, userID, purpose string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, t := range s.m {
		if t.UserID == userID && t.Purpose == purpose {
			delete(s.m, id)
		}
	}
	return nil
}

func (s *memTokens) DeleteExpired(context.Context, time.Time) error { return nil }

// stored reports whether any token is kept for the purpose.
func (s *memTokens) stored(purpose string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.m {
		if t.Purpose == purpose {
			n++
		}
	}
	return n
}

var emailRule = account.ThrottleRule{Max: 3, Window: time.Hour, Lock: time.Hour, LockMax: time.Hour}

// emailFixture is a Service with mail on, the address throttles set, and
// two users: alice (the caller) and bob (who owns bob@example.com). An
// update fails the test (nothing may change before the confirmations);
// emailStore lets it apply.
func emailFixture(t *testing.T) (*fixture, *mailbox, account.User) {
	f, mb, u, _ := emailStore(t)
	f.users.UpdateFn = func(context.Context, string, account.UserPatch, time.Time) (account.User, error) {
		t.Error("the user was updated by an address change that waits for confirmation")
		return u, nil
	}
	return f, mb, u
}

// emailStore is emailFixture whose updates apply to alice (an address
// bob has is ErrEmailTaken); the returned function reads alice as stored
// and how many updates were applied.
func emailStore(t *testing.T) (*fixture, *mailbox, account.User, func() (account.User, int)) {
	t.Helper()
	f := newFixture(t)
	cfg := policy
	cfg.EmailAccount, cfg.EmailTarget = emailRule, emailRule
	f.svc = account.NewService(f.users, f.sessions, f.throttle, f.hasher, f.pub, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mb := &mailbox{}
	f.svc.SetMail(mb, newMemTokens(), account.MailConfig{PublicURL: "http://console.test", ResetTTL: time.Minute, VerifyTTL: time.Hour})
	t.Cleanup(f.svc.Close)
	u := alice(t, f, "alice-password")
	bob := account.User{ID: "u2", Email: "Bob@Example.com", FullName: "Bob"}
	var mu sync.Mutex
	stored, updates := u, 0
	f.users.ByIDFn = func(_ context.Context, id string) (account.User, error) {
		mu.Lock()
		defer mu.Unlock()
		if id == u.ID {
			return stored, nil
		}
		return account.User{}, account.ErrUserNotFound
	}
	f.users.ByEmailFn = func(_ context.Context, email string) (account.User, error) {
		mu.Lock()
		defer mu.Unlock()
		switch email {
		case account.NormalizeEmail(stored.Email):
			return stored, nil
		case account.NormalizeEmail(bob.Email):
			return bob, nil
		}
		return account.User{}, account.ErrUserNotFound
	}
	f.users.UpdateFn = func(_ context.Context, id string, p account.UserPatch, _ time.Time) (account.User, error) {
		mu.Lock()
		defer mu.Unlock()
		if p.Email != nil && account.NormalizeEmail(*p.Email) == account.NormalizeEmail(bob.Email) {
			return account.User{}, account.ErrEmailTaken
		}
		if p.Email != nil {
			stored.Email = *p.Email
		}
		if p.EmailVerified != nil {
			stored.EmailVerified = *p.EmailVerified
		}
		updates++
		return stored, nil
	}
	return f, mb, u, func() (account.User, int) {
		mu.Lock()
		defer mu.Unlock()
		return stored, updates
	}
}

// The current password is optional; given, it must be right (a wrong one
// counts against the sign-in throttle), and agree with password.old.
func TestEmailChangeProofs(t *testing.T) {
	f, mb, u := emailFixture(t)
	var failed []string
	f.throttle.FailFn = func(_ context.Context, key string, _ account.ThrottleRule, _ time.Time) error {
		failed = append(failed, key)
		return nil
	}
	caller := account.Caller{UserID: u.ID}
	_, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("new@example.com"),
		CurrentPassword: ptr("alice-password"), Password: &account.PasswordChange{Old: ptr("other-password"), New: ptr("new-password-1")}})
	wantInvalid(t, err, "currentPassword", "invalid_value")
	if _, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("new@example.com"), CurrentPassword: ptr("wrong-password")}); !errors.Is(err, account.ErrWrongPassword) {
		t.Fatalf("wrong password: %v, want ErrWrongPassword", err)
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "account:") {
		t.Fatalf("failures counted %v, want one on the sign-in account key", failed)
	}
	// The own address unchanged needs nothing (the console sends only
	// what changed, other clients may send everything).
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
		t.Fatalf("mail sent for refused changes: %v", got)
	}
}

// Without mail nothing could confirm a change: the password is required
// (and the change applies at once).
func TestEmailChangeWithoutMailNeedsThePassword(t *testing.T) {
	f := newFixture(t)
	u := alice(t, f, "alice-password")
	f.users.ByIDFn = func(context.Context, string) (account.User, error) { return u, nil }
	f.users.UpdateFn = func(_ context.Context, _ string, p account.UserPatch, _ time.Time) (account.User, error) {
		v := u
		v.Email = *p.Email
		return v, nil
	}
	caller := account.Caller{UserID: u.ID}
	for _, pw := range []*string{nil, ptr("")} {
		_, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("new@example.com"), CurrentPassword: pw})
		wantInvalid(t, err, "currentPassword", "missing_field")
	}
	v, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("new@example.com"), CurrentPassword: ptr("alice-password")})
	if err != nil || v.Email != "new@example.com" {
		t.Fatalf("with the password: %+v %v", v, err)
	}
}

// E-mail alone: 200 with the user unchanged, a link to the new address
// and one to the current address; both confirmations, in either order,
// change the address (verified); one alone changes nothing.
func TestEmailChangeNeedsBothAddresses(t *testing.T) {
	for _, order := range [][]string{{"current", "new"}, {"new", "current"}, {"new"}, {"current"}} {
		t.Run(strings.Join(order, "-then-"), func(t *testing.T) {
			f, mb, u, stored := emailStore(t)
			v, ns, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: u.ID}, account.SelfPatch{Email: ptr("Alice.New@example.com")})
			if err != nil || ns != nil || v.Email != u.Email {
				t.Fatalf("email alone: %+v %v %v, want the unchanged user", v, ns, err)
			}
			f.svc.Close()
			want := []sentMail{{mailer.ConfirmEmailChange, u.Email}, {mailer.Verify, "Alice.New@example.com"}}
			if m := mb.all(); !slices.Equal(m, want) {
				t.Fatalf("mail %v, want %v", m, want)
			}
			cur, named := mb.token(mailer.ConfirmEmailChange, u.Email)
			if named != "Alice.New@example.com" {
				t.Fatalf("the current address's mail names %q", named)
			}
			nw, _ := mb.token(mailer.Verify, "Alice.New@example.com")
			for i, side := range order {
				var done bool
				var err error
				if side == "current" {
					_, done, err = f.svc.ConfirmEmailChange(ctx, cur, account.Client{})
				} else {
					_, done, err = f.svc.VerifyEmail(ctx, nw, account.Client{})
				}
				if last := i == 1; err != nil || done != last {
					t.Fatalf("confirmation %d (%s): done %v, %v", i, side, done, err)
				}
			}
			got, updates := stored()
			if len(order) == 1 {
				if got.Email != u.Email || updates != 0 {
					t.Fatalf("one confirmation changed the user: %+v (%d updates)", got, updates)
				}
				return
			}
			if got.Email != "Alice.New@example.com" || !got.EmailVerified || updates != 1 {
				t.Fatalf("after both confirmations: %+v (%d updates)", got, updates)
			}
			// Each link works once.
			if _, _, err := f.svc.ConfirmEmailChange(ctx, cur, account.Client{}); !errors.Is(err, account.ErrInvalidToken) {
				t.Fatalf("the current address's link again: %v", err)
			}
			if _, _, err := f.svc.VerifyEmail(ctx, nw, account.Client{}); !errors.Is(err, account.ErrInvalidToken) {
				t.Fatalf("the new address's link again: %v", err)
			}
		})
	}
}

// With the current password only the new address confirms; the current
// one is told.
func TestEmailChangeWithThePasswordNeedsOnlyTheNewAddress(t *testing.T) {
	f, mb, u, stored := emailStore(t)
	if _, _, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: u.ID}, account.SelfPatch{Email: ptr("alice.new@example.com"), CurrentPassword: ptr("alice-password")}); err != nil {
		t.Fatal(err)
	}
	f.svc.Close()
	want := []sentMail{{mailer.EmailChanged, u.Email}, {mailer.Verify, "alice.new@example.com"}}
	if m := mb.all(); !slices.Equal(m, want) {
		t.Fatalf("mail %v, want %v", m, want)
	}
	nw, _ := mb.token(mailer.Verify, "alice.new@example.com")
	if _, done, err := f.svc.VerifyEmail(ctx, nw, account.Client{}); err != nil || !done {
		t.Fatalf("the new address's link: done %v, %v", done, err)
	}
	if got, _ := stored(); got.Email != "alice.new@example.com" || !got.EmailVerified {
		t.Fatalf("after the new address's link: %+v", got)
	}
}

// A stolen session alone (no current mailbox, no password) cannot move the
// account: the thief's own link confirms only its side, used again or as
// the other side's link it is refused, and asking again voids it.
func TestEmailChangeStolenSessionCannotMoveTheAccount(t *testing.T) {
	f, mb, u, stored := emailStore(t)
	thief := account.Caller{UserID: u.ID}
	for range 2 {
		if _, _, err := f.svc.UpdateSelf(ctx, thief, account.SelfPatch{Email: ptr("thief@evil.example")}); err != nil {
			t.Fatal(err)
		}
		f.svc.Close()
		link, _ := mb.token(mailer.Verify, "thief@evil.example")
		if _, done, err := f.svc.VerifyEmail(ctx, link, account.Client{}); err != nil || done {
			t.Fatalf("the thief's link: done %v, %v; want confirmed, not done", done, err)
		}
		if _, _, err := f.svc.VerifyEmail(ctx, link, account.Client{}); !errors.Is(err, account.ErrInvalidToken) {
			t.Fatalf("the thief's link again: %v", err)
		}
		if _, _, err := f.svc.ConfirmEmailChange(ctx, link, account.Client{}); !errors.Is(err, account.ErrInvalidToken) {
			t.Fatalf("the thief's link as the current address's: %v", err)
		}
		if _, _, err := f.svc.UpdateSelf(ctx, thief, account.SelfPatch{Email: ptr("thief@evil.example"), CurrentPassword: ptr("a guess 123")}); !errors.Is(err, account.ErrWrongPassword) {
			t.Fatalf("a guessed password: %v", err)
		}
	}
	if got, n := stored(); got.Email != u.Email || n != 0 {
		t.Fatalf("the account moved: %+v (%d updates)", got, n)
	}
}

// A change to a taken address never completes: the current address's
// link confirms its side like any other (nothing tells the address is
// taken), no link goes to the taken address; and a free address taken by
// another account before the last confirmation fails that step with
// ErrEmailTaken.
func TestEmailChangeToATakenAddress(t *testing.T) {
	f, mb, u, stored := emailStore(t)
	caller := account.Caller{UserID: u.ID}
	if _, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("bob@example.com")}); err != nil {
		t.Fatal(err)
	}
	f.svc.Close()
	cur, _ := mb.token(mailer.ConfirmEmailChange, u.Email)
	if _, done, err := f.svc.ConfirmEmailChange(ctx, cur, account.Client{}); err != nil || done {
		t.Fatalf("the current address's link: done %v, %v; want confirmed, not done", done, err)
	}
	if link, _ := mb.token(mailer.Verify, "Bob@Example.com"); link != "" {
		t.Fatal("a link went to the taken address")
	}
	// late@ is free when asked for, another account's when the last link
	// is opened.
	apply := f.users.UpdateFn
	f.users.UpdateFn = func(ctx context.Context, id string, p account.UserPatch, now time.Time) (account.User, error) {
		if p.Email != nil && *p.Email == "late@example.com" {
			return account.User{}, account.ErrEmailTaken
		}
		return apply(ctx, id, p, now)
	}
	if _, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("late@example.com")}); err != nil {
		t.Fatal(err)
	}
	f.svc.Close()
	nw, _ := mb.token(mailer.Verify, "late@example.com")
	if _, done, err := f.svc.VerifyEmail(ctx, nw, account.Client{}); err != nil || done {
		t.Fatalf("new address: %v %v", done, err)
	}
	cur, _ = mb.token(mailer.ConfirmEmailChange, u.Email)
	if _, _, err := f.svc.ConfirmEmailChange(ctx, cur, account.Client{}); !errors.Is(err, account.ErrEmailTaken) {
		t.Fatalf("the last confirmation of an address taken meanwhile: %v, want ErrEmailTaken", err)
	}
	if got, n := stored(); got.Email != u.Email || n != 0 {
		t.Fatalf("the account changed: %+v (%d updates)", got, n)
	}
}

// A new request voids the pending change: the first request's links
// confirm nothing, the second's work.
func TestEmailChangeNewRequestVoidsThePendingOne(t *testing.T) {
	f, mb, u, stored := emailStore(t)
	caller := account.Caller{UserID: u.ID}
	if _, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("first@example.com")}); err != nil {
		t.Fatal(err)
	}
	f.svc.Close()
	cur1, _ := mb.token(mailer.ConfirmEmailChange, u.Email)
	new1, _ := mb.token(mailer.Verify, "first@example.com")
	if _, _, err := f.svc.ConfirmEmailChange(ctx, cur1, account.Client{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr("second@example.com")}); err != nil {
		t.Fatal(err)
	}
	f.svc.Close()
	if _, _, err := f.svc.VerifyEmail(ctx, new1, account.Client{}); !errors.Is(err, account.ErrInvalidToken) {
		t.Fatalf("the first change's new-address link after a second request: %v", err)
	}
	cur2, named := mb.token(mailer.ConfirmEmailChange, u.Email)
	new2, _ := mb.token(mailer.Verify, "second@example.com")
	if cur2 == cur1 || named != "second@example.com" {
		t.Fatalf("the second request's mail to the current address: %q %q", cur2, named)
	}
	if _, done, err := f.svc.VerifyEmail(ctx, new2, account.Client{}); err != nil || done {
		t.Fatalf("second change, new address: %v %v (the first change's confirmation must not count)", done, err)
	}
	if _, done, err := f.svc.ConfirmEmailChange(ctx, cur2, account.Client{}); err != nil || !done {
		t.Fatalf("second change, current address: %v %v", done, err)
	}
	if got, _ := stored(); got.Email != "second@example.com" {
		t.Fatalf("address %q", got.Email)
	}
}

// Each link is taken once however many uses race, and of the two sides
// confirmed at once exactly one applies the change, once.
func TestEmailChangeLinksAreSingleUseUnderConcurrency(t *testing.T) {
	for round := range 20 {
		f, mb, u, stored := emailStore(t)
		if _, _, err := f.svc.UpdateSelf(ctx, account.Caller{UserID: u.ID}, account.SelfPatch{Email: ptr("race@example.com")}); err != nil {
			t.Fatal(err)
		}
		f.svc.Close()
		cur, _ := mb.token(mailer.ConfirmEmailChange, u.Email)
		nw, _ := mb.token(mailer.Verify, "race@example.com")
		var mu sync.Mutex
		ok, done := map[string]int{}, 0
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				side := "current"
				var d bool
				var err error
				if i%2 == 0 {
					_, d, err = f.svc.ConfirmEmailChange(ctx, cur, account.Client{})
				} else {
					side = "new"
					_, d, err = f.svc.VerifyEmail(ctx, nw, account.Client{})
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok[side]++
					if d {
						done++
					}
				case !errors.Is(err, account.ErrInvalidToken):
					t.Errorf("confirm %s: %v", side, err)
				}
			})
		}
		wg.Wait()
		got, updates := stored()
		if ok["current"] != 1 || ok["new"] != 1 || done != 1 || updates != 1 || got.Email != "race@example.com" {
			t.Fatalf("round %d: uses %v, done %d, updates %d, address %q; want each link once, one change", round, ok, done, updates, got.Email)
		}
	}
}

// A taken and a free address get the same answer, with and without the
// password; what differs goes by mail: the free address gets the
// verification link, the taken one's owner a notice; the caller's address
// is told (with the password) or gets the confirmation link (without),
// the same mail for both addresses.
func TestEmailChangeAnswersAlikeForTakenAndFreeAddresses(t *testing.T) {
	for _, pw := range []*string{nil, ptr("alice-password")} {
		t.Run(fmt.Sprintf("password %v", pw != nil), func(t *testing.T) {
			f, mb, u := emailFixture(t)
			caller := account.Caller{UserID: u.ID}
			type outcome struct {
				user account.User
				ns   *account.NewSession
				err  error
			}
			var got []outcome
			var toCurrent []string
			for _, addr := range []string{"bob@EXAMPLE.com", "free@example.com"} {
				mb.reset()
				v, ns, err := f.svc.UpdateSelf(ctx, caller, account.SelfPatch{Email: ptr(addr), CurrentPassword: pw})
				got = append(got, outcome{v, ns, err})
				f.svc.Close()
				want := []sentMail{{mailer.EmailChanged, u.Email}}
				if pw == nil {
					want = []sentMail{{mailer.ConfirmEmailChange, u.Email}}
					_, named := mb.token(mailer.ConfirmEmailChange, u.Email)
					toCurrent = append(toCurrent, named)
				}
				if addr == "free@example.com" {
					want = append(want, sentMail{mailer.Verify, addr})
				} else {
					want = append(want, sentMail{mailer.EmailInUse, "Bob@Example.com"})
				}
				slices.SortFunc(want, func(a, b sentMail) int { return strings.Compare(a.name+a.to, b.name+b.to) })
				if m := mb.all(); !slices.Equal(m, want) {
					t.Fatalf("%s: mail sent %v, want %v", addr, m, want)
				}
			}
			for i, o := range got {
				if o.err != nil || o.ns != nil || o.user.Email != u.Email || o.user.ID != u.ID {
					t.Fatalf("change %d: %+v, want the unchanged user and no error", i, o)
				}
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Fatalf("answers differ: %+v / %+v", got[0], got[1])
			}
			if pw == nil && (toCurrent[0] != "bob@EXAMPLE.com" || toCurrent[1] != "free@example.com") {
				t.Fatalf("the current address's mails name %v", toCurrent)
			}
		})
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
