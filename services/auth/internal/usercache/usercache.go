// Package usercache keeps, in memory, users read by id and the address
// each was last found by, so that GET /me, GET /ms/me and POST /signin
// usually need no user read from the database, without ever serving a user
// that a write (on any auth replica) had changed before the request
// arrived. Users are a pkg/fencedcache cache fed by the revocation messages
// on <prefix>.auth.revoked:
//
//   - Every write that changes a user invalidates the entry here and
//     publishes {"users":[id]} on <prefix>.auth.revoked, flushed, before it
//     answers (account.Service); every replica applies those messages to
//     its cache (Apply, fed by pkg/natsfence).
//   - An entry is served only after the fence (natsfence.Fence.Sync)
//     succeeded for this request (pkg/fencedcache says why that is enough).
//
// Sign-in throttle states are not cached: every sign-in admits its attempt
// in the shared store (account.ThrottleStore), which is what makes the
// limit hold across replicas.
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
)

// Cache is an account.UserCache. The zero of ttl disables it (every Get
// loads).
type Cache struct {
	*fencedcache.Cache[account.User]

	mu     sync.Mutex
	emails map[string]string // normalised address -> user id
	max    int
}

// Stats are counts since the start.
type Stats = fencedcache.Stats

// New returns a cache keeping at most max users, for ttl each, and max
// addresses. fence must succeed before an entry is served or stored
// (natsfence.Fence.Sync); nil means no fence (single process, tests).
// SetFence (of fencedcache.Cache) sets it later; call that before serving.
func New(ttl time.Duration, max int, fence func(context.Context) error) *Cache {
	return &Cache{
		Cache:  fencedcache.New[account.User](ttl, max, fence),
		emails: map[string]string{},
		max:    max,
	}
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

// Clear drops everything (invalidations may have been missed).
func (c *Cache) Clear() {
	c.Cache.Clear()
	c.mu.Lock()
	clear(c.emails)
	c.mu.Unlock()
}

// Apply is the natsfence apply function for <prefix>.auth.revoked: it
// drops the users a revocation names (a message naming only sessions
// changes none; fields it does not know are ignored).
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
