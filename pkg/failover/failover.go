// Package failover lets one HTTP client use several equivalent servers: the
// nodes of a distributed MinIO, each of which answers every request for the
// whole cluster. A Dialer is the DialContext of an http.Transport; it ignores
// the address it is asked for and connects to the next node that passed its
// last readiness probe, in turn, trying the others when a connection fails.
// Connections, not requests, are spread: the transport keeps reusing a
// connection while it works, and when its node dies the connection breaks,
// the request fails, and the client's own retry (minio-go retries network
// errors and 5xx answers) dials again, to a node that is up.
//
// The request keeps the host it was made for (its Host header and, with
// TLS, the server name it verifies), so every node must accept that name:
// MinIO does for path-style requests, and a TLS certificate must name it.
package failover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Options configure a Dialer; zero values take the defaults shown.
type Options struct {
	// ProbeURL is the readiness URL of a node, with %s for its host:port
	// (for MinIO "http://%s/minio/health/ready"); empty: no probes, a node
	// is set aside only when a connection to it fails.
	ProbeURL string
	// Interval between two probes of each node (2s).
	Interval time.Duration
	// DialTimeout bounds one connection attempt to one node (3s), so a
	// node that does not answer costs that long before the next is tried.
	DialTimeout time.Duration
	// Client sends the probes (an http.Client with a 2s timeout).
	Client *http.Client
}

// Dialer connects to one of several nodes. It is safe for concurrent use.
type Dialer struct {
	addrs  []string
	o      Options
	dialer net.Dialer
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	ready []bool
	next  int
}

// New returns a Dialer over addrs (host:port each, at least one) and, when
// o.ProbeURL is set, starts probing them until Close.
func New(addrs []string, o Options) (*Dialer, error) {
	if len(addrs) == 0 {
		return nil, errors.New("failover: no address")
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("failover: %q is not host:port: %w", a, err)
		}
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 3 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 2 * time.Second}
	}
	d := &Dialer{
		addrs:  append([]string(nil), addrs...),
		o:      o,
		dialer: net.Dialer{Timeout: o.DialTimeout, KeepAlive: 15 * time.Second},
		ready:  make([]bool, len(addrs)),
		done:   make(chan struct{}),
	}
	for i := range d.ready {
		d.ready[i] = true // until a probe or a connection says otherwise
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	if o.ProbeURL == "" {
		close(d.done)
	} else {
		go d.probe(ctx)
	}
	return d, nil
}

// Split parses a comma-separated list of host:port (spaces allowed).
func Split(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Close stops the probes.
func (d *Dialer) Close() {
	d.cancel()
	<-d.done
}

// Ready reports which nodes passed their last probe (and whose last
// connection attempt did not fail since), in the order given to New.
func (d *Dialer) Ready() []bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]bool(nil), d.ready...)
}

// DialContext connects to a node; addr, the host the request was made for,
// is not used. Ready nodes are tried first, in turn from the one after the
// last connection's, then the others; the first connection made is
// returned. Every node failing is an error naming each failure.
func (d *Dialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	var errs []error
	for _, i := range d.order() {
		c, err := d.dialer.DialContext(ctx, network, d.addrs[i])
		if err == nil {
			d.set(i, true)
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
		d.set(i, false)
	}
	return nil, fmt.Errorf("failover: no node answered: %w", errors.Join(errs...))
}

// order is the sequence of nodes to try: the ready ones from the next in
// turn, then the rest.
func (d *Dialer) order() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.addrs)
	start := d.next
	d.next = (d.next + 1) % n
	out := make([]int, 0, n)
	for pass := range 2 {
		for k := range n {
			i := (start + k) % n
			if d.ready[i] == (pass == 0) {
				out = append(out, i)
			}
		}
	}
	return out
}

func (d *Dialer) set(i int, ready bool) {
	d.mu.Lock()
	d.ready[i] = ready
	d.mu.Unlock()
}

func (d *Dialer) probe(ctx context.Context) {
	defer close(d.done)
	t := time.NewTicker(d.o.Interval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for i, a := range d.addrs {
			wg.Go(func() { d.set(i, d.check(ctx, a)) })
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Dialer) check(ctx context.Context, addr string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf(d.o.ProbeURL, addr), nil)
	if err != nil {
		return false
	}
	resp, err := d.o.Client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}
