package usercache

import (
	"context"
	"errors"
	"fmt"
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

func TestTTL(t *testing.T) {
	s := newStore("u1")
	c := New(time.Minute, 10, nil)
	now := time.Now()
	c.now = func() time.Time { return now }
	ctx := context.Background()
	_, _ = c.Get(ctx, "u1", s.load)
	now = now.Add(59 * time.Second)
	_, _ = c.Get(ctx, "u1", s.load)
	if s.reads.Load() != 1 {
		t.Fatal("entry expired before its TTL")
	}
	now = now.Add(time.Second)
	_, _ = c.Get(ctx, "u1", s.load)
	if s.reads.Load() != 2 {
		t.Fatal("entry served at its TTL")
	}
}

func TestDisabled(t *testing.T) {
	s := newStore("u1")
	for _, c := range []*Cache{New(0, 10, nil), nil} {
		for range 3 {
			if _, err := c.Get(context.Background(), "u1", s.load); err != nil {
				t.Fatal(err)
			}
		}
		c.Invalidate("u1") // no-op, no panic
	}
	if s.reads.Load() != 6 {
		t.Fatalf("%d reads, want 6 (TTL 0 or no cache: always the store)", s.reads.Load())
	}
}

func TestInvalidateAndClear(t *testing.T) {
	s := newStore("u1", "u2")
	c := New(time.Minute, 10, nil)
	ctx := context.Background()
	_, _ = c.Get(ctx, "u1", s.load)
	_, _ = c.Get(ctx, "u2", s.load)
	s.set(account.User{ID: "u1", FullName: "v2"})
	c.Invalidate("u1")
	if u, _ := c.Get(ctx, "u1", s.load); u.FullName != "v2" {
		t.Fatalf("after Invalidate: %q, want v2", u.FullName)
	}
	if _, _ = c.Get(ctx, "u2", s.load); s.reads.Load() != 3 {
		t.Fatal("Invalidate of u1 dropped u2")
	}
	c.Clear()
	if c.Len() != 0 {
		t.Fatalf("%d entries after Clear", c.Len())
	}
}

// A read that began before an invalidation and ended after it may hold
// the old user: it is returned to its own request (which arrived before
// the write answered) but never stored.
func TestReadRacingInvalidationNotStored(t *testing.T) {
	s := newStore("u1")
	c := New(time.Minute, 10, nil)
	ctx := context.Background()
	s.during = func() {
		s.during = nil
		// the write commits and is announced while the old value is in flight
		s.set(account.User{ID: "u1", FullName: "v2"})
		c.Invalidate("u1")
	}
	if u, _ := c.Get(ctx, "u1", s.load); u.FullName != "v1" {
		t.Fatalf("racing read got %q", u.FullName)
	}
	if u, _ := c.Get(ctx, "u1", s.load); u.FullName != "v2" {
		t.Fatalf("after the racing read: %q, want v2 (the old value was stored)", u.FullName)
	}
	// Clear counts as an invalidation too.
	c.Invalidate("u1")
	s.during = func() { s.during = nil; s.set(account.User{ID: "u1", FullName: "v3"}); c.Clear() }
	_, _ = c.Get(ctx, "u1", s.load)
	if u, _ := c.Get(ctx, "u1", s.load); u.FullName != "v3" {
		t.Fatalf("after a read racing Clear: %q, want v3", u.FullName)
	}
}

// When the fence fails (NATS away) the store is read and nothing is
// served from or stored in the cache; the fence runs before every Get.
func TestFence(t *testing.T) {
	s := newStore("u1")
	var down atomic.Bool
	var fences atomic.Int64
	c := New(time.Minute, 10, func(context.Context) error {
		fences.Add(1)
		if down.Load() {
			return errors.New("nats down")
		}
		return nil
	})
	ctx := context.Background()
	_, _ = c.Get(ctx, "u1", s.load)
	_, _ = c.Get(ctx, "u1", s.load)
	if s.reads.Load() != 1 || fences.Load() != 2 {
		t.Fatalf("%d reads, %d fences; want 1 and 2", s.reads.Load(), fences.Load())
	}
	down.Store(true)
	s.set(account.User{ID: "u1", FullName: "v2"})
	for range 3 {
		if u, _ := c.Get(ctx, "u1", s.load); u.FullName != "v2" {
			t.Fatalf("fence failed but the cache answered %q", u.FullName)
		}
	}
	if s.reads.Load() != 4 || c.Stats().Bypassed != 3 {
		t.Fatalf("%d reads, stats %+v", s.reads.Load(), c.Stats())
	}
	// Nothing was stored while down: the entry is still v1's, until the
	// invalidation that the fence would have delivered is applied.
	c.Invalidate("u1")
	if c.Len() != 0 {
		t.Fatal("a read with a failed fence was stored")
	}
}

func TestBounded(t *testing.T) {
	s := newStore()
	for i := range 100 {
		s.users[fmt.Sprint(i)] = account.User{ID: fmt.Sprint(i)}
	}
	c := New(time.Minute, 10, nil)
	for i := range 100 {
		if _, err := c.Get(context.Background(), fmt.Sprint(i), s.load); err != nil {
			t.Fatal(err)
		}
		if c.Len() > 10 {
			t.Fatalf("%d entries, bound is 10", c.Len())
		}
	}
	// The newest entry is in.
	before := s.reads.Load()
	_, _ = c.Get(context.Background(), "99", s.load)
	if s.reads.Load() != before {
		t.Fatal("the entry just stored was evicted")
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

// Concurrent Gets, writes and invalidations: after a write and its
// Invalidate have returned, no Get that starts later sees the old value.
func TestConcurrentNeverStaleAfterInvalidate(t *testing.T) {
	s := newStore("u1")
	c := New(time.Minute, 10, nil)
	ctx := context.Background()
	var version atomic.Int64 // last version whose invalidation returned
	version.Store(1)
	s.set(account.User{ID: "u1", EDV: "1"})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for v := int64(2); ; v++ {
			select {
			case <-stop:
				return
			default:
			}
			s.set(account.User{ID: "u1", EDV: fmt.Sprint(v)})
			c.Invalidate("u1")
			version.Store(v)
		}
	})
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				min := version.Load()
				u, err := c.Get(ctx, "u1", s.load)
				if err != nil {
					t.Error(err)
					return
				}
				var got int64
				fmt.Sscan(u.EDV, &got)
				if got < min {
					t.Errorf("Get returned version %d after version %d was announced", got, min)
					return
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
}
