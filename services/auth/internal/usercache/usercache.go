// Package usercache keeps users read by id in memory, so that GET /me and
// GET /ms/me usually need no database read, without ever serving a user
// that a write (on any auth replica) had changed before the request
// arrived. It is a pkg/fencedcache of users, fed by the revocation
// messages on <prefix>.auth.revoked:
//
//   - Every write that changes a user invalidates the entry here and
//     publishes {"users":[id]} on <prefix>.auth.revoked, flushed, before it
//     answers (account.Service); every replica applies those messages to its
//     cache (Apply, fed by pkg/natsfence).
//   - An entry is served only after the fence (natsfence.Fence.Sync)
//     succeeded for this request (pkg/fencedcache says why that is enough).
//
// Entries never hold the password hash: a cached user is for showing and
// for identity, never for verifying a password.
package usercache

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/acme/platform/pkg/fencedcache"
	"github.com/acme/platform/services/auth/internal/account"
)

// Cache is an account.UserCache. The zero of ttl disables it (every Get
// loads).
type Cache struct {
	*fencedcache.Cache[account.User]
}

// Stats are counts since the start.
type Stats = fencedcache.Stats

// New returns a cache keeping at most max users for ttl each. fence must
// succeed before an entry is served or stored (natsfence.Fence.Sync); nil
// means no fence (single process, tests).
func New(ttl time.Duration, max int, fence func(context.Context) error) *Cache {
	c := fencedcache.New[account.User](ttl, max, fence)
	c.SetKeep(func(u account.User) account.User { u.PasswordHash = ""; return u })
	return &Cache{c}
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
