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
	"log/slog"
	"net"
	"net/http"
	"net/url"
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
		g.o.Log.Info("upstream service usable again", "upstream", g.name,
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
