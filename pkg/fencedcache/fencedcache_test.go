package fencedcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type rec struct{ ID, V string }

var errNotFound = errors.New("not found")

// store is a map that counts reads.
type store struct {
	mu    sync.Mutex
	recs  map[string]rec
	reads atomic.Int64
	// during, when set, runs in the middle of a read (after the value was
	// taken): a write racing the read.
	during func()
}

func (s *store) load(_ context.Context, id string) (rec, error) {
	s.reads.Add(1)
	s.mu.Lock()
	r, ok := s.recs[id]
	s.mu.Unlock()
	if s.during != nil {
		s.during()
	}
	if !ok {
		return rec{}, errNotFound
	}
	return r, nil
}

func (s *store) set(r rec) {
	s.mu.Lock()
	s.recs[r.ID] = r
	s.mu.Unlock()
}

func newStore(ids ...string) *store {
	s := &store{recs: map[string]rec{}}
	for _, id := range ids {
		s.recs[id] = rec{ID: id, V: "v1"}
	}
	return s
}

func TestCachedAndErrorsNotStored(t *testing.T) {
	s := newStore("a")
	c := New[rec](time.Minute, 10, nil)
	ctx := context.Background()
	if r, err := c.Get(ctx, "a", s.load); err != nil || r.V != "v1" {
		t.Fatalf("first Get: %+v %v (the caller gets what was loaded)", r, err)
	}
	if r, _ := c.Get(ctx, "a", s.load); r.V != "v1" || s.reads.Load() != 1 {
		t.Fatalf("second Get: %+v after %d reads, want the value from the cache", r, s.reads.Load())
	}
	for range 2 {
		if _, err := c.Get(ctx, "missing", s.load); !errors.Is(err, errNotFound) {
			t.Fatalf("missing: %v", err)
		}
	}
	if s.reads.Load() != 3 || c.Len() != 1 {
		t.Fatalf("%d reads, %d entries: an error was cached", s.reads.Load(), c.Len())
	}
	if st := c.Stats(); st.Hits != 1 || st.Misses != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTTL(t *testing.T) {
	s := newStore("u1")
	c := New[rec](time.Minute, 10, nil)
	now := time.Now()
	c.Now = func() time.Time { return now }
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
	for _, c := range []*Cache[rec]{New[rec](0, 10, nil), nil} {
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
	c := New[rec](time.Minute, 10, nil)
	ctx := context.Background()
	_, _ = c.Get(ctx, "u1", s.load)
	_, _ = c.Get(ctx, "u2", s.load)
	s.set(rec{ID: "u1", V: "v2"})
	c.Invalidate("u1")
	if u, _ := c.Get(ctx, "u1", s.load); u.V != "v2" {
		t.Fatalf("after Invalidate: %q, want v2", u.V)
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
	c := New[rec](time.Minute, 10, nil)
	ctx := context.Background()
	s.during = func() {
		s.during = nil
		// the write commits and is announced while the old value is in flight
		s.set(rec{ID: "u1", V: "v2"})
		c.Invalidate("u1")
	}
	if u, _ := c.Get(ctx, "u1", s.load); u.V != "v1" {
		t.Fatalf("racing read got %q", u.V)
	}
	if u, _ := c.Get(ctx, "u1", s.load); u.V != "v2" {
		t.Fatalf("after the racing read: %q, want v2 (the old value was stored)", u.V)
	}
	// Clear counts as an invalidation too.
	c.Invalidate("u1")
	s.during = func() { s.during = nil; s.set(rec{ID: "u1", V: "v3"}); c.Clear() }
	_, _ = c.Get(ctx, "u1", s.load)
	if u, _ := c.Get(ctx, "u1", s.load); u.V != "v3" {
		t.Fatalf("after a read racing Clear: %q, want v3", u.V)
	}
}

// When the fence fails (NATS away) the store is read and nothing is
// served from or stored in the cache; the fence runs before every Get.
func TestFence(t *testing.T) {
	s := newStore("u1")
	var down atomic.Bool
	var fences atomic.Int64
	c := New[rec](time.Minute, 10, func(context.Context) error {
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
	s.set(rec{ID: "u1", V: "v2"})
	for range 3 {
		if u, _ := c.Get(ctx, "u1", s.load); u.V != "v2" {
			t.Fatalf("fence failed but the cache answered %q", u.V)
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
		s.recs[fmt.Sprint(i)] = rec{ID: fmt.Sprint(i)}
	}
	c := New[rec](time.Minute, 10, nil)
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

// Concurrent Gets, writes and invalidations: after a write and its
// Invalidate have returned, no Get that starts later sees the old value.
func TestConcurrentNeverStaleAfterInvalidate(t *testing.T) {
	s := newStore("u1")
	c := New[rec](time.Minute, 10, nil)
	ctx := context.Background()
	var version atomic.Int64 // last version whose invalidation returned
	version.Store(1)
	s.set(rec{ID: "u1", V: "1"})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for v := int64(2); ; v++ {
			select {
			case <-stop:
				return
			default:
			}
			s.set(rec{ID: "u1", V: fmt.Sprint(v)})
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
				fmt.Sscan(u.V, &got)
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
