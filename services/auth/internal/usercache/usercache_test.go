package usercache

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
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

func TestHitMissKeepsHash(t *testing.T) {
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
		if u.PasswordHash != "$argon2id$secret" {
			t.Fatalf("a cached user carries hash %q: sign-ins verify against it", u.PasswordHash)
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

// A revocation carrying fields this reader does not know (such as the
// "throttle" list older auth versions sent) still drops the users it
// names and nothing else; the address index is a hint kept until Clear,
// and disabled with the cache.
func TestUnknownFieldsAndAddresses(t *testing.T) {
	s := newStore("u1", "u2")
	c := New(time.Minute, 10, nil)
	ctx := context.Background()
	_, _ = c.Get(ctx, "u1", s.load)
	_, _ = c.Get(ctx, "u2", s.load)
	apply := c.Apply(slog.New(slog.NewTextHandler(io.Discard, nil)))
	apply([]byte(`{"sessions":[],"users":["u1"],"throttle":["account:x"]}`))
	if c.Len() != 1 {
		t.Fatalf("%d entries after a revocation of u1 with an unknown field, want 1", c.Len())
	}
	_, _ = c.Get(ctx, "u2", s.load)
	if n := s.reads.Load(); n != 2 {
		t.Fatalf("%d store reads, want 2 (u2 kept)", n)
	}

	c.RememberEmail("fay@example.com", "u1")
	if id, ok := c.UserIDByEmail("fay@example.com"); !ok || id != "u1" {
		t.Fatalf("address index: %q %v", id, ok)
	}
	apply([]byte(`garbage`))
	if _, ok := c.UserIDByEmail("fay@example.com"); ok {
		t.Fatal("Clear kept the address index")
	}
	for i := range 25 { // a full index starts over, never grows past max
		c.RememberEmail(strconv.Itoa(i)+"@example.com", "u")
	}
	if len(c.emails) > 10 {
		t.Fatalf("%d addresses kept, max 10", len(c.emails))
	}

	off := New(0, 10, nil)
	off.RememberEmail("fay@example.com", "u1")
	if _, ok := off.UserIDByEmail("fay@example.com"); ok {
		t.Fatal("a disabled cache remembered an address")
	}
}
