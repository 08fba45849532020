package logclient

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// SlogHandler returns a slog.Handler that writes every record to next and
// also publishes error-level records to the log stream as app, type
// "error", through c (never blocking: a full buffer drops and counts).
// Services use it so their own errors reach the administrators' log store.
func SlogHandler(next slog.Handler, c *Client, app string) slog.Handler {
	return &teeHandler{next: next, client: c, app: app}
}

type teeHandler struct {
	next   slog.Handler
	client *Client
	app    string
	attrs  []slog.Attr
	group  string
}

func (h *teeHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *teeHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelError {
		body := rec.Message
		add := func(a slog.Attr) bool {
			body += " " + a.Key + "=" + a.Value.String()
			return true
		}
		for _, a := range h.attrs {
			add(a)
		}
		rec.Attrs(add)
		h.client.Log(h.app, TypeError, body, "")
	}
	return h.next.Handle(ctx, rec)
}

func (h *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &teeHandler{next: h.next.WithAttrs(as), client: h.client, app: h.app,
		attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *teeHandler) WithGroup(name string) slog.Handler {
	return &teeHandler{next: h.next.WithGroup(name), client: h.client, app: h.app, attrs: h.attrs}
}

// SelfLogger is how a service reports its own errors: it returns a logger
// that writes JSON through base and also publishes error-level records as
// app over nc, and a function that flushes and closes the client (at most 5
// s) on shutdown. attrs are added to every record (for example "svc", name).
func SelfLogger(nc *nats.Conn, prefix string, base slog.Handler, app string, attrs ...any) (*slog.Logger, func(), error) {
	own := slog.New(base).With(attrs...)
	c, err := New(nc, Options{Prefix: prefix, Logger: own})
	if err != nil {
		return nil, nil, err
	}
	closeFn := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	}
	return slog.New(SlogHandler(base, c, app)).With(attrs...), closeFn, nil
}
