// Package upstream spreads the gateway's requests over the replicas of a
// service: it re-resolves each configured host name on an interval (every
// A/AAAA record, as Docker's DNS answers a scaled service's name), keeps one
// endpoint per address, probes each endpoint's readiness, and picks for every
// request the endpoint with the fewest requests in flight.
//
// A Group is one service (auth, files or logs). It is an http.RoundTripper:
// the proxy and the session lookup send their requests through it, and it
// chooses the address, sets the URL's host to that address and the Host
// header to the configured one, and retries once on another address when
// that cannot resend anything the service may already have acted on.
//
// Endpoint states, and which get new requests:
//
//   - ready: its last probe of GET /readyz answered 200. Preferred.
//   - pending: discovered, not probed yet (probed at once). Used only while
//     no endpoint of the service is ready (a gateway that has just started).
//   - not ready: its probe answered something else, or timed out. Used only
//     while no endpoint is ready or pending: when every replica says it is
//     not ready, a dependency they share is down (MongoDB, NATS), and the
//     service's own answer (its 503, or success where that dependency is
//     not needed) is better than the gateway's.
//   - down: a connection to it could not be made (refused, no route, dial
//     timeout), by a request or a probe. Not used while any other endpoint
//     can be; probed again after an exponential back-off, and ready again
//     once a probe passes. When every endpoint is down, one request at a
//     time per endpoint may try it anyway (a last resort, half-open): a lone
//     replica that comes back is used at once, not after its back-off, and
//     an answer revives it.
//
// When no endpoint can be used (none resolved, or every one down with its
// last-resort request already on its way), RoundTrip fails with
// ErrUnavailable: at once when Options.RetryWait is 0; otherwise a request
// that was never sent waits for an endpoint (a replaced container's gap),
// until RetryWait has passed since the service became unavailable. See
// RoundTrip.
package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrUnavailable is returned (wrapped) when a service has no endpoint that
// may be used: none resolved, or every one is down.
var ErrUnavailable = errors.New("no reachable address")

// Options configure a Group. Zero values take the defaults.
type Options struct {
	// Transport carries the requests and probes (default
	// http.DefaultTransport). Its idle connections are kept per address.
	Transport http.RoundTripper
	// Lookup resolves a host name to IP addresses (default
	// net.DefaultResolver.LookupHost). Tests inject their own.
	Lookup func(ctx context.Context, host string) ([]string, error)
	// ResolveInterval is how often host names are resolved again (2s). A
	// connection failure, or a request finding no usable address, also
	// resolves at once, at most once per min(ResolveInterval, 500ms).
	ResolveInterval time.Duration
	// ProbeInterval is how often each endpoint's readiness is probed (2s);
	// ProbeTimeout bounds one probe (2s); ProbePath is probed ("/readyz").
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	ProbePath     string
	// BackoffMin and BackoffMax bound the wait before a down endpoint is
	// probed again: BackoffMin after the first failure, doubling with each
	// further one, at most BackoffMax (500ms, 5s).
	BackoffMin, BackoffMax time.Duration
	// RetryWait is how long requests wait for a usable endpoint when the
	// service has none, counted from the moment it first had none (see
	// RoundTrip). 0, unlike the other options, means no waiting: such
	// requests fail at once with ErrUnavailable.
	RetryWait time.Duration
	// Metrics, when set, receives per-address figures.
	Metrics *Metrics
	// Log receives state changes (nil: discarded).
	Log *slog.Logger
}

func (o *Options) defaults() {
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	if o.Lookup == nil {
		o.Lookup = net.DefaultResolver.LookupHost
	}
	if o.ResolveInterval <= 0 {
		o.ResolveInterval = 2 * time.Second
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 2 * time.Second
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 2 * time.Second
	}
	if o.ProbePath == "" {
		o.ProbePath = "/readyz"
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 500 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 5 * time.Second
	}
	if o.BackoffMin > o.BackoffMax {
		o.BackoffMin = o.BackoffMax
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
}

// lookupTimeout bounds one resolution of one name.
const lookupTimeout = 2 * time.Second

// waitPoll is how often a waiting request looks at the endpoints again when
// nothing told it of a change, and the shortest time between two
// last-resort requests of waiting requests to one down endpoint.
const waitPoll = 50 * time.Millisecond

// epoch makes monotonic instants storable in an atomic.Int64: mono is the
// time since it (never 0), immune to wall-clock steps.
var epoch = time.Now()

func mono(t time.Time) int64 { return int64(t.Sub(epoch)) + 1 }

// target is one configured base URL.
type target struct {
	scheme     string
	hostname   string // as configured: a name or an IP literal
	port       string
	path       string // base path, without a trailing slash
	hostHeader string // the configured host[:port], sent as Host
	literal    bool   // an IP address: never resolved
	rt         http.RoundTripper
}

type state int32

const (
	statePending state = iota
	stateReady
	stateNotReady
	stateDown
)

func (s state) String() string {
	switch s {
	case stateReady:
		return "ready"
	case stateNotReady:
		return "not ready"
	case stateDown:
		return "down"
	}
	return "pending"
}

// tier orders states by preference; -1 is never used.
func (s state) tier() int {
	switch s {
	case stateReady:
		return 0
	case statePending:
		return 1
	case stateNotReady:
		return 2
	}
	return -1
}

// endpoint is one address of a service.
type endpoint struct {
	g        *Group
	t        *target
	addr     string // ip:port
	inflight atomic.Int64
	st       atomic.Int32
	trial    atomic.Bool  // a last-resort request to it (down) is on its way
	trialAt  atomic.Int64 // when the last one started (mono)

	mu        sync.Mutex
	fails     int // consecutive connection failures
	nextProbe time.Time
	probing   bool
	removed   bool

	m endpointMetrics
}

func (e *endpoint) state() state { return state(e.st.Load()) }

// done ends a request begun by pick.
func (e *endpoint) done() {
	e.inflight.Add(-1)
	e.m.inflight.Dec()
}

// Group balances the requests to one service. Create it with New; it is
// safe for concurrent use. Close stops its background work.
type Group struct {
	name    string
	o       Options
	targets []*target
	base    *url.URL

	eps atomic.Pointer[[]*endpoint] // sorted by address
	rr  atomic.Uint64               // rotates where ties are broken

	mu       sync.Mutex           // serialises set updates
	resolved map[*target][]string // last good answer per named target
	failing  map[*target]bool     // its last lookup failed (logged once)
	byAddr   map[string]*endpoint // the current set

	resolveKick, probeKick chan struct{}
	ctx                    context.Context
	cancel                 context.CancelFunc
	wg                     sync.WaitGroup
	gm                     groupMetrics

	// Waiting for an endpoint (Options.RetryWait).
	unusableSince atomic.Int64                  // mono; 0 while an endpoint is usable
	changed       atomic.Pointer[chan struct{}] // closed (and replaced) when one may have become usable
	waitCutoff    atomic.Int64                  // mono; no wait lasts past it (0: none); StopWaiting
}

// New returns the Group of service over the base URLs raw (an empty list:
// the service is not deployed). Names are resolved once before New returns
// (bounded by a 2 s timeout each) and then in the background.
func New(service string, raw []string, o Options) (*Group, error) {
	o.defaults()
	g := &Group{
		name: service, o: o,
		base:        &url.URL{Scheme: "http", Host: service},
		resolved:    map[*target][]string{},
		failing:     map[*target]bool{},
		byAddr:      map[string]*endpoint{},
		resolveKick: make(chan struct{}, 1),
		probeKick:   make(chan struct{}, 1),
	}
	g.gm = o.Metrics.group(service)
	ch := make(chan struct{})
	g.changed.Store(&ch)
	for _, s := range raw {
		u, err := url.Parse(strings.TrimRight(s, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return nil, errors.New("bad upstream URL " + s)
		}
		t := &target{scheme: u.Scheme, hostname: u.Hostname(), port: u.Port(), path: u.Path,
			hostHeader: u.Host, rt: o.Transport}
		if t.port == "" {
			t.port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		if ip := net.ParseIP(t.hostname); ip != nil {
			t.literal = true
			t.hostname = ip.String()
		} else if u.Scheme == "https" {
			// Connections go to an address; the certificate is checked
			// against the configured name.
			if ht, ok := o.Transport.(*http.Transport); ok {
				ht = ht.Clone()
				if ht.TLSClientConfig == nil {
					ht.TLSClientConfig = &tls.Config{}
				}
				if ht.TLSClientConfig.ServerName == "" {
					ht.TLSClientConfig.ServerName = t.hostname
				}
				t.rt = ht
			}
		}
		g.targets = append(g.targets, t)
	}
	empty := []*endpoint{}
	g.eps.Store(&empty)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.resolve(g.ctx)
	g.wg.Add(1)
	go g.probeLoop()
	for _, t := range g.targets {
		if !t.literal {
			g.wg.Add(1)
			go g.resolveLoop()
			break
		}
	}
	return g, nil
}

// Close stops resolving and probing, and ends the waits of requests
// waiting for an endpoint (ErrUnavailable). Requests may still be sent.
func (g *Group) Close() {
	g.cancel()
	g.wg.Wait()
}

// StopWaiting makes requests waiting for an endpoint give up by at
// (ErrUnavailable), and later ones never wait past it: a gateway shutting
// down answers them within its grace instead of holding them.
func (g *Group) StopWaiting(at time.Time) {
	g.waitCutoff.Store(mono(at))
	g.broadcast()
}

// changes returns a channel closed at the next broadcast.
func (g *Group) changes() <-chan struct{} { return *g.changed.Load() }

// broadcast wakes the waiting requests: an endpoint may have become usable.
func (g *Group) broadcast() {
	ch := make(chan struct{})
	close(*g.changed.Swap(&ch))
}

// usableAgain ends the service's unavailability, if it was unavailable.
func (g *Group) usableAgain() {
	if g.unusableSince.Load() == 0 {
		return
	}
	if since := g.unusableSince.Swap(0); since != 0 {
		g.o.Log.Info("upstream service usable again", "service", g.name,
			"after", time.Duration(mono(time.Now())-since).Round(time.Millisecond).String())
	}
}

// Name is the service's name.
func (g *Group) Name() string { return g.name }

// Deployed reports whether any base URL is configured.
func (g *Group) Deployed() bool { return len(g.targets) > 0 }

// URL is the base URL requests through RoundTrip may use: its host names
// the service, and RoundTrip replaces it by an endpoint's address.
func (g *Group) URL() *url.URL {
	u := *g.base
	return &u
}

// Next returns URL as a string (sessions.Upstream).
func (g *Group) Next() string { return g.base.String() }

func (g *Group) snapshot() []*endpoint { return *g.eps.Load() }

// Status describes one endpoint.
type Status struct {
	Address  string // ip:port
	State    string // ready, pending, not ready, down
	InFlight int64
}

// Endpoints describes the current endpoints, by address.
func (g *Group) Endpoints() []Status {
	var out []Status
	for _, e := range g.snapshot() {
		out = append(out, Status{Address: e.addr, State: e.state().String(), InFlight: e.inflight.Load()})
	}
	return out
}

// ---- resolution ----

func (g *Group) resolveLoop() {
	defer g.wg.Done()
	gap := min(g.o.ResolveInterval, 500*time.Millisecond)
	t := time.NewTicker(g.o.ResolveInterval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		case <-g.resolveKick:
			if d := gap - time.Since(last); d > 0 {
				select {
				case <-g.ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		g.resolve(g.ctx)
		last = time.Now()
	}
}

// kickResolve asks for a resolution now (rate-limited by resolveLoop).
func (g *Group) kickResolve() {
	select {
	case g.resolveKick <- struct{}{}:
	default:
	}
}

func (g *Group) kickProbe() {
	select {
	case g.probeKick <- struct{}{}:
	default:
	}
}

// resolve looks every name up and replaces the endpoint set. A name whose
// lookup fails keeps its last addresses (a DNS hiccup must not empty the
// set); a name that does not exist (or has no address) has none.
func (g *Group) resolve(ctx context.Context) {
	answers := map[*target][]string{}
	for _, t := range g.targets {
		if t.literal {
			answers[t] = []string{t.hostname}
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		hosts, err := g.o.Lookup(lctx, t.hostname)
		cancel()
		if ctx.Err() != nil {
			return
		}
		var dnsErr *net.DNSError
		switch {
		case err == nil:
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			hosts = nil
		default:
			g.mu.Lock()
			answers[t] = g.resolved[t]
			logIt := !g.failing[t]
			g.failing[t] = true
			g.mu.Unlock()
			if logIt {
				g.o.Log.Warn("upstream name not resolved; keeping its last addresses", "service", g.name, "host", t.hostname, "err", err)
			}
			continue
		}
		g.mu.Lock()
		g.failing[t] = false
		g.mu.Unlock()
		var ips []string
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				ips = append(ips, ip.String())
			} else if i := strings.IndexByte(h, '%'); i > 0 && net.ParseIP(h[:i]) != nil {
				ips = append(ips, h) // a zoned IPv6 address
			}
		}
		slices.Sort(ips)
		answers[t] = slices.Compact(ips)
	}
	g.update(answers)
}

// update makes answers the endpoint set, keeping the endpoints (and their
// state) of addresses still present.
func (g *Group) update(answers map[*target][]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for t, a := range answers {
		g.resolved[t] = a
	}
	next := map[string]*endpoint{}
	added := false
	for _, t := range g.targets {
		for _, ip := range answers[t] {
			addr := net.JoinHostPort(ip, t.port)
			if _, dup := next[addr]; dup {
				continue // the same replica under two names: one share
			}
			e := g.byAddr[addr]
			if e == nil {
				e = &endpoint{g: g, t: t, addr: addr, m: g.o.Metrics.endpoint(g.name, addr)}
				e.st.Store(int32(statePending))
				added = true
				g.o.Log.Info("upstream address added", "service", g.name, "address", addr)
			}
			next[addr] = e
		}
	}
	for addr, e := range g.byAddr {
		if next[addr] == nil {
			e.mu.Lock()
			e.removed = true
			e.mu.Unlock()
			g.o.Metrics.forget(g.name, addr)
			g.o.Log.Info("upstream address removed", "service", g.name, "address", addr)
		}
	}
	if !added && len(next) == len(g.byAddr) {
		return
	}
	g.byAddr = next
	list := make([]*endpoint, 0, len(next))
	for _, e := range next {
		list = append(list, e)
	}
	slices.SortFunc(list, func(a, b *endpoint) int { return strings.Compare(a.addr, b.addr) })
	g.eps.Store(&list)
	if added {
		g.kickProbe()
		g.usableAgain()
		g.broadcast()
	}
}

// ---- probing ----

type outcome int

const (
	outcomeReady outcome = iota
	outcomeNotReady
	outcomeDown
)

func (g *Group) probeLoop() {
	defer g.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-timer.C:
		case <-g.probeKick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		now := time.Now()
		wait := g.o.ProbeInterval
		for _, e := range g.snapshot() {
			e.mu.Lock()
			due := !e.probing && !now.Before(e.nextProbe)
			if due {
				e.probing = true
			} else if !e.probing {
				wait = min(wait, e.nextProbe.Sub(now))
			}
			e.mu.Unlock()
			if due {
				g.wg.Add(1)
				go func() {
					defer g.wg.Done()
					ctx, cancel := context.WithTimeout(g.ctx, g.o.ProbeTimeout)
					out := g.check(ctx, e)
					cancel()
					e.mu.Lock()
					e.probing = false
					e.mu.Unlock()
					if g.ctx.Err() == nil {
						e.apply(out)
						g.kickProbe() // schedule its next probe
					}
				}()
			}
		}
		timer.Reset(max(wait, time.Millisecond))
	}
}

// check sends one readiness probe to e.
func (g *Group) check(ctx context.Context, e *endpoint) outcome {
	u := url.URL{Scheme: e.t.scheme, Host: e.addr, Path: e.t.path + g.o.ProbePath}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return outcomeNotReady
	}
	req.Host = e.t.hostHeader
	req.Header.Set("User-Agent", "acme-gateway-probe")
	resp, err := e.t.rt.RoundTrip(req)
	if err != nil {
		if isDialError(err) {
			return outcomeDown
		}
		return outcomeNotReady
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return outcomeNotReady
	}
	return outcomeReady
}

// apply records the result of a probe (or of a request's failed dial).
func (e *endpoint) apply(out outcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.removed {
		return
	}
	now := time.Now()
	next := stateReady
	switch out {
	case outcomeReady:
		e.fails = 0
		e.nextProbe = now.Add(e.g.o.ProbeInterval)
	case outcomeNotReady:
		e.fails = 0
		next = stateNotReady
		e.nextProbe = now.Add(e.g.o.ProbeInterval)
	case outcomeDown:
		e.fails++
		next = stateDown
		e.nextProbe = now.Add(e.g.backoff(e.fails))
	}
	prev := state(e.st.Swap(int32(next)))
	if next == stateReady {
		e.m.healthy.Set(1)
	} else {
		e.m.healthy.Set(0)
	}
	if prev == next {
		return
	}
	if next != stateDown {
		e.g.usableAgain()
		e.g.broadcast()
	}
	log := e.g.o.Log.Info
	if next != stateReady {
		log = e.g.o.Log.Warn
	}
	log("upstream address "+next.String(), "service", e.g.name, "address", e.addr, "was", prev.String(),
		"next_probe_in", e.nextProbe.Sub(now).Round(time.Millisecond).String())
}

func (g *Group) backoff(fails int) time.Duration {
	d := g.o.BackoffMin
	for i := 1; i < fails && d < g.o.BackoffMax; i++ {
		d *= 2
	}
	return min(d, g.o.BackoffMax)
}

// markDown ejects e after a request could not connect to it. Requests
// failing together on an endpoint already down count once.
func (e *endpoint) markDown() {
	if e.state() == stateDown {
		return
	}
	e.apply(outcomeDown)
	e.g.kickProbe()
}

// revive makes a down endpoint that answered a last-resort request usable
// (pending: used while none is ready) and has it probed at once.
func (e *endpoint) revive() {
	e.mu.Lock()
	if !e.removed && e.state() == stateDown {
		e.fails = 0
		e.st.Store(int32(statePending))
		if !e.probing {
			e.nextProbe = time.Time{}
		}
		e.g.o.Log.Info("upstream address answering again", "service", e.g.name, "address", e.addr)
	}
	e.mu.Unlock()
	e.g.usableAgain()
	e.g.broadcast()
	e.g.kickProbe()
}

// suspect has e probed at once (its connection broke).
func (e *endpoint) suspect() {
	e.mu.Lock()
	if !e.removed && !e.probing {
		e.nextProbe = time.Time{}
	}
	e.mu.Unlock()
	e.g.kickProbe()
}

// Check describes one endpoint's answer to a probe made by CheckNow.
type Check struct {
	Address string
	Result  string // ok, not ready, unreachable
}

// CheckNow probes every current endpoint at once (bounded by ctx), records
// the results as the background probes would, and returns them by address.
func (g *Group) CheckNow(ctx context.Context) []Check {
	eps := g.snapshot()
	out := make([]Check, len(eps))
	var wg sync.WaitGroup
	for i, e := range eps {
		wg.Go(func() {
			res := g.check(ctx, e)
			if ctx.Err() == nil {
				e.apply(res)
			}
			out[i] = Check{Address: e.addr, Result: [...]string{"ok", "not ready", "unreachable"}[res]}
		})
	}
	wg.Wait()
	return out
}

// ---- requests ----

// pick returns the usable endpoint with the fewest requests in flight,
// preferring ready ones, skipping skip; ties go round-robin. With every
// endpoint down it returns one whose last-resort slot is free, taking the
// slot (trial); paced (the pick of a waiting request) also passes over an
// endpoint whose last last-resort request started less than waitPoll ago,
// so that waiting requests do not hammer a dead address. The request is
// counted in flight; done must follow.
func (g *Group) pick(skip *endpoint, paced bool) (e *endpoint, trial bool) {
	eps := g.snapshot()
	n := len(eps)
	if n == 0 {
		return nil, false
	}
	start := int(g.rr.Add(1) % uint64(n))
	var best *endpoint
	bestTier, bestLoad := 0, int64(0)
	for i := range n {
		e := eps[(start+i)%n]
		tier := e.state().tier()
		if e == skip || tier < 0 {
			continue
		}
		load := e.inflight.Load()
		if best == nil || tier < bestTier || tier == bestTier && load < bestLoad {
			best, bestTier, bestLoad = e, tier, load
		}
	}
	if best != nil {
		g.usableAgain()
	} else {
		now := mono(time.Now())
		for i := range n {
			e := eps[(start+i)%n]
			if e == skip || e.state() != stateDown || !e.trial.CompareAndSwap(false, true) {
				continue
			}
			if paced && now-e.trialAt.Load() < int64(waitPoll) {
				e.trial.Store(false)
				continue
			}
			e.trialAt.Store(now)
			best, trial = e, true
			break
		}
	}
	if best != nil {
		best.inflight.Add(1)
		best.m.inflight.Inc()
		best.m.requests.Inc()
	}
	return best, trial
}

// RoundTrip sends req to one endpoint of the service; req.URL supplies the
// path and query only.
//
// Sending again: a request is sent again, at once, to another endpoint
// when that cannot repeat anything: after a failed connection attempt if
// no byte of its body was read, and, for GET and HEAD, after any failure
// before the answer's headers if its body was not read or can be read
// again (GetBody). That is its one retry; with waiting on (below) and no
// other endpoint, it goes to the same one on another connection. Once a
// body has been read from, a POST, PUT, PATCH or DELETE is never sent
// again.
//
// Waiting (Options.RetryWait > 0): a request that finds no usable endpoint
// (or whose retry finds none, or cannot connect either), and that may
// still be sent (nothing of it reached a service, or a GET or HEAD as
// above), waits instead of failing: the names are resolved again at once
// (rate-limited as always), and it is sent as soon as an endpoint becomes
// usable (a new address, a probe passing, a down endpoint taking a
// last-resort request, tried at most every waitPoll). Connection attempts
// that fail meanwhile (nothing sent) keep it waiting. It waits until
// RetryWait has passed since the service became unavailable (when a
// request first found nothing usable; cleared as soon as an endpoint is
// usable or a request is answered), and never longer than RetryWait in
// all: a short gap (containers being replaced) is invisible, and a long
// outage is answered at once after its first RetryWait. A request whose
// context ends stops waiting with the context's error; StopWaiting and
// Close end waits too. A connection attempt under way when the time is up
// is not cut (the transport's dial timeout bounds it).
//
// With no usable endpoint the error wraps ErrUnavailable.
func (g *Group) RoundTrip(req *http.Request) (*http.Response, error) {
	var body *trackedBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &trackedBody{rc: req.Body}
	}
	var w waiting
	fail := func(err error) (*http.Response, error) {
		if body != nil {
			body.finish(true)
		}
		g.gm.observeWait(&w)
		return nil, err
	}
	var (
		tried    *endpoint // where the last attempt failed: not picked next
		failedOn string
		lastErr  error
		lastDial bool // the last attempt could not connect
		fails    int
	)
	for {
		var changed <-chan struct{}
		if g.o.RetryWait > 0 {
			changed = g.changes() // before pick: no change is missed
		}
		e, trial := g.pick(tried, fails > 1 || w.waited())
		if e == nil {
			g.kickResolve()
			if tried != nil && !lastDial && g.o.RetryWait > 0 {
				// Its one retry, after it broke on a connection (a kept
				// alive one the replica had just closed, say), and no other
				// endpoint: the same one again, on another connection.
				tried = nil
				continue
			}
			if g.o.RetryWait <= 0 {
				if tried != nil { // no other endpoint to retry on
					return fail(lastErr)
				}
				g.gm.unavailable.Inc()
				return fail(fmt.Errorf("%w for %s", ErrUnavailable, g.name))
			}
			if err := g.wait(req.Context(), changed, &w); err != nil {
				if errors.Is(err, ErrUnavailable) {
					g.gm.unavailable.Inc()
				}
				return fail(err)
			}
			tried = nil
			continue
		}
		if lastErr != nil {
			g.gm.retries.Inc()
			g.o.Log.Debug("upstream request sent again", "service", g.name, "failed_on", failedOn, "to", e.addr, "err", lastErr)
		}
		out := new(http.Request)
		*out = *req
		u := *req.URL
		u.Scheme, u.Host = e.t.scheme, e.addr
		if e.t.path != "" {
			u.Path = e.t.path + u.Path
			if u.RawPath != "" {
				u.RawPath = e.t.path + u.RawPath
			}
		}
		out.URL = &u
		out.Host = e.t.hostHeader
		if body != nil {
			out.Body = body
		}
		resp, err := e.t.rt.RoundTrip(out)
		if trial {
			e.trial.Store(false)
		}
		if err == nil {
			if body != nil {
				body.finish(false)
			}
			if trial {
				e.revive()
			}
			g.usableAgain()
			g.gm.observeWait(&w)
			return e.track(resp), nil
		}
		e.done()
		// The client going away, or its body failing (too large, stalled,
		// cut), is not the endpoint's fault and is never retried.
		if req.Context().Err() != nil || body != nil && body.failed() {
			return fail(err)
		}
		e.m.failures.Inc()
		dial := isDialError(err)
		if dial {
			e.markDown()
		} else {
			e.suspect()
		}
		g.kickResolve()
		fails++
		read := body != nil && body.wasRead()
		var again bool
		if fails == 1 { // its one retry
			again = dial && !read ||
				(req.Method == http.MethodGet || req.Method == http.MethodHead) && (!read || req.GetBody != nil)
		} else { // beyond it only while nothing was sent, to wait for an endpoint
			again = g.o.RetryWait > 0 && dial && !read
		}
		if !again {
			return fail(err)
		}
		if read {
			body.finish(true)
			rc, gerr := req.GetBody()
			if gerr != nil {
				g.gm.observeWait(&w)
				return nil, err
			}
			body = &trackedBody{rc: rc}
		} else if body != nil {
			body.rearm()
		}
		tried, failedOn, lastErr, lastDial = e, e.addr, err, dial
	}
}

// waiting is one request's wait for a usable endpoint.
type waiting struct {
	start, end time.Time // of the whole wait; zero start: it never waited
	result     string    // how its last part ended: found, expired, canceled
}

func (w *waiting) waited() bool { return !w.start.IsZero() }

// wait holds the request until an endpoint may have become usable (nil),
// or its wait is over: ErrUnavailable when its time is up (or the group is
// closing), the context's error when the client went away.
func (g *Group) wait(ctx context.Context, changed <-chan struct{}, w *waiting) error {
	now := time.Now()
	stop := func(result string, err error) error {
		if w.waited() {
			w.end, w.result = now, result
		}
		return err
	}
	unavailable := func() error { return fmt.Errorf("%w for %s", ErrUnavailable, g.name) }
	if err := ctx.Err(); err != nil {
		return stop("canceled", err)
	}
	if g.ctx.Err() != nil {
		return stop("canceled", unavailable())
	}
	since := g.unusableSince.Load()
	if since == 0 {
		if g.unusableSince.CompareAndSwap(0, mono(now)) {
			g.o.Log.Warn("upstream service has no usable address; requests wait for one", "service", g.name,
				"retry_wait", g.o.RetryWait.String())
		}
		if since = g.unusableSince.Load(); since == 0 {
			since = mono(now)
		}
	}
	// RetryWait since the service became unavailable, and at most
	// RetryWait for this request.
	deadline := since + int64(g.o.RetryWait)
	if w.waited() {
		deadline = min(deadline, mono(w.start)+int64(g.o.RetryWait))
	}
	result := "expired"
	if c := g.waitCutoff.Load(); c != 0 && c < deadline {
		deadline, result = c, "canceled"
	}
	left := time.Duration(deadline - mono(now))
	if left <= 0 {
		return stop(result, unavailable())
	}
	if !w.waited() {
		w.start = now
	}
	g.kickResolve()
	t := time.NewTimer(min(waitPoll, left))
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
		now = time.Now()
		return stop("canceled", ctx.Err())
	case <-g.ctx.Done():
		now = time.Now()
		return stop("canceled", unavailable())
	}
	w.end, w.result = time.Now(), "found"
	return nil
}

// isDialError reports a failure to connect (nothing was sent).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// track ends the request in flight when its answer's body is closed.
func (e *endpoint) track(resp *http.Response) *http.Response {
	if resp.Body == nil || resp.Body == http.NoBody {
		e.done()
		return resp
	}
	tb := &trackedResponse{ReadCloser: resp.Body, e: e}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &trackedUpgrade{trackedResponse: tb, w: rwc}
		return resp
	}
	resp.Body = tb
	return resp
}

type trackedResponse struct {
	io.ReadCloser
	e    *endpoint
	once sync.Once
}

func (b *trackedResponse) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.e.done)
	return err
}

// trackedUpgrade keeps a switched protocol's body writable (ReverseProxy
// needs an io.ReadWriteCloser).
type trackedUpgrade struct {
	*trackedResponse
	w io.Writer
}

func (b *trackedUpgrade) Write(p []byte) (int, error) { return b.w.Write(p) }

// trackedBody is a request body that remembers whether it was read from,
// and whether a read failed on the client's side. While nothing was read it
// keeps the transport's Close from closing the body, so a failed connection
// attempt leaves it whole for the next endpoint; finish decides.
type trackedBody struct {
	rc      io.ReadCloser
	read    atomic.Bool
	readErr atomic.Bool

	mu                        sync.Mutex
	closeAsked, final, closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	if !b.read.Load() {
		b.read.Store(true)
	}
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		b.readErr.Store(true)
	}
	return n, err
}

func (b *trackedBody) wasRead() bool { return b.read.Load() }
func (b *trackedBody) failed() bool  { return b.readErr.Load() }

func (b *trackedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if b.final || b.read.Load() {
		b.closed = true
		return b.rc.Close()
	}
	b.closeAsked = true
	return nil
}

// rearm forgets a Close asked for by a failed attempt's transport before the
// body goes to the next attempt.
func (b *trackedBody) rearm() {
	b.mu.Lock()
	b.closeAsked = false
	b.mu.Unlock()
}

// finish ends the retry window: a Close the transport asked for (or, with
// now, the RoundTripper's own duty to close on failure) reaches the body.
func (b *trackedBody) finish(now bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.final = true
	if (now || b.closeAsked) && !b.closed {
		b.closed = true
		_ = b.rc.Close()
	}
}
