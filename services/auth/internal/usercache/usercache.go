// Package usercache keeps users read by id in memory, so that GET /me and
// GET /ms/me usually need no database read, without ever serving a user
// that a write (on any auth replica) had changed before the request
// arrived.
//
// Correctness across replicas rests on two things:
//
//   - Every write that changes a user invalidates the entry here and
//     publishes {"users":[id]} on <prefix>.auth.revoked, flushed, before it
//     answers (account.Service); every replica applies those messages to its
//     cache (Apply, fed by pkg/natsfence).
//   - An entry is served only after the fence (natsfence.Fence.Sync)
//     succeeded for this request: a NATS round trip begun after the request
//     arrived, after which every invalidation published before has been
//     applied. When the fence fails (NATS away) the database is read and
//     nothing is stored.
//
// A read that raced an invalidation is not stored: every invalidation (and
// Clear) bumps a sequence number, and an answer is stored only if the
// sequence did not move while it was being read.
//
// Entries never hold the password hash: a cached user is for showing and
// for identity, never for verifying a password.
package usercache

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
)

// Cache is an account.UserCache. The zero of ttl disables it (every Get
// loads).
type Cache struct {
	ttl   time.Duration
	max   int
	fence func(context.Context) error
	now   func() time.Time

	mu  sync.Mutex
	m   map[string]entry
	seq uint64 // bumped by every invalidation and Clear

	hits, misses, bypassed atomic.Uint64
}

type entry struct {
	u       account.User
	expires time.Time
}

// New returns a cache keeping at most max users for ttl each. fence must
// succeed before an entry is served or stored (natsfence.Fence.Sync); nil
// means no fence (single process, tests).
func New(ttl time.Duration, max int, fence func(context.Context) error) *Cache {
	if max < 1 {
		max = 1
	}
	return &Cache{ttl: ttl, max: max, fence: fence, now: time.Now, m: map[string]entry{}}
}

// SetFence sets the fence (see New). Call it before serving.
func (c *Cache) SetFence(fence func(context.Context) error) { c.fence = fence }

// Enabled reports whether the cache serves anything.
func (c *Cache) Enabled() bool { return c != nil && c.ttl > 0 }

// Get returns the user id, from the cache when the fence allows it, else
// from load (whose answer is then stored when that is safe).
func (c *Cache) Get(ctx context.Context, id string, load func(context.Context, string) (account.User, error)) (account.User, error) {
	if !c.Enabled() {
		return load(ctx, id)
	}
	// The fence first: invalidations published before this request are
	// applied before the cache and the sequence are read.
	if c.fence != nil && c.fence(ctx) != nil {
		c.bypassed.Add(1)
		return load(ctx, id)
	}
	c.mu.Lock()
	e, ok := c.m[id]
	seq := c.seq
	c.mu.Unlock()
	if ok && c.now().Before(e.expires) {
		c.hits.Add(1)
		return e.u, nil
	}
	c.misses.Add(1)
	u, err := load(ctx, id)
	if err != nil {
		return u, err
	}
	stored := u
	stored.PasswordHash = ""
	c.mu.Lock()
	if c.seq == seq { // no invalidation while we read: u is not older than one
		if _, had := c.m[id]; !had && len(c.m) >= c.max {
			c.makeRoomLocked()
		}
		c.m[id] = entry{u: stored, expires: c.now().Add(c.ttl)}
	}
	c.mu.Unlock()
	return u, nil
}

// makeRoomLocked drops expired entries, or, when none is, an arbitrary one.
func (c *Cache) makeRoomLocked() {
	t := c.now()
	for id, e := range c.m {
		if !t.Before(e.expires) {
			delete(c.m, id)
		}
	}
	for id := range c.m {
		if len(c.m) < c.max {
			return
		}
		delete(c.m, id)
	}
}

// Invalidate drops these users (account.UserCache).
func (c *Cache) Invalidate(ids ...string) {
	if c == nil || len(ids) == 0 {
		return
	}
	c.mu.Lock()
	c.seq++
	for _, id := range ids {
		delete(c.m, id)
	}
	c.mu.Unlock()
}

// Clear drops everything (invalidations may have been missed).
func (c *Cache) Clear() {
	c.mu.Lock()
	c.seq++
	c.m = map[string]entry{}
	c.mu.Unlock()
}

// Len returns the number of entries (expired ones included).
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Stats are counts since the start.
type Stats struct {
	Hits, Misses, Bypassed uint64 // bypassed: the fence failed, the database was read
}

// Stats returns the counts so far.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Bypassed: c.bypassed.Load()}
}

// Apply is the natsfence apply function for <prefix>.auth.revoked: it
// drops the users a revocation names (a message naming only sessions
// changes no user).
func (c *Cache) Apply(log *slog.Logger) func([]byte) {
	return func(data []byte) {
		var rev account.Revocation
		if err := json.Unmarshal(data, &rev); err != nil {
			log.Warn("bad revocation message", "err", err)
			// We cannot tell whom it named: forget everyone.
			c.Clear()
			return
		}
		c.Invalidate(rev.Users...)
	}
}
