package proxy

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"time"

	"github.com/acme/platform/gateway/internal/apierror"
	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/pkg/identity"
)

// Causes of a request's end the gateway decides (context.Cause).
var (
	errRevoked  = errors.New("the request's credential was revoked or changed")
	errShutdown = errors.New("the gateway is shutting down")
)

// credWatch is the session or API key a request was let in with.
type credWatch struct {
	res    *sessions.Resolver
	cred   string // the session id or the API key
	key    bool
	claims identity.Claims // as signed for the request
}

// valid reports whether the credential still resolves to the same user and
// role. Auth unreachable counts as valid (the next check decides): the
// fence and auth's answer are exact, an outage is not a revocation.
func (cw *credWatch) valid(ctx context.Context) bool {
	id, err := cw.res.Resolve(ctx, cw.cred)
	if errors.Is(err, sessions.ErrInvalid) {
		return false
	}
	return err != nil || id.UserID == cw.claims.Subject && id.Role == cw.claims.Role
}

// refusal is the answer to a request ended by errRevoked before its answer
// began.
func (cw *credWatch) refusal() apierror.Kind {
	if cw.key {
		return apierror.KeyRevoked
	}
	return apierror.SessionEnded
}

func isEventStream(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}

// gateWriter checks the credential before every write of a server-sent
// event stream: the check is fenced (sessions.Revocations), so a record
// written after a sign-out, key revocation or role change was answered is
// never sent; the stream ends instead (the write fails, the connection is
// cut). Other answers pass untouched.
type gateWriter struct {
	http.ResponseWriter
	h   *Handler
	t   *target
	ctx context.Context
}

func (g *gateWriter) Write(b []byte) (int, error) {
	if g.t.stream.Load() && !g.t.watch.valid(g.ctx) {
		g.h.cfg.Log.InfoContext(g.ctx, "stream ended: its credential was revoked or changed")
		g.t.cancel(errRevoked)
		return 0, errRevoked
	}
	return g.ResponseWriter.Write(b)
}

// Flush lets streaming answers through.
func (g *gateWriter) Flush() {
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the real writer.
func (g *gateWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// recheck ends t's request (cancel with errRevoked) when its credential no
// longer resolves to the same user and role, checking every interval until
// the request ends. A failure to reach auth keeps the request: it is
// checked again at the next tick.
func (h *Handler) recheck(ctx context.Context, t *target, every time.Duration) {
	if ctx.Err() != nil {
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if !t.watch.valid(ctx) {
			h.cfg.Log.InfoContext(ctx, "request ended: its credential was revoked or changed")
			t.cancel(errRevoked)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
