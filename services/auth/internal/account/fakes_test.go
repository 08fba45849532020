package account_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/password"
)

// The fakes below implement the account service's stores with function
// fields: a test sets the fields its case needs; a nil field answers as an
// empty store would (not found, nothing done).

type userStore struct {
	CreateFn      func(ctx context.Context, u account.User) (account.User, error)
	ByIDFn        func(ctx context.Context, id string) (account.User, error)
	ByEmailFn     func(ctx context.Context, email string) (account.User, error)
	UpdateFn      func(ctx context.Context, id string, p account.UserPatch, now time.Time) (account.User, error)
	ReplaceHashFn func(ctx context.Context, id, old, new string) error
	DeleteFn      func(ctx context.Context, id string) error
	ListFn        func(ctx context.Context, skip, limit int) ([]account.User, int64, error)
	// LockMethodsFn nil: the lock is always free.
	LockMethodsFn func(ctx context.Context, id, holder string, now, until time.Time) (bool, error)
}

func (f *userStore) LockMethods(ctx context.Context, id, holder string, now, until time.Time) (bool, error) {
	if f.LockMethodsFn == nil {
		return true, nil
	}
	return f.LockMethodsFn(ctx, id, holder, now, until)
}

func (f *userStore) UnlockMethods(context.Context, string, string) error { return nil }

func (f *userStore) Create(ctx context.Context, u account.User) (account.User, error) {
	if f.CreateFn == nil {
		u.ID = "u-new"
		return u, nil
	}
	return f.CreateFn(ctx, u)
}

func (f *userStore) ByID(ctx context.Context, id string) (account.User, error) {
	if f.ByIDFn == nil {
		return account.User{}, account.ErrUserNotFound
	}
	return f.ByIDFn(ctx, id)
}

func (f *userStore) ByEmail(ctx context.Context, email string) (account.User, error) {
	if f.ByEmailFn == nil {
		return account.User{}, account.ErrUserNotFound
	}
	return f.ByEmailFn(ctx, email)
}

func (f *userStore) Update(ctx context.Context, id string, p account.UserPatch, now time.Time) (account.User, error) {
	if f.UpdateFn == nil {
		return account.User{}, account.ErrUserNotFound
	}
	return f.UpdateFn(ctx, id, p, now)
}

func (f *userStore) ReplaceHash(ctx context.Context, id, old, new string) error {
	if f.ReplaceHashFn == nil {
		return nil
	}
	return f.ReplaceHashFn(ctx, id, old, new)
}

func (f *userStore) Delete(ctx context.Context, id string) error {
	if f.DeleteFn == nil {
		return account.ErrUserNotFound
	}
	return f.DeleteFn(ctx, id)
}

func (f *userStore) List(ctx context.Context, skip, limit int) ([]account.User, int64, error) {
	if f.ListFn == nil {
		return nil, 0, nil
	}
	return f.ListFn(ctx, skip, limit)
}

type sessionStore struct {
	CreateFn        func(ctx context.Context, s account.Session) error
	ByIDFn          func(ctx context.Context, id string) (account.Session, error)
	ByPublicIDFn    func(ctx context.Context, userID, publicID string) (account.Session, error)
	TouchFn         func(ctx context.Context, id string, prev, now time.Time) error
	DeleteFn        func(ctx context.Context, id string) error
	ListByUserFn    func(ctx context.Context, userID string) ([]account.Session, error)
	DeleteByUserFn  func(ctx context.Context, userID, except string) ([]string, error)
	DeleteExpiredFn func(ctx context.Context, now, idleBefore time.Time) (int64, error)
	CountLiveFn     func(ctx context.Context, now, idleBefore time.Time) (int64, error)
}

func (f *sessionStore) Create(ctx context.Context, s account.Session) error {
	if f.CreateFn == nil {
		return nil
	}
	return f.CreateFn(ctx, s)
}

func (f *sessionStore) ByID(ctx context.Context, id string) (account.Session, error) {
	if f.ByIDFn == nil {
		return account.Session{}, account.ErrSessionNotFound
	}
	return f.ByIDFn(ctx, id)
}

func (f *sessionStore) ByPublicID(ctx context.Context, userID, publicID string) (account.Session, error) {
	if f.ByPublicIDFn == nil {
		return account.Session{}, account.ErrSessionNotFound
	}
	return f.ByPublicIDFn(ctx, userID, publicID)
}

func (f *sessionStore) Touch(ctx context.Context, id string, prev, now time.Time) error {
	if f.TouchFn == nil {
		return nil
	}
	return f.TouchFn(ctx, id, prev, now)
}

func (f *sessionStore) Delete(ctx context.Context, id string) error {
	if f.DeleteFn == nil {
		return account.ErrSessionNotFound
	}
	return f.DeleteFn(ctx, id)
}

func (f *sessionStore) ListByUser(ctx context.Context, userID string) ([]account.Session, error) {
	if f.ListByUserFn == nil {
		return nil, nil
	}
	return f.ListByUserFn(ctx, userID)
}

func (f *sessionStore) DeleteByUser(ctx context.Context, userID, except string) ([]string, error) {
	if f.DeleteByUserFn == nil {
		return nil, nil
	}
	return f.DeleteByUserFn(ctx, userID, except)
}

func (f *sessionStore) DeleteExpired(ctx context.Context, now, idleBefore time.Time) (int64, error) {
	if f.DeleteExpiredFn == nil {
		return 0, nil
	}
	return f.DeleteExpiredFn(ctx, now, idleBefore)
}

func (f *sessionStore) CountLive(ctx context.Context, now, idleBefore time.Time) (int64, error) {
	if f.CountLiveFn == nil {
		return 0, nil
	}
	return f.CountLiveFn(ctx, now, idleBefore)
}

// throttleStore admits every attempt unless CheckFn names its key locked
// or FailFn fails; FailFn sees every attempt counted (admitted), and the
// store records what was admitted and given back.
type throttleStore struct {
	CheckFn  func(ctx context.Context, keys []string) (map[string]time.Time, error)
	FailFn   func(ctx context.Context, key string, rule account.ThrottleRule, now time.Time) error
	ResetFn  func(ctx context.Context, key string) error
	ForgetFn func(ctx context.Context, now, before time.Time) error
	admitted []string // keys, in order
	released []string // keys, in order
}

func (f *throttleStore) Admit(ctx context.Context, now time.Time, reqs ...account.ThrottleRequest) ([]account.Ticket, error) {
	var tks []account.Ticket
	for _, r := range reqs {
		tk, err := f.admit(ctx, r.Key, r.Rule, now)
		if err != nil {
			_ = f.Release(ctx, tks...) // all or none
			return nil, err
		}
		tks = append(tks, tk)
	}
	return tks, nil
}

func (f *throttleStore) admit(ctx context.Context, key string, rule account.ThrottleRule, now time.Time) (account.Ticket, error) {
	locks, err := f.Check(ctx, []string{key})
	if err != nil {
		return account.Ticket{}, err
	}
	if until, ok := locks[key]; ok && until.After(now) {
		return account.Ticket{}, &account.ThrottledError{RetryAfter: until.Sub(now), Key: key}
	}
	if f.FailFn != nil {
		if err := f.FailFn(ctx, key, rule, now); err != nil {
			return account.Ticket{}, err
		}
	}
	f.admitted = append(f.admitted, key)
	// Not fresh: a success resets the key (what the tests look for).
	return account.Ticket{Key: key, Slot: key + "#1"}, nil
}

func (f *throttleStore) Release(_ context.Context, tks ...account.Ticket) error {
	for _, t := range tks {
		f.released = append(f.released, t.Key)
	}
	return nil
}

func (f *throttleStore) Check(ctx context.Context, keys []string) (map[string]time.Time, error) {
	if f.CheckFn == nil {
		return map[string]time.Time{}, nil
	}
	return f.CheckFn(ctx, keys)
}

func (f *throttleStore) Reset(ctx context.Context, key string, _ time.Time) error {
	if f.ResetFn == nil {
		return nil
	}
	return f.ResetFn(ctx, key)
}

func (f *throttleStore) Succeed(ctx context.Context, reset string, tks ...account.Ticket) error {
	if err := f.Reset(ctx, reset, time.Time{}); err != nil {
		return err
	}
	return f.Release(ctx, tks...)
}

func (f *throttleStore) Forget(ctx context.Context, now, before time.Time) error {
	if f.ForgetFn == nil {
		return nil
	}
	return f.ForgetFn(ctx, now, before)
}

// counted lists the keys admitted and not given back: the attempts that
// counted as failures.
func (f *throttleStore) counted() []string {
	out := slices.Clone(f.admitted)
	for _, r := range f.released {
		if i := slices.Index(out, r); i >= 0 {
			out = slices.Delete(out, i, i+1)
		}
	}
	return out
}

// reset forgets what was admitted and released.
func (f *throttleStore) clear() { f.admitted, f.released = nil, nil }

// publisher records the revocations announced.
type publisher struct {
	mu  sync.Mutex
	got []account.Revocation
}

func (p *publisher) Revoked(_ context.Context, r account.Revocation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, r)
}

func (p *publisher) all() []account.Revocation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]account.Revocation(nil), p.got...)
}

// userEvents records the deletions announced.
type userEvents struct {
	DeletedFn func(ctx context.Context, userID string) error
}

func (f *userEvents) Deleted(ctx context.Context, userID string) error {
	if f.DeletedFn == nil {
		return nil
	}
	return f.DeletedFn(ctx, userID)
}

// cheap are argon2id parameters that make a hash in well under a
// millisecond: the tests are about the rules, not the cost.
var cheap = password.Params{MemoryKiB: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

// fixture is a Service on fakes.
type fixture struct {
	svc      *account.Service
	users    *userStore
	sessions *sessionStore
	throttle *throttleStore
	pub      *publisher
	hasher   *password.Hasher
}

var policy = account.Config{
	SessionTTL:    7 * 24 * time.Hour,
	SessionIdle:   24 * time.Hour,
	TouchInterval: time.Minute,
	Account:       account.ThrottleRule{Max: 5, Window: time.Minute, Lock: time.Minute, LockMax: time.Hour},
	Address:       account.ThrottleRule{Max: 20, Window: time.Minute, Lock: time.Minute, LockMax: time.Hour},
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	h, err := password.NewHasher(cheap, 2)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{users: &userStore{}, sessions: &sessionStore{}, throttle: &throttleStore{}, pub: &publisher{}, hasher: h}
	f.svc = account.NewService(f.users, f.sessions, f.throttle, h, f.pub, policy, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return f
}

// hash hashes pw with the fixture's hasher.
func (f *fixture) hash(t *testing.T, pw string) string {
	t.Helper()
	h, err := f.hasher.Hash(context.Background(), pw)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// withUser makes the user store hold u (by id and by e-mail).
func (f *fixture) withUser(u account.User) {
	f.users.ByIDFn = func(_ context.Context, id string) (account.User, error) {
		if id != u.ID {
			return account.User{}, account.ErrUserNotFound
		}
		return u, nil
	}
	f.users.ByEmailFn = func(_ context.Context, email string) (account.User, error) {
		if email != account.NormalizeEmail(u.Email) {
			return account.User{}, account.ErrUserNotFound
		}
		return u, nil
	}
}
