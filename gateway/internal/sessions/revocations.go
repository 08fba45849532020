package sessions

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/acme/platform/pkg/natsfence"
	"github.com/nats-io/nats.go"
)

// Revocations applies auth's revocation messages to a Resolver and fences
// the Resolver's cache, so that a session ended through any gateway replica
// is refused by every replica from the next request on, not within the
// cache TTL.
//
// The fence is pkg/natsfence (shared with auth's user cache): auth
// publishes a revocation and flushes it before it answers the request that
// ended the session; before serving a cached identity, the gateway makes a
// NATS round trip that started after the request arrived and waits until
// every message delivered before its PONG has been applied. Concurrent
// requests share round trips. When the round trip fails (NATS away) the
// resolver asks auth for every request, which is also exact. After a
// reconnect or a dropped message (slow consumer) the whole cache is
// cleared, since revocations may have been missed.
type Revocations struct {
	f *natsfence.Fence
}

// NewRevocations subscribes to subject on nc and applies every revocation
// to r and to more (the API key resolver). Call Close when done; Sync is
// the fence (see Resolver.SetFence).
func NewRevocations(nc *nats.Conn, subject string, r *Resolver, log *slog.Logger, more ...*Resolver) (*Revocations, error) {
	all := append([]*Resolver{r}, more...)
	f, err := natsfence.New(nc, subject, func(data []byte) {
		var rev Revocation
		if err := json.Unmarshal(data, &rev); err != nil {
			log.Warn("bad revocation message", "err", err)
			return
		}
		for _, r := range all {
			r.Apply(rev)
		}
	}, func() {
		for _, r := range all {
			r.Clear()
		}
	}, log)
	if err != nil {
		return nil, err
	}
	return &Revocations{f: f}, nil
}

// Close unsubscribes and stops applying.
func (rv *Revocations) Close() { rv.f.Close() }

// Sync returns nil once every revocation published (and flushed) before
// the call has been applied, or an error when that cannot be known (NATS
// unreachable): then cached answers must not be trusted.
func (rv *Revocations) Sync(ctx context.Context) error { return rv.f.Sync(ctx) }
