package proxy

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/pkg/handoff"
)

// Prefetch: a download the files service handed off before, asked again
// by the same caller, starts its object fetch at the same time as the
// request to the files service instead of after its answer, so the object
// store's first bytes are not waited for on top of the authorization.
// The bytes are only ever sent once the files service has answered this
// request with a handoff of exactly the same object and bytes (the same
// presigned URL, range and length): anything else (a refusal, a missing
// file, a new URL, a range) drops the prefetched body unread. Prefetching
// changes when the object store is asked, never what a client receives.
//
// The last handoff answer is remembered per caller (a hash of the session
// cookie or API key, or none on anonymous routes such as share links) and
// exact path with query, for prefetchTTL, at most prefetchMax of them; only
// whole-object GETs without conditional or range headers use and refresh
// them. The fetch starts when the request arrives, before the gateway has
// checked the credential: a revoked or forged one can at most make the
// object store start sending an object that this credential was handed
// before, which is dropped unsent.

const (
	prefetchTTL = 5 * time.Minute
	prefetchMax = 4096
)

type prefetchEntry struct {
	a       handoff.Answer
	expires time.Time
}

// prefetches remembers the handoff answers of eligible requests.
type prefetches struct {
	mu sync.Mutex
	m  map[string]prefetchEntry
}

func (p *prefetches) get(key string, now time.Time) (handoff.Answer, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[key]
	if !ok || !now.Before(e.expires) {
		return handoff.Answer{}, false
	}
	return e.a, true
}

func (p *prefetches) put(key string, a handoff.Answer, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]prefetchEntry{}
	}
	if _, had := p.m[key]; !had && len(p.m) >= prefetchMax {
		for k, e := range p.m {
			if !now.Before(e.expires) {
				delete(p.m, k)
			}
		}
		if len(p.m) >= prefetchMax {
			clear(p.m)
		}
	}
	p.m[key] = prefetchEntry{a: a, expires: now.Add(prefetchTTL)}
}

func (p *prefetches) forget(key string) {
	p.mu.Lock()
	delete(p.m, key)
	p.mu.Unlock()
}

// prefetchCaller names the credential a request to route carries, as the
// gateway is about to check it: its hash (sessions.Hash; an API key and a
// session cookie never have the same text), "" on public routes; ok is
// false when a session route has no cookie.
func prefetchCaller(r *http.Request, route Route, authz string) (caller string, ok bool) {
	switch {
	case authz != "" && (route.Access == Session || route.Access == Admin || route.Access == ServiceOrKey):
		return sessions.Hash(authz), true
	case route.Access == Session || route.Access == Admin:
		c, err := r.Cookie("sessionId")
		if err != nil || c.Value == "" {
			return "", false
		}
		return sessions.Hash(c.Value), true
	}
	return "", true
}

// unprefetched are the request headers that make a GET ineligible: the
// answer may then be a part, or no body at all.
var unprefetched = []string{"Range", "If-Range", "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since"}

// prefetchKey is the key of an eligible request (a whole-object GET to the
// files service) from caller, or "" for any other. Its Accept-Encoding is
// part of it: a gzip-stored file is handed off as stored to a client that
// accepts gzip, and to be inflated to one that does not.
func prefetchKey(r *http.Request, caller string) string {
	if r.Method != http.MethodGet {
		return ""
	}
	for _, h := range unprefetched {
		if r.Header.Get(h) != "" {
			return ""
		}
	}
	return caller + " " + r.URL.RequestURI() + " " + r.Header.Get("Accept-Encoding")
}

// prefetch is one object fetch started before the files service answered.
type prefetch struct {
	f      *handoff.Fetcher
	a      handoff.Answer
	cancel context.CancelFunc
	done   chan struct{}
	body   io.ReadCloser
	err    error
	taken  bool
}

func startPrefetch(ctx context.Context, f *handoff.Fetcher, a handoff.Answer) *prefetch {
	ctx, cancel := context.WithCancel(ctx)
	p := &prefetch{f: f, a: a, cancel: cancel, done: make(chan struct{})}
	go func() {
		p.body, p.err = f.Prefetch(ctx, a)
		close(p.done)
	}()
	return p
}

// matches reports whether the files service's answer a hands off exactly
// the bytes this fetch asked for.
func (p *prefetch) matches(a handoff.Answer) bool {
	return p.a.URL == a.URL && p.a.Start == a.Start && p.a.End == a.End && p.a.Length == a.Length && slices.Equal(p.a.Nodes, a.Nodes) &&
		p.a.Encoding == a.Encoding && p.a.Stored == a.Stored
}

// take waits for the fetch and hands its body over to the caller; a failed
// fetch counts as dropped (the caller fetches again).
func (p *prefetch) take() (io.ReadCloser, error) {
	<-p.done
	p.taken = true
	b := p.body
	p.body = nil
	p.f.Prefetched(p.err == nil)
	return b, p.err
}

// drop ends the fetch once the request is over: a body not taken is
// cancelled and closed unread, and counted as dropped.
func (p *prefetch) drop() {
	p.cancel()
	if p.taken {
		return
	}
	p.f.Prefetched(false)
	go func() {
		<-p.done
		if p.body != nil {
			p.body.Close()
		}
	}()
}

// prefetchFor starts the object fetch of a request to route that was
// handed off to the same caller before (nil when there is none to start),
// and returns the request's key ("" when it is not eligible).
func (h *Handler) prefetchFor(r *http.Request, route Route, authz string) (key string, pre *prefetch) {
	if h.cfg.Handoff == nil || route.Service != "files" || route.Upstream != "" {
		return "", nil
	}
	caller, ok := prefetchCaller(r, route, authz)
	if !ok {
		return "", nil
	}
	if key = prefetchKey(r, caller); key == "" {
		return "", nil
	}
	if a, ok := h.pre.get(key, time.Now()); ok && !h.cfg.Handoff.Cached(a) {
		pre = startPrefetch(r.Context(), h.cfg.Handoff, a)
	}
	return key, pre
}
