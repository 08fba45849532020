package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/pkg/failover"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/resume"
	"github.com/prometheus/client_golang/prometheus"
)

// Fetcher GETs handed-off objects: the gateway's side. It is safe for
// concurrent use.
type Fetcher struct {
	base       *http.Transport
	ok, failed prometheus.Counter // acme_gateway_handoffs_total by result
	// acme_gateway_handoff_prefetches_total by result (Prefetched)
	prefetchUsed, prefetchDropped prometheus.Counter
	cache                         *objectCache // objects.go; nil: off

	mu       sync.Mutex
	clusters map[string]*cluster // by Answer.Nodes, joined
}

type cluster struct {
	transport *http.Transport
	dialer    *failover.Dialer
}

// NewFetcher returns a Fetcher with an object cache sized by cache (zero:
// none) whose metrics are registered on reg (nil: not registered); Close
// stops the node probes it started.
func NewFetcher(reg prometheus.Registerer, cache CacheConfig) *Fetcher {
	fetches := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "gateway",
		Name: "handoffs_total", Help: "Objects the files service handed off to the gateway (package handoff), by result: ok (fetched from the object store, sent by the gateway), failed (the fetch failed before the first byte; the files service was asked for the bytes instead)."},
		[]string{"result"})
	prefetches := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "gateway",
		Name: "handoff_prefetches_total", Help: "Object fetches started with the request to the files service, from the caller's last handoff of the same path (the gateway's prefetch), by result: used (the files service handed off the same bytes), dropped (it answered otherwise, or the fetch failed; the body was not sent)."},
		[]string{"result"})
	if reg != nil {
		reg.MustRegister(fetches, prefetches)
	}
	return &Fetcher{
		ok: fetches.WithLabelValues("ok"), failed: fetches.WithLabelValues("failed"),
		prefetchUsed: prefetches.WithLabelValues("used"), prefetchDropped: prefetches.WithLabelValues("dropped"),
		base: &http.Transport{
			Proxy:                 nil, // the object store is inside the deployment
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			// The bytes as stored: a gzip-stored file is sent as is, with
			// the Content-Encoding the files service set, or inflated
			// here when its answer says so (Answer.Encoding).
			DisableCompression: true,
			ReadBufferSize:     64 << 10,
		},
		clusters: map[string]*cluster{},
		cache:    newObjectCache(cache, reg),
	}
}

// Prefetched counts a prefetch (see acme_gateway_handoff_prefetches_total):
// used (then also a handoff sent, result ok) or dropped.
func (f *Fetcher) Prefetched(used bool) {
	if used {
		f.prefetchUsed.Inc()
		f.ok.Inc()
		f.cache.count(false)
	} else {
		f.prefetchDropped.Inc()
	}
}

// Close stops the probes of every cluster's nodes and closes idle
// connections.
func (f *Fetcher) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.clusters {
		c.dialer.Close()
		c.transport.CloseIdleConnections()
	}
	f.base.CloseIdleConnections()
}

// transport is the one for a's nodes: with several, a clone of the base
// whose dialer connects to whichever node is ready (package failover), the
// request keeping the host it was signed for.
func (f *Fetcher) transport(a Answer, scheme string) (*http.Transport, error) {
	if len(a.Nodes) < 2 {
		return f.base, nil
	}
	key := strings.Join(a.Nodes, ",")
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clusters[key]; ok {
		return c.transport, nil
	}
	d, err := failover.New(a.Nodes, failover.Options{ProbeURL: scheme + "://%s/minio/health/ready"})
	if err != nil {
		return nil, err
	}
	t := f.base.Clone()
	t.DialContext = d.DialContext
	f.clusters[key] = &cluster{transport: t, dialer: d}
	return t, nil
}

// ErrObject is a GET of a handed-off object that was refused or failed
// before its first byte.
var ErrObject = errors.New("handoff: object not fetched")

// Open GETs a's bytes. An error is returned before any byte is read (the
// caller can still ask the files service for them); a read that fails later
// asks again for the bytes not yet read, of the same version (ETag), up to
// resume.Tries times.
func (f *Fetcher) Open(ctx context.Context, a Answer) (io.ReadCloser, error) {
	body, hit, err := f.open(ctx, a, true)
	switch {
	case err == nil:
		f.ok.Inc()
		f.cache.count(hit)
	case ctx.Err() == nil:
		f.failed.Inc()
	}
	return body, err
}

// Prefetch is Open for a fetch started before the files service answered
// (the gateway's prefetch), counted by Prefetched rather than as a
// handoff. It always asks the object store: an object in the cache
// (Cached) needs no prefetch.
func (f *Fetcher) Prefetch(ctx context.Context, a Answer) (io.ReadCloser, error) {
	body, _, err := f.open(ctx, a, false)
	return body, err
}

func (f *Fetcher) open(ctx context.Context, a Answer, cached bool) (body io.ReadCloser, hit bool, err error) {
	if a.Encoding != "" {
		// The stored object, from the cache or the store (and cached as
		// stored), inflated on its way out.
		if body, hit, err = f.open(ctx, a.stored(), cached); err != nil {
			return nil, false, err
		}
		if body, err = Inflate(body, a.Length); err != nil {
			return nil, false, fmt.Errorf("%w: %v", ErrObject, err)
		}
		return body, hit, nil
	}
	u, err := url.Parse(a.URL)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	end := a.End
	if end < 0 {
		end = a.Start + a.Length - 1
	}
	key, now := u.EscapedPath(), time.Now()
	if f.cache != nil && cached {
		if body, ok := f.cache.get(key, a, now); ok {
			return body, true, nil
		}
	}
	t, err := f.transport(a, u.Scheme)
	if err != nil {
		return nil, false, err
	}
	var etag string
	get := func(ctx context.Context, off, last int64, match string, ranged bool) (io.ReadCloser, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
		if err != nil {
			return nil, err
		}
		want := http.StatusOK
		if ranged {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-"+strconv.FormatInt(last, 10))
			want = http.StatusPartialContent
		}
		if match != "" {
			req.Header.Set("If-Match", match)
		}
		resp, err := t.RoundTrip(req)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrObject, err)
		}
		if resp.StatusCode != want || resp.ContentLength != last-off+1 {
			resp.Body.Close()
			return nil, fmt.Errorf("%w: %s, %d bytes for %d", ErrObject, resp.Status, resp.ContentLength, last-off+1)
		}
		if etag == "" {
			etag = resp.Header.Get("ETag")
		}
		return resp.Body, nil
	}
	// The whole object is asked for without a range (an empty object has
	// none); a part of it, and every resumption, with one.
	body, err = get(ctx, a.Start, end, "", a.End >= 0)
	if err != nil {
		return nil, false, err
	}
	reopen := func(ctx context.Context, off, last int64, match string) (io.ReadCloser, error) {
		return get(ctx, off, last, match, true)
	}
	r := resume.New(ctx, reopen, body, etag, a.Start, end)
	if f.cache == nil || a.End >= 0 || !f.cache.admit(key, a.Length, now) {
		return r, false, nil
	}
	return &filling{ReadCloser: r, c: f.cache, key: key, file: a.File, buf: make([]byte, 0, a.Length), n: a.Length}, false, nil
}

// Cached reports whether the bytes a hands off are in the object cache.
func (f *Fetcher) Cached(a Answer) bool {
	if f.cache == nil {
		return false
	}
	u, err := url.Parse(a.URL)
	return err == nil && f.cache.has(u.EscapedPath(), a.stored(), time.Now())
}
