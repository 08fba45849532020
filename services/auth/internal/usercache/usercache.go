// Package usercache keeps, in memory, users read by id, the address each
// was last found by, and sign-in throttle states, so that GET /me, GET
// /ms/me and POST /signin usually need no database read, without ever
// serving a user or a throttle state that a write (on any auth replica)
// had changed before the request arrived. Users and throttle states are
// pkg/fencedcache caches fed by the revocation messages on
// <prefix>.auth.revoked:
//
//   - Every write that changes a user, or a throttle key's state (a failure
//     counted, a lock, a reset), invalidates the entry here and publishes
//     {"users":[id]} or {"throttle":[key]} on <prefix>.auth.revoked,
//     flushed, before it answers (account.Service); every replica applies
//     those messages to its caches (Apply, fed by pkg/natsfence).
//   - An entry is served only after the fence (natsfence.Fence.Sync)
//     succeeded for this request (pkg/fencedcache says why that is enough).
//
// Cached users carry the password hash: a sign-in verifies against the
// cached user, which is as exact as the database read it replaces, since
// every password change is a user write and so an invalidation. The hash
// never leaves the process (no answer includes it).
//
// The address index (address -> user id) needs no invalidation: it is a
// hint, and the sign-in reads the user it names through the fenced cache
// and uses it only if that user still has the address (account.Service,
// signInUser). A user deleted or whose address moved sends the sign-in to
// the database.
package usercache

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/acme/platform/pkg/fencedcache"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/prometheus/client_golang/prometheus"
)

// Cache is an account.UserCache. The zero of ttl disables it (every Get
// and Throttle loads).
type Cache struct {
	*fencedcache.Cache[account.User]
	throttle *fencedcache.Cache[account.ThrottleState]

	mu     sync.Mutex
	emails map[string]string // normalised address -> user id
	max    int
}

// Stats are counts since the start.
type Stats = fencedcache.Stats

// New returns a cache keeping at most max users, max addresses and max
// throttle states, users and throttle states for ttl each. fence must
// succeed before an entry is served or stored (natsfence.Fence.Sync); nil
// means no fence (single process, tests).
func New(ttl time.Duration, max int, fence func(context.Context) error) *Cache {
	return &Cache{
		Cache:    fencedcache.New[account.User](ttl, max, fence),
		throttle: fencedcache.New[account.ThrottleState](ttl, max, fence),
		emails:   map[string]string{},
		max:      max,
	}
}

// SetFence sets the fence of both caches (see New). Call it before serving.
func (c *Cache) SetFence(fence func(context.Context) error) {
	c.Cache.SetFence(fence)
	c.throttle.SetFence(fence)
}

// UserIDByEmail implements account.UserCache.
func (c *Cache) UserIDByEmail(email string) (string, bool) {
	if !c.Enabled() {
		return "", false
	}
	c.mu.Lock()
	id, ok := c.emails[email]
	c.mu.Unlock()
	return id, ok
}

// RememberEmail implements account.UserCache. A full index is emptied
// (addresses are hints, cheap to find again).
func (c *Cache) RememberEmail(email, id string) {
	if !c.Enabled() {
		return
	}
	c.mu.Lock()
	if _, had := c.emails[email]; !had && len(c.emails) >= c.max {
		clear(c.emails)
	}
	c.emails[email] = id
	c.mu.Unlock()
}

// Throttle implements account.UserCache.
func (c *Cache) Throttle(ctx context.Context, key string, load func(context.Context, string) (account.ThrottleState, error)) (account.ThrottleState, error) {
	return c.throttle.Get(ctx, key, load)
}

// InvalidateThrottle implements account.UserCache.
func (c *Cache) InvalidateThrottle(keys ...string) { c.throttle.Invalidate(keys...) }

// Clear drops everything (invalidations may have been missed).
func (c *Cache) Clear() {
	c.Cache.Clear()
	c.throttle.Clear()
	c.mu.Lock()
	clear(c.emails)
	c.mu.Unlock()
}

// ThrottleCollectors are the throttle cache's metrics (fencedcache's
// Collectors).
func (c *Cache) ThrottleCollectors(namespace, subsystem string) []prometheus.Collector {
	return c.throttle.Collectors(namespace, subsystem, "sign-in throttle states by key")
}

// Apply is the natsfence apply function for <prefix>.auth.revoked: it
// drops the users and throttle keys a revocation names (a message naming
// only sessions changes neither).
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
		c.InvalidateThrottle(rev.Throttle...)
	}
}
