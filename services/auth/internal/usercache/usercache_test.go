package usercache

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
)

// store is a user store that counts reads.
type store struct {
	mu    sync.Mutex
	users map[string]account.User
	reads atomic.Int64
	// during, when set, runs in the middle of a read (after the value was
	// taken): a write racing the read.
	during func()
}

func (s *store) load(_ context.Context, id string) (account.User, error) {
	s.reads.Add(1)
	s.mu.Lock()
	u, ok := s.users[id]
	s.mu.Unlock()
	if s.during != nil {
		s.during()
	}
	if !ok {
		return account.User{}, account.ErrUserNotFound
	}
	return u, nil
}

func (s *store) set(u account.User) {
	s.mu.Lock()
	s.users[u.ID] = u
	s.mu.Unlock()
}

func newStore(ids ...string) *store {
	s := &store{users: map[string]account.User{}}
	for _, id := range ids {
		s.users[id] = account.User{ID: id, FullName: "v1", Role: account.RoleUser, PasswordHash: "$argon2id$secret"}
	}
	return s
}

func TestHitMissAndHashStripped(t *testing.T) {
	s := newStore("u1")
	c := New(time.Minute, 10, nil)
	ctx := context.Background()
	u, err := c.Get(ctx, "u1", s.load)
	if err != nil || u.FullName != "v1" || u.PasswordHash == "" {
		t.Fatalf("first Get: %+v %v (the caller gets what the store read)", u, err)
	}
	for range 5 {
		u, err = c.Get(ctx, "u1", s.load)
		if err != nil || u.FullName != "v1" {
			t.Fatalf("cached Get: %+v %v", u, err)
		}
		if u.PasswordHash != "" {
			t.Fatal("a cached user carries the password hash")
		}
	}
	if n := s.reads.Load(); n != 1 {
		t.Fatalf("%d store reads, want 1", n)
	}
	if st := c.Stats(); st.Hits != 5 || st.Misses != 1 || st.Bypassed != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Errors are not cached.
	if _, err := c.Get(ctx, "nobody", s.load); !errors.Is(err, account.ErrUserNotFound) {
		t.Fatalf("unknown user: %v", err)
	}
	if _, err := c.Get(ctx, "nobody", s.load); !errors.Is(err, account.ErrUserNotFound) || s.reads.Load() != 3 {
		t.Fatalf("unknown user again: %v, %d reads", err, s.reads.Load())
	}
}

func TestApply(t *testing.T) {
	s := newStore("u1", "u2")
	c := New(time.Minute, 10, nil)
	ctx := context.Background()
	_, _ = c.Get(ctx, "u1", s.load)
	_, _ = c.Get(ctx, "u2", s.load)
	apply := c.Apply(slog.New(slog.NewTextHandler(io.Discard, nil)))
	apply([]byte(`{"sessions":["abc"],"users":[]}`)) // a sign-out changes no user
	if c.Len() != 2 {
		t.Fatal("a sessions-only revocation dropped users")
	}
	apply([]byte(`{"sessions":[],"users":["u1"]}`))
	if c.Len() != 1 {
		t.Fatalf("%d entries after revoking u1, want 1", c.Len())
	}
	apply([]byte(`garbage`))
	if c.Len() != 0 {
		t.Fatal("an unreadable revocation must clear the cache")
	}
}
