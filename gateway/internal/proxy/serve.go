package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/acme/platform/gateway/internal/apierror"
	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/gateway/internal/upstream"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/web"
)

// ServeHTTP implements the request path.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := r.Header.Get(web.RequestIDHeader)
	if !web.ValidRequestID(rid) {
		rid = web.NewRequestID()
	}
	w.Header().Set(web.RequestIDHeader, rid)
	r = r.WithContext(web.WithRequestID(r.Context(), rid))
	// Requests are counted by route table entry (metrics.Middleware around
	// the gateway's mux), never by raw path.
	if route, ok := match(r.URL.Path); ok {
		metrics.SetRoute(r.Context(), route.Prefix)
	} else {
		metrics.SetRoute(r.Context(), metrics.Unmatched)
	}
	sw := &statusWriter{ResponseWriter: w}
	start := time.Now()
	svc := h.serve(sw, r, rid)
	// Typed attributes: the same line as Info with key-value pairs, without
	// boxing each value (this runs for every request).
	h.cfg.Log.LogAttrs(context.Background(), slog.LevelInfo, "request", slog.String("rid", rid),
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("upstream", svc),
		slog.Int("status", sw.status()), slog.Int64("bytes", sw.bytes), slog.Int64("dur_ms", time.Since(start).Milliseconds()))
}

// serve takes a request through the gateway's checks to its service and
// returns the service named in the access line ("" when no route was
// reached, "gateway" when the gateway answered itself).
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, rid string) string {
	stripIdentityHeaders(r.Header)
	if !h.admit(w, r) {
		return ""
	}
	route, ok := match(r.URL.Path)
	if !ok {
		apierror.Write(w, apierror.NoRoute)
		return ""
	}
	group := h.upstreamOf(route)
	if group == nil {
		apierror.Write(w, apierror.ServiceNotDeployed, route.Service)
		return route.Service
	}
	if route.Access != Service && route.Access != ServiceOrKey {
		r.Header.Del("X-Service-Credential")
	}
	authz := r.Header.Get("Authorization")
	// A download handed off to this caller before starts its object fetch
	// now, while the caller is checked and the files service asked
	// (prefetch.go); nothing of it is sent unless both agree.
	preKey, pre := h.prefetchFor(r, route, authz)
	if pre != nil {
		defer pre.drop()
	}
	r.Header.Del("Authorization") // never forwarded: an API key stays here
	c, ok := h.authenticate(w, r, route, authz)
	if !ok {
		return route.Service
	}
	if c.me != nil {
		writeMe(w, c.me)
		return "gateway"
	}
	tok, err := h.token(c.claims, route.Service)
	if err != nil {
		apierror.Write(w, apierror.Internal)
		return route.Service
	}
	lb, ok := h.limitBody(w, r, route)
	if !ok {
		return route.Service
	}
	h.forward(w, r, &target{group: group, token: tok, rid: rid, service: route.Service,
		hash: c.hash, body: lb, preKey: preKey, pre: pre, watch: c.watch})
	return route.Service
}

// upstreamOf is the balancer of route's service, nil when it is not
// deployed.
func (h *Handler) upstreamOf(route Route) *upstream.Group {
	name := route.Service
	if route.Upstream != "" {
		name = route.Upstream
	}
	g := h.cfg.Upstreams[name]
	if g == nil || !g.Deployed() {
		return nil
	}
	return g
}

// limitBody bounds r's body by its route's limit (Config.BodyLimits): a
// declared length over it is refused (false, answered), a body of unknown
// length fails once it passes it.
func (h *Handler) limitBody(w http.ResponseWriter, r *http.Request, route Route) (*limitedBody, bool) {
	limitKey := route.Service
	switch {
	case r.URL.Path == "/upload/image":
		limitKey = "image"
	case route.Upstream == "tus":
		limitKey = "upload" // a PATCH carries at most the whole file
	case strings.HasPrefix(r.URL.Path, "/upload/"):
		limitKey = "upload"
	}
	limit := h.cfg.BodyLimits[limitKey]
	if limit > 0 && r.ContentLength > limit {
		apierror.Write(w, apierror.BodyOverLimit, limit)
		return nil, false
	}
	if limit <= 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	lb := &limitedBody{rc: r.Body, left: limit}
	r.Body = lb
	return lb, true
}

// forward sends r to t's service and passes the answer on as it comes.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, t *target) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	t.client, t.cancel = r.Context(), cancel
	defer func() {
		if t.stopShutdown != nil {
			t.stopShutdown()
		}
	}()
	ctx = context.WithValue(ctx, keyTarget, t)
	if t.watch != nil {
		// An answer outlives the check made when it began: once a request
		// has run for StreamRecheck (a live tail, whatever its Accept or
		// content type; a long download or upload), its session or key is
		// checked again (cached, and fenced against revocations) every
		// StreamRecheck, and the request ends once the session is signed
		// out, revoked or expired, the key revoked, or the user's identity
		// or role changed. Short requests never start the check.
		every := h.cfg.StreamRecheck
		if every <= 0 {
			every = 2 * time.Second
		}
		rctx := sessions.WithClientIP(ctx, t.watch.claims.ClientIP)
		timer := time.AfterFunc(every, func() { h.recheck(rctx, t, every) })
		defer timer.Stop()
		// Server-sent events are checked before every write as well
		// (gateWriter): nothing published after a revocation reaches the
		// client, however soon after.
		w = &gateWriter{ResponseWriter: w, h: h, t: t, ctx: rctx}
	}
	// Server-sent events: ReverseProxy flushes each write (text/event-stream),
	// the server has no write timeout, and the client going away cancels
	// ctx, which closes the upstream connection, so the service's stream
	// ends at its next write.
	h.rp.ServeHTTP(w, r.WithContext(ctx))
}
