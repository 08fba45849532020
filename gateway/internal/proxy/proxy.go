// Package proxy is the gateway's request path: it removes identity headers a
// client sent, enforces the origin policy, resolves the session, signs an
// identity token for the target service and streams the request and the
// answer through without buffering either.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acme/platform/gateway/internal/apierror"
	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/gateway/internal/upstream"
	"github.com/acme/platform/pkg/handoff"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/web"
)

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

const keyTarget ctxKey = 0

// target is one request on its way to a service, as ServeHTTP attached it
// to the request's context for the ReverseProxy's hooks.
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
			return targetOf(r).group.RoundTrip(r)
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
		BufferPool:     copyBuffers{},
		Rewrite:        h.rewrite,
		ModifyResponse: h.modifyResponse,
		ErrorHandler:   h.errorHandler,
	}
	if cfg.Log != nil {
		// A stream cut on purpose (credential revoked, shutdown) or by the
		// client is logged as one JSON line, not on bare stderr.
		h.rp.ErrorLog = slog.NewLogLogger(cfg.Log.Handler(), slog.LevelInfo)
	}
	return h
}

// targetOf is the target ServeHTTP attached to a request (nil on none).
func targetOf(r *http.Request) *target {
	t, _ := r.Context().Value(keyTarget).(*target)
	return t
}

// rewrite addresses the outgoing request to the target's service, with the
// identity token and the request id.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	t := targetOf(pr.In)
	pr.SetURL(t.group.URL())
	pr.SetXForwarded()
	pr.Out.Header.Set(identity.Header, t.token)
	pr.Out.Header.Set(web.RequestIDHeader, t.rid)
	if h.cfg.Handoff != nil && t.service == "files" && pr.Out.Method == http.MethodGet {
		pr.Out.Header.Set(handoff.Offer, handoff.OfferGzip) // it fetches, and inflates gzip-stored files
	}
}

// modifyResponse vets the service's answer before it passes on.
func (h *Handler) modifyResponse(resp *http.Response) error {
	t := targetOf(resp.Request)
	// A body the client stalled, cut or sent past the limit never reached
	// the service whole: whatever it answered (a service may take a cut
	// body for a complete one), the client gets the gateway's error
	// (errorHandler), never a 2xx.
	if bodyFailed(resp.Request.Context()) || t.body != nil && (t.body.tripped.Load() || t.body.failed.Load()) {
		return errBodyIncomplete // ReverseProxy closes the body
	}
	if isEventStream(resp.Header.Get("Content-Type")) {
		// A live stream, whatever the request's Accept: its writes are
		// checked against the credential (gateWriter), and it ends as
		// shutdown begins.
		t.stream.Store(true)
		if h.cfg.Streams != nil {
			t.stopShutdown = context.AfterFunc(h.cfg.Streams, func() { t.cancel(errShutdown) })
		}
	}
	if err := h.takeHandoff(resp, t); err != nil {
		return err
	}
	// The service echoes the request id it was sent (the gateway's, set in
	// ServeHTTP): one copy in the answer.
	resp.Header.Del(web.RequestIDHeader)
	// Anything that changed sessions or users through auth drops this
	// gateway's cached copy at once; auth tells the others.
	if t.service == "auth" && t.hash != "" && resp.Request.Method != http.MethodGet && resp.StatusCode < 400 {
		h.cfg.Resolver.Evict(t.hash)
	}
	return nil
}

// errorHandler answers a request the service did not answer (or whose
// answer modifyResponse refused).
func (h *Handler) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	t := targetOf(r)
	k, answer := failureKind(r, t, err)
	if !answer {
		return // the client went away: nobody to answer
	}
	if k != apierror.ServiceUnavailable {
		apierror.Write(w, k)
		return
	}
	// No usable replica (every one down, or none resolved) within
	// GATEWAY_RETRY_WAIT (the balancer holds a request that was never sent
	// that long, counted from when the service became unavailable), or
	// the one tried failed before answering and the request could not be
	// sent again: 503, never a hang.
	svc := ""
	if t != nil {
		svc = t.service
	}
	h.cfg.Log.WarnContext(r.Context(), "upstream unreachable", "upstream", svc, "err", err)
	apierror.Write(w, apierror.ServiceUnavailable, svc)
}

// failureKind names why a request got no answer from its service; answer
// is false when the client went away and nobody is left to answer.
func failureKind(r *http.Request, t *target, err error) (k apierror.Kind, answer bool) {
	ctx := r.Context()
	switch {
	case bodyStalled(ctx):
		// The client stopped sending its body (WatchBody): the gateway's
		// own timeout, not the service's failure.
		return apierror.BodyStalled, true
	case t != nil && t.body != nil && t.body.tripped.Load():
		return apierror.BodyTooLarge, true
	case t != nil && t.watch != nil && context.Cause(ctx) == errRevoked:
		return t.watch.refusal(), true
	case t != nil && context.Cause(ctx) == errShutdown:
		return apierror.ShuttingDown, true
	case bodyFailed(ctx) || errors.Is(err, errBodyIncomplete) || t != nil && t.body != nil && t.body.failed.Load():
		// Unless the client went away mid-body.
		return apierror.BodyIncomplete, t == nil || t.client.Err() == nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return 0, false // the client went away
	}
	return apierror.ServiceUnavailable, true
}

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
