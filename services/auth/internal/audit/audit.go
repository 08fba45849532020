// Package audit writes the auth service's security events (account.Event)
// to the administrators' log store: each event is one record of the
// platform application App (default ACME-AUTH, whose errors are type
// "error") with type "log", published over NATS through pkg/logclient, so
// the logs service ingests it like any other record. The record's body is
// one JSON object (Record) and its metricsId is the request id, so GET
// /log/log/{page}/ACME-AUTH?metricsId=<request id> finds what one request
// did. An event is also written to the service's own log. Secrets never
// appear: events carry ids, addresses and names only.
package audit

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
)

// Type is the log type of audit records.
const Type = logclient.TypeLog

// Record is the JSON body of one audit record.
type Record struct {
	Audit       bool           `json:"audit"` // always true: tells audit records from other logs of App
	Event       string         `json:"event"`
	Actor       string         `json:"actor,omitempty"`  // user id of whoever acted; empty when nobody was signed in
	Target      string         `json:"target,omitempty"` // user id acted upon
	TargetEmail string         `json:"targetEmail,omitempty"`
	ClientIP    string         `json:"clientIp,omitempty"`
	UserAgent   string         `json:"userAgent,omitempty"`
	RequestID   string         `json:"requestId,omitempty"`
	Detail      map[string]any `json:"detail,omitempty"`
	At          time.Time      `json:"at"`
}

// Publisher queues a log record without blocking (logclient.Client).
type Publisher interface {
	Log(app, typ, body, metricsID string) bool
}

// Sink is an account.EventSink.
type Sink struct {
	pub Publisher
	app string
	log *slog.Logger
}

// New returns a sink publishing as app.
func New(pub Publisher, app string, log *slog.Logger) *Sink {
	return &Sink{pub: pub, app: app, log: log}
}

// Record implements account.EventSink.
func (s *Sink) Record(ctx context.Context, e account.Event) {
	r := Record{
		Audit: true, Event: e.Type, Actor: e.Actor, Target: e.Target, TargetEmail: e.TargetEmail,
		ClientIP: e.Client.IP, UserAgent: e.Client.UserAgent, RequestID: web.RequestIDFrom(ctx),
		Detail: e.Detail, At: time.Now().UTC(),
	}
	b, err := json.Marshal(r)
	if err != nil {
		s.log.ErrorContext(ctx, "audit event not encodable", "event", e.Type, "err", err)
		return
	}
	s.log.InfoContext(ctx, "audit", "event", e.Type, "actor", e.Actor, "target", e.Target, "ip", e.Client.IP)
	if !s.pub.Log(s.app, Type, string(b), r.RequestID) {
		// Counted and reported by the client (buffer full, closed).
		s.log.WarnContext(ctx, "audit record dropped", "event", e.Type)
	}
}
