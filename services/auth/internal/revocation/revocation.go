// Package revocation announces ended sessions and changed users on NATS so
// that every gateway replica drops its cached identities at once.
//
// Subject: <NATS_SUBJECT_PREFIX>.auth.revoked (core NATS, no JetStream: a
// gateway that misses a message still expires its cache within seconds).
// Payload: {"sessions":["<hex sha256 of the cookie value>",...],"users":["<user id>",...]}.
// Auth replicas apply the same messages to their user caches
// (services/auth/internal/usercache). Readers ignore fields they do not
// know.
package revocation

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/acme/platform/pkg/natsfence"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/nats-io/nats.go"
)

// Subject returns the revocation subject for a prefix.
func Subject(prefix string) string { return prefix + ".auth.revoked" }

// Publisher is the account.Publisher on a NATS connection.
type Publisher struct {
	nc      *nats.Conn
	subject string
	log     *slog.Logger
}

// NewPublisher publishes on Subject(prefix).
func NewPublisher(nc *nats.Conn, prefix string, log *slog.Logger) *Publisher {
	return &Publisher{nc: nc, subject: Subject(prefix), log: log}
}

// Revoked implements account.Publisher. Failures are logged, never returned.
func (p *Publisher) Revoked(ctx context.Context, r account.Revocation) {
	if len(r.Sessions) == 0 && len(r.Users) == 0 {
		return
	}
	if r.Sessions == nil {
		r.Sessions = []string{}
	}
	if r.Users == nil {
		r.Users = []string{}
	}
	body, err := json.Marshal(r)
	if err != nil {
		p.log.ErrorContext(ctx, "encode revocation", "err", err)
		return
	}
	// Flushed before the request that ended the sessions is answered: a
	// gateway fences its cache with a round trip to the same server
	// (gateway/internal/sessions), so every gateway refuses the session
	// from the next request on. While NATS is away the message waits in the
	// client's reconnect buffer, and a sign-out is not held up.
	err = natsfence.Publish(p.nc, p.subject, body)
	if err != nil {
		p.log.WarnContext(ctx, "publish revocation failed; gateways will expire their caches", "err", err,
			"sessions", len(r.Sessions), "users", len(r.Users))
	}
}
