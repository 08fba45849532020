// Package proxy is the gateway's request path: it removes identity headers a
// client sent, enforces the origin policy, resolves the session, signs an
// identity token for the target service and streams the request and the
// answer through without buffering either.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/gateway/internal/upstream"
	"github.com/acme/platform/pkg/handoff"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/web"
)

// Access says who may use a route.
type Access int

const (
	Public       Access = iota // anonymous token; the service decides
	Session                    // a valid session is required
	Admin                      // a valid session of an administrator (the service checks again)
	Service                    // service-to-service (/ms/me): no session, credential passed through
	ServiceOrKey               // a service credential passed through, or an API key (POST /v1/logs)
)

// Route maps a path prefix to a service.
type Route struct {
	Prefix  string // "/log" matches "/log" and "/log/..."
	Exact   bool   // match Prefix only
	Service string // audience: auth, files, logs
	Access  Access
	// Upstream names the balancer when it is not Service's: resumable
	// uploads ("tus") are served by the files service on a listener of
	// their own.
	Upstream string
}

// Routes is the public API's map, most specific first.
var Routes = []Route{
	{Prefix: "/ms/me", Exact: true, Service: "auth", Access: Service},
	{Prefix: "/signin", Exact: true, Service: "auth", Access: Public},
	{Prefix: "/signin/mfa", Exact: true, Service: "auth", Access: Public}, // the challenge id is the proof of the password
	{Prefix: "/signin/passkey", Service: "auth", Access: Public},          // begin, finish: the passkey's signature is the proof
	{Prefix: "/password", Service: "auth", Access: Public},                // forgot, reset: the mailed token is the proof
	{Prefix: "/email", Service: "auth", Access: Public},                   // verify: the mailed token is the proof
	{Prefix: "/signout", Exact: true, Service: "auth", Access: Session},
	{Prefix: "/me/usage", Exact: true, Service: "files", Access: Session},
	{Prefix: "/me", Service: "auth", Access: Session},
	{Prefix: "/users", Service: "auth", Access: Admin},
	{Prefix: "/images", Service: "files", Access: Public},
	{Prefix: "/uploads", Service: "files", Access: Session, Upstream: "tus"}, // tus resumable uploads
	{Prefix: "/upload", Service: "files", Access: Session},
	{Prefix: "/retrieve", Service: "files", Access: Session},
	{Prefix: "/download", Service: "files", Access: Session},
	{Prefix: "/files", Service: "files", Access: Session},
	{Prefix: "/s", Service: "files", Access: Public}, // share links: the token is the credential
	{Prefix: "/usage", Service: "files", Access: Admin},
	{Prefix: "/log", Service: "logs", Access: Admin},
	// OTLP/HTTP logs: no session; the service checks the caller's
	// credential (X-Service-Credential) itself.
	{Prefix: "/v1/logs", Exact: true, Service: "logs", Access: ServiceOrKey},
}

func match(path string) (Route, bool) {
	for _, r := range Routes {
		if path == r.Prefix || (!r.Exact && strings.HasPrefix(path, r.Prefix+"/")) {
			return r, true
		}
	}
	return Route{}, false
}

// Config of the Handler.
type Config struct {
	// Upstreams are the services' balancers, by service name: each chooses
	// the replica (address) of every request and retries where that is
	// safe (see package upstream).
	Upstreams map[string]*upstream.Group
	Resolver  *sessions.Resolver
	// Keys resolves API keys (Authorization: Bearer acme_...); nil refuses
	// them.
	Keys           *sessions.Resolver
	Signer         *identity.Signer
	AllowedOrigins []string
	// Public is the gateway's own origins (GATEWAY_PUBLIC_URL): an Origin
	// is the gateway's own when it is one of them, scheme, host and port
	// alike (see Origins.Own). Nil: only IP-address and localhost hosts.
	Public   *Origins
	Log      *slog.Logger
	TokenTTL time.Duration // lifetime of signed tokens; cached for half of it
	// BodyLimits bound request bodies, keyed "auth", "logs", "files"
	// (non-upload routes), "upload" (/upload/file and /uploads/) and "image"
	// (/upload/image). Larger bodies get 413 here: a service that refuses a
	// body by its length answers early and closes the connection, and the
	// proxy would only see a broken write. Keep each at most the service's
	// own limit.
	BodyLimits map[string]int64
	// Streams, when set, ends every server-sent-event stream (answers of
	// type text/event-stream, whatever the request's Accept) when it is
	// done: the gateway cancels it as shutdown begins, so live tails do not
	// hold the shutdown for its whole grace period. Other requests are not
	// affected.
	Streams context.Context
	// StreamRecheck is how often a request that is still running re-checks
	// its session or API key (default 2s): every answer that lasts longer
	// than this (a live tail, a long download or upload) ends once its
	// credential is signed out, revoked, expired or its user's role
	// changed. Server-sent events are also checked before every write.
	StreamRecheck time.Duration
	// Handoff, when set, sends stored files itself: the files service
	// answers a GET that offers it with headers and a presigned GET of the
	// object, which the gateway fetches from the object store and sends
	// (package handoff). Nil: the files service streams every byte.
	Handoff *handoff.Fetcher
}

// Handler is the gateway's proxy.
type Handler struct {
	cfg     Config
	origins map[string]bool
	rp      *httputil.ReverseProxy

	tokMu  sync.Mutex
	tokens map[string]cachedToken

	pre prefetches // handoff answers, for prefetch.go
}

type cachedToken struct {
	token   string
	expires time.Time
}

type ctxKey int

const (
	keyTarget ctxKey = iota
	keyStatus
)

type target struct {
	client context.Context // the client's request context
	cancel context.CancelCauseFunc
	watch  *credWatch  // the session or key re-checked while the request runs; nil: anonymous
	stream atomic.Bool // the answer is a server-sent event stream
	// stopShutdown unregisters the stream from Config.Streams.
	stopShutdown func() bool
	group        *upstream.Group
	token        string
	rid          string
	service      string
	hash         string // session cookie hash, for eviction after auth changes
	body         *limitedBody
	preKey       string    // prefetch.go: the request's key, "" when not eligible
	pre          *prefetch // the object fetch started with the request, if any
}

// limitedBody fails a request body (chunked, so of unknown length) once it
// passes the limit.
type limitedBody struct {
	rc      io.ReadCloser
	left    int64
	tripped atomic.Bool
	failed  atomic.Bool // a read failed (not io.EOF): the body is not whole
}

var errBodyTooLarge = errors.New("request body too large")

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.tripped.Store(true)
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left+1] // read one byte past to detect an overrun
	}
	n, err := l.rc.Read(p)
	if err != nil && err != io.EOF {
		l.failed.Store(true)
	}
	l.left -= int64(n)
	if l.left < 0 {
		l.tripped.Store(true)
		return 0, errBodyTooLarge
	}
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }

// New builds the Handler.
func New(cfg Config) *Handler {
	h := &Handler{cfg: cfg, origins: map[string]bool{}, tokens: map[string]cachedToken{}}
	for _, o := range cfg.AllowedOrigins {
		h.origins[strings.TrimRight(o, "/")] = true
	}
	h.rp = &httputil.ReverseProxy{
		// The target's balancer picks the address (and sets the Host
		// header to the configured name).
		Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			return r.Context().Value(keyTarget).(*target).group.RoundTrip(r)
		}),
		// FlushInterval 0: ReverseProxy itself flushes every write of a
		// server-sent-event stream (text/event-stream) and of any answer
		// of unknown length (chunked), so streams pass as they come. An
		// answer of known length (GET /me, a download) is written through
		// the server's small buffers, which pass large writes straight to
		// the socket: no flush per write and no header flush of its own,
		// which cost a write system call, a timer and a goroutine each
		// (-1 flushed the headers and every body write separately).
		FlushInterval: 0,
		// Copy buffers are reused: without a pool ReverseProxy allocates
		// 32 KiB for every answer, however small (GET /me), and the
		// garbage collector's work grows with it.
		BufferPool: copyBuffers{},
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(keyTarget).(*target)
			pr.SetURL(t.group.URL())
			pr.SetXForwarded()
			pr.Out.Header.Set(identity.Header, t.token)
			pr.Out.Header.Set(web.RequestIDHeader, t.rid)
			if cfg.Handoff != nil && t.service == "files" && pr.Out.Method == http.MethodGet {
				pr.Out.Header.Set(handoff.Offer, "1")
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			t := resp.Request.Context().Value(keyTarget).(*target)
			// A body the client stalled, cut or sent past the limit never
			// reached the service whole: whatever it answered (a service
			// may take a cut body for a complete one), the client gets the
			// gateway's error (ErrorHandler), never a 2xx.
			if bodyFailed(resp.Request.Context()) || t.body != nil && (t.body.tripped.Load() || t.body.failed.Load()) {
				return errBodyIncomplete // ReverseProxy closes the body
			}
			if isEventStream(resp.Header.Get("Content-Type")) {
				// A live stream, whatever the request's Accept: its writes
				// are checked against the credential (gateWriter), and it
				// ends as shutdown begins.
				t.stream.Store(true)
				if h.cfg.Streams != nil {
					t.stopShutdown = context.AfterFunc(h.cfg.Streams, func() { t.cancel(errShutdown) })
				}
			}
			if err := h.takeHandoff(resp, t); err != nil {
				return err
			}
			// The service echoes the request id it was sent (the
			// gateway's, set in ServeHTTP): one copy in the answer.
			resp.Header.Del(web.RequestIDHeader)
			// Anything that changed sessions or users through auth drops
			// this gateway's cached copy at once; auth tells the others.
			if t.service == "auth" && t.hash != "" && resp.Request.Method != http.MethodGet && resp.StatusCode < 400 {
				cfg.Resolver.Evict(t.hash)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t, _ := r.Context().Value(keyTarget).(*target)
			svc := ""
			if t != nil {
				svc = t.service
			}
			switch {
			case bodyStalled(r.Context()):
				// The client stopped sending its body (WatchBody): the
				// gateway's own timeout, not the service's failure.
				w.Header().Set("Connection", "close")
				writeError(w, http.StatusRequestTimeout, "request_timeout", "the request body stopped arriving before it was complete")
				return
			case t != nil && t.body != nil && t.body.tripped.Load():
				writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")
				return
			case t != nil && t.watch != nil && context.Cause(r.Context()) == errRevoked:
				t.watch.refuse(w)
				return
			case t != nil && context.Cause(r.Context()) == errShutdown:
				writeError(w, http.StatusServiceUnavailable, "shutting_down", "the gateway is shutting down, try again")
				return
			case bodyFailed(r.Context()) || errors.Is(err, errBodyIncomplete) || t != nil && t.body != nil && t.body.failed.Load():
				if t != nil && t.client.Err() != nil {
					return // the client went away mid-body: nobody to answer
				}
				w.Header().Set("Connection", "close")
				writeError(w, http.StatusBadRequest, "incomplete_body", "the request body did not arrive whole")
				return
			case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
				return // the client went away
			}
			// No usable replica (every one down, or none resolved) within
			// GATEWAY_RETRY_WAIT (the balancer holds a request that was
			// never sent that long, counted from when the service became
			// unavailable), or the one tried failed before answering and
			// the request could not be sent again: 503, never a hang.
			cfg.Log.WarnContext(r.Context(), "upstream unreachable", "upstream", svc, "err", err)
			writeError(w, http.StatusServiceUnavailable, "service_unavailable", "the "+svc+" service is unavailable, try again shortly")
		},
	}
	if cfg.Log != nil {
		// A stream cut on purpose (credential revoked, shutdown) or by the
		// client is logged as one JSON line, not on bare stderr.
		h.rp.ErrorLog = slog.NewLogLogger(cfg.Log.Handler(), slog.LevelInfo)
	}
	return h
}

// takeHandoff fetches the object a files answer hands off (package
// handoff) and makes it the answer's body. A fetch that fails before its
// first byte (object store unreachable from here, object missing) sends the
// request to the files service again without the offer: it streams the
// bytes itself or answers why not. Handoff headers never pass on.
func (h *Handler) takeHandoff(resp *http.Response, t *target) error {
	a, ok, err := handoff.Parse(resp.Header)
	if !ok {
		handoff.Strip(resp.Header)
		if t.preKey != "" {
			h.pre.forget(t.preKey) // refused, missing, not modified: nothing to prefetch
		}
		return nil
	}
	handoff.Strip(resp.Header)
	ctx := resp.Request.Context()
	if err == nil && h.cfg.Handoff != nil && t.service == "files" {
		if t.preKey != "" && a.End < 0 {
			h.pre.put(t.preKey, a, time.Now())
		}
		var body io.ReadCloser
		if t.pre != nil && t.pre.matches(a) {
			body, err = t.pre.take()
		}
		if body == nil {
			body, err = h.cfg.Handoff.Open(ctx, a)
		}
		if err == nil {
			resp.Body.Close()
			resp.Body = body
			resp.ContentLength = a.Length
			resp.Header.Set("Content-Length", strconv.FormatInt(a.Length, 10))
			return nil
		}
	} else if err == nil {
		err = errors.New("handoff not offered")
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	h.cfg.Log.WarnContext(ctx, "handoff: object not fetched, asking the files service for the bytes", "err", err)
	again := resp.Request.Clone(ctx)
	again.Header.Del(handoff.Offer)
	again.Body = nil
	fallback, err := t.group.RoundTrip(again)
	if err != nil {
		return err
	}
	resp.Body.Close()
	*resp = *fallback
	handoff.Strip(resp.Header)
	return nil
}

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

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, rid string) string {
	stripIdentityHeaders(r.Header)

	if !h.originAllowed(w, r) {
		writeError(w, http.StatusForbidden, "forbidden_origin", "cross-origin request from an origin that is not allowed")
		return ""
	}
	if h.crossSiteUnsafe(r) {
		writeError(w, http.StatusForbidden, "forbidden_origin", "state-changing request from another site")
		return ""
	}
	if r.Method == http.MethodOptions && r.Header.Get("Origin") != "" {
		w.WriteHeader(http.StatusNoContent) // preflight, headers set by originAllowed
		return ""
	}

	route, ok := match(r.URL.Path)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such route")
		return ""
	}
	upstreamName := route.Service
	if route.Upstream != "" {
		upstreamName = route.Upstream
	}
	group := h.cfg.Upstreams[upstreamName]
	if group == nil || !group.Deployed() {
		writeError(w, http.StatusServiceUnavailable, "service_not_deployed", "the "+route.Service+" service is not deployed")
		return route.Service
	}
	if route.Access != Service && route.Access != ServiceOrKey {
		r.Header.Del("X-Service-Credential")
	}

	claims := identity.Claims{ClientIP: clientIP(r)}
	var hash, streamSID, streamKey string
	authz := r.Header.Get("Authorization")
	// A download handed off to this caller before starts its object fetch
	// now, while the caller is checked and the files service asked
	// (prefetch.go); nothing of it is sent unless both agree.
	var pre *prefetch
	preKey := ""
	if h.cfg.Handoff != nil && route.Service == "files" && route.Upstream == "" {
		if caller, ok := prefetchCaller(r, route, authz); ok {
			if preKey = prefetchKey(r, caller); preKey != "" {
				if a, ok := h.pre.get(preKey, time.Now()); ok && !h.cfg.Handoff.Cached(a) {
					pre = startPrefetch(r.Context(), h.cfg.Handoff, a)
					defer pre.drop()
				}
			}
		}
	}
	r.Header.Del("Authorization") // never forwarded: an API key stays here
	if authz != "" && (route.Access == Session || route.Access == Admin || route.Access == ServiceOrKey) {
		id, ok := h.apiKey(w, r, route, authz)
		if !ok {
			return route.Service
		}
		claims.Subject, claims.Role = id.UserID, id.Role
		streamKey = authz[len("Bearer "):]
	} else if route.Access == Session || route.Access == Admin {
		sid, status, code, msg := sessionFrom(r)
		streamSID = sid
		if status != 0 {
			writeError(w, status, code, msg)
			return route.Service
		}
		if sid == "" {
			writeError(w, http.StatusUnauthorized, "unauthenticated", "a valid session is required")
			return route.Service
		}
		id, err := h.cfg.Resolver.Resolve(r.Context(), sid)
		switch {
		case errors.Is(err, sessions.ErrInvalid):
			writeError(w, http.StatusUnauthorized, "invalid_session", "the session is invalid or has expired")
			return route.Service
		case err != nil:
			h.cfg.Log.WarnContext(r.Context(), "session resolution failed", "err", err)
			writeError(w, http.StatusServiceUnavailable, "auth_unavailable", "sessions cannot be checked right now, try again shortly")
			return route.Service
		}
		if route.Access == Admin && id.Role != identity.RoleAdmin {
			writeError(w, http.StatusForbidden, "forbidden", "administrator role required")
			return route.Service
		}
		claims.Subject, claims.Role, claims.SessionID = id.UserID, id.Role, id.SessionID
		hash = id.Hash
		if r.Method == http.MethodGet && r.URL.Path == "/me" && id.Me != nil {
			// GET /me is answered here, from the session's entry: auth's
			// own answer for this session, which the resolver serves only
			// while it is trusted (fenced against every revocation and
			// user change published before this request, and at most
			// GATEWAY_SESSION_CACHE_TTL old), exactly as it would serve
			// the identity a proxied request carries. A request the fence
			// cannot clear was resolved by auth just now.
			writeMe(w, id.Me)
			return "gateway"
		}
	}
	tok, err := h.token(claims, route.Service)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "internal error")
		return route.Service
	}
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
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body over %d bytes", limit))
		return route.Service
	}
	var lb *limitedBody
	if limit > 0 && r.Body != nil && r.Body != http.NoBody {
		lb = &limitedBody{rc: r.Body, left: limit}
		r.Body = lb
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	t := &target{client: r.Context(), cancel: cancel, group: group, token: tok, rid: rid, service: route.Service,
		hash: hash, body: lb, preKey: preKey, pre: pre}
	defer func() {
		if t.stopShutdown != nil {
			t.stopShutdown()
		}
	}()
	ctx = context.WithValue(ctx, keyTarget, t)
	if streamSID != "" {
		t.watch = &credWatch{res: h.cfg.Resolver, cred: streamSID, claims: claims}
	} else if streamKey != "" {
		t.watch = &credWatch{res: h.cfg.Keys, cred: streamKey, claims: claims, key: true}
	}
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
		rctx := sessions.WithClientIP(ctx, claims.ClientIP)
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
	return route.Service
}

// APIScope is the scope an API key needs for a request to a service: read
// for GET and HEAD, write for anything else, on files and logs routes; ""
// for the other services, which refuse API keys (they manage accounts,
// sessions and keys themselves).
func APIScope(service, method string) string {
	if service != "files" && service != "logs" {
		return ""
	}
	if method == http.MethodGet || method == http.MethodHead {
		return service + ":read"
	}
	return service + ":write"
}

// apiKey resolves the API key of an Authorization header for route and
// checks it may be used there: the key's scope for the route and method,
// and its owner's role for administrators' routes. It writes the refusal
// and reports false.
func (h *Handler) apiKey(w http.ResponseWriter, r *http.Request, route Route, authz string) (sessions.Identity, bool) {
	key, ok := strings.CutPrefix(authz, "Bearer ")
	if !ok || !sessions.KeyWellFormed(key) {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "Authorization must be \"Bearer acme_...\" with an API key")
		return sessions.Identity{}, false
	}
	scope := APIScope(route.Service, r.Method)
	if scope == "" || h.cfg.Keys == nil {
		writeError(w, http.StatusForbidden, "api_key_not_allowed", "API keys are accepted on file and log routes only; use a session here")
		return sessions.Identity{}, false
	}
	id, err := h.cfg.Keys.Resolve(sessions.WithClientIP(r.Context(), clientIP(r)), key)
	switch {
	case errors.Is(err, sessions.ErrInvalid):
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "the API key is unknown, expired or revoked")
		return sessions.Identity{}, false
	case err != nil:
		h.cfg.Log.WarnContext(r.Context(), "api key resolution failed", "err", err)
		writeError(w, http.StatusServiceUnavailable, "auth_unavailable", "API keys cannot be checked right now, try again shortly")
		return sessions.Identity{}, false
	}
	if !id.HasScope(scope) {
		w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="`+scope+`"`)
		writeError(w, http.StatusForbidden, "insufficient_scope", "this API key lacks the scope "+scope)
		return sessions.Identity{}, false
	}
	if route.Access == Admin && id.Role != identity.RoleAdmin {
		writeError(w, http.StatusForbidden, "forbidden", "administrator role required (the API key's owner is not an administrator)")
		return sessions.Identity{}, false
	}
	return id, true
}

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

// token returns a signed token for claims and audience, reusing one signed
// for exactly the same claims during the first half of its lifetime: signing
// is the costliest step of a cached request, and every field of the claims is
// part of the key, so a role change or another session never reuses one.
func (h *Handler) token(c identity.Claims, audience string) (string, error) {
	key := audience + "|" + c.Subject + "|" + c.Role + "|" + c.SessionID + "|" + c.ClientIP
	now := time.Now()
	h.tokMu.Lock()
	ct, ok := h.tokens[key]
	h.tokMu.Unlock()
	if ok && now.Before(ct.expires) {
		return ct.token, nil
	}
	tok, err := h.cfg.Signer.Sign(c, audience)
	if err != nil || h.cfg.TokenTTL <= 0 {
		return tok, err
	}
	h.tokMu.Lock()
	if len(h.tokens) >= 100000 {
		for k, v := range h.tokens {
			if now.After(v.expires) {
				delete(h.tokens, k)
			}
		}
		if len(h.tokens) >= 100000 {
			h.tokens = map[string]cachedToken{}
		}
	}
	h.tokens[key] = cachedToken{token: tok, expires: now.Add(h.cfg.TokenTTL / 2)}
	h.tokMu.Unlock()
	return tok, nil
}

// sessionFrom takes the session id from the cookie or, for GET /me only (the
// spec's server-side runtimes), from a JSON body; both at once is refused.
func sessionFrom(r *http.Request) (sid string, status int, code, msg string) {
	if c, err := r.Cookie("sessionId"); err == nil {
		sid = c.Value
	}
	if r.Method != http.MethodGet || r.URL.Path != "/me" || r.Body == nil || r.Body == http.NoBody {
		return sid, 0, "", ""
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<10+1))
	if err != nil && bodyStalled(r.Context()) {
		return "", http.StatusRequestTimeout, "request_timeout", "the request body stopped arriving before it was complete"
	}
	if err != nil {
		return "", http.StatusBadRequest, "bad_body", "request body could not be read"
	}
	if len(raw) > 64<<10 {
		return "", http.StatusRequestEntityTooLarge, "body_too_large", "request body too large"
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil } // a retry can send it again
	r.ContentLength = int64(len(raw))
	if len(bytes.TrimSpace(raw)) == 0 {
		return sid, 0, "", ""
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return "", http.StatusUnsupportedMediaType, "unsupported_media_type", "content type must be application/json"
	}
	var b struct {
		SessionID *string `json:"sessionId"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return "", http.StatusBadRequest, "invalid_json", "body must be a JSON object {\"sessionId\": string}"
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", http.StatusBadRequest, "invalid_json", "unexpected data after the JSON object"
	}
	if b.SessionID == nil {
		return sid, 0, "", ""
	}
	if sid != "" {
		return "", http.StatusBadRequest, "ambiguous_session", "send the session in the cookie or in the body, not both"
	}
	if *b.SessionID == "" {
		return "", http.StatusUnauthorized, "invalid_session", "the session is invalid or has expired"
	}
	return *b.SessionID, 0, "", ""
}

// stripIdentityHeaders removes every header a client could use to pose as
// the gateway.
func stripIdentityHeaders(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, "X-Acme-") || k == "X-Forwarded-For" || k == "X-Real-Ip" || k == "Forwarded" {
			delete(h, k)
		}
	}
}

// originAllowed refuses unsafe cross-origin requests from origins that are
// neither the gateway's own (Config.Public) nor configured, and sets CORS
// headers for the configured ones.
func (h *Handler) originAllowed(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if h.origins[origin] {
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Set("Access-Control-Allow-Credentials", "true")
		// Response headers a page of that origin may read: the file name of
		// a download, where a cut-short log listing reads on, the request id.
		w.Header().Set("Access-Control-Expose-Headers", "Content-Disposition, Logs-Resume-Before, X-Request-Id")
		w.Header().Add("Vary", "Origin")
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE")
			w.Header().Set("Access-Control-Allow-Headers", "Content-Type, X-Request-Id")
			w.Header().Set("Access-Control-Max-Age", "600")
		}
		return true
	}
	if h.cfg.Public.Own(origin, r) {
		return true // scheme, host and port: https://host is not http://host's
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return true // no state change; the browser withholds the answer without CORS headers
	}
	return false
}

// crossSiteUnsafe reports an unsafe request (POST, PATCH, DELETE, ...) that
// a browser says comes from another site or origin while sending no Origin
// we checked. Browsers send Origin with every unsafe request today, so this
// is the second line behind originAllowed (and behind SameSite=Lax
// cookies): Sec-Fetch-Site is set by the browser alone and cannot be forged
// by a page. Requests without it (curl, server-side runtimes, older
// browsers that still send Origin) are judged by Origin only.
func (h *Handler) crossSiteUnsafe(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin != "" && h.origins[origin] {
		return false // a configured origin (CORS with credentials)
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return false
	}
	return true // cross-site, or same-site from another origin (a sibling subdomain)
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// writeMe sends GET /me's answer as auth sends it.
func writeMe(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

var jsonContentType = []string{"application/json"}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
}

type statusWriter struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (s *statusWriter) WriteHeader(c int) {
	if s.code == 0 {
		s.code = c
	}
	s.ResponseWriter.WriteHeader(c)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

func (s *statusWriter) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

// Flush lets streaming answers through.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the real writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// copyBuffers is the ReverseProxy's pool of copy buffers. 256 KiB rather
// than the 32 KiB ReverseProxy allocates by itself: a download then passes
// in an eighth of the reads and writes when the service sends faster than
// the client takes (pooled, so a small answer costs nothing more).
type copyBuffers struct{}

const copyBufferSize = 256 << 10

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

func (copyBuffers) Get() []byte { return *copyBufferPool.Get().(*[]byte) }

func (copyBuffers) Put(b []byte) {
	if cap(b) != copyBufferSize {
		return
	}
	b = b[:cap(b)]
	copyBufferPool.Put(&b)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
