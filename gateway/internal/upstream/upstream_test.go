package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/prometheus/client_golang/prometheus"
)

// backend is one replica: a real HTTP server on a loopback address of its
// own (127.0.0.2, 127.0.0.3, ...: Linux routes all of 127/8 to loopback).
type backend struct {
	ip, port string
	srv      *httptest.Server
	hits     atomic.Int64 // requests other than probes
	bodies   atomic.Int64 // request body bytes received
	notReady atomic.Bool  // /readyz answers 503
	hangUp   atomic.Bool  // read the body, then close the connection without answering
	block    chan struct{}
	arrived  chan string // /slow requests, once they are in
}

func (b *backend) addr() string { return net.JoinHostPort(b.ip, b.port) }

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/readyz" {
		if b.notReady.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		io.WriteString(w, `{}`)
		return
	}
	n, _ := io.Copy(io.Discard, r.Body)
	b.bodies.Add(n)
	b.hits.Add(1)
	if b.hangUp.Load() {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	switch r.URL.Path {
	case "/slow":
		b.arrived <- b.ip
		<-b.block
	case "/big":
		w.Header().Set("Content-Length", r.URL.Query().Get("n"))
		var size int64
		fmt.Sscan(r.URL.Query().Get("n"), &size)
		io.CopyN(w, zeros{}, size)
		return
	}
	fmt.Fprintf(w, `{"ip":%q,"host":%q,"path":%q,"bytes":%d}`, b.ip, r.Host, r.URL.Path, n)
}

// listen starts (or restarts) b's server on its address.
func (b *backend) listen(t *testing.T) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(b.ip, b.port))
	if err != nil {
		return err
	}
	b.port = fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	b.srv = httptest.NewUnstartedServer(b)
	b.srv.Listener.Close()
	b.srv.Listener = ln
	b.srv.Start()
	srv := b.srv
	t.Cleanup(srv.Close)
	return nil
}

// startBackends starts n replicas on 127.0.0.2, 127.0.0.3, ... sharing
// one port, as the replicas of a scaled service share theirs.
func startBackends(t *testing.T, n int) []*backend {
	t.Helper()
	for try := 0; try < 5; try++ {
		var bs []*backend
		port := "0"
		ok := true
		for i := range n {
			b := &backend{ip: fmt.Sprintf("127.0.0.%d", i+2), port: port, block: make(chan struct{}), arrived: make(chan string, 16)}
			if err := b.listen(t); err != nil {
				ok = false // the port is taken on that address: another port
				break
			}
			port = b.port
			bs = append(bs, b)
		}
		if ok {
			return bs
		}
		for _, b := range bs {
			b.srv.Close()
		}
	}
	t.Fatal("no port free on every loopback address")
	return nil
}

// dns is an injectable resolver.
type dns struct {
	mu      sync.Mutex
	ips     []string
	err     error
	lookups atomic.Int64
}

func (d *dns) set(ips ...string) {
	d.mu.Lock()
	d.ips, d.err = ips, nil
	d.mu.Unlock()
}

func (d *dns) fail(err error) {
	d.mu.Lock()
	d.err = err
	d.mu.Unlock()
}

func (d *dns) lookup(_ context.Context, host string) ([]string, error) {
	d.lookups.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if host != "svc.test" {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return slices.Clone(d.ips), d.err
}

func ips(bs []*backend) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.ip)
	}
	return out
}

// fast are short intervals, so conditions are reached quickly; tests wait
// on conditions, never on these.
func fast(d *dns, reg prometheus.Registerer) Options {
	o := Options{ResolveInterval: 20 * time.Millisecond, ProbeInterval: 20 * time.Millisecond,
		ProbeTimeout: time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Transport: &http.Transport{}}
	if d != nil {
		o.Lookup = d.lookup
	}
	if reg != nil {
		o.Metrics = NewMetrics(reg)
	}
	return o
}

// readyGroup starts n backends on their own loopback addresses, lists
// them all under svc.test, and returns the Group once every one is ready.
func readyGroup(t *testing.T, n int, reg prometheus.Registerer) ([]*backend, *dns, *Group) {
	t.Helper()
	bs := startBackends(t, n)
	d := &dns{}
	d.set(ips(bs)...)
	g := newGroup(t, []string{"http://svc.test:" + bs[0].port}, fast(d, reg))
	waitFor(t, "every address is ready", allIn(g, "ready", bs...))
	return bs, d, g
}

func newGroup(t *testing.T, urls []string, o Options) *Group {
	t.Helper()
	g, err := New("svc", urls, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// states maps address to state.
func states(g *Group) map[string]string {
	m := map[string]string{}
	for _, s := range g.Endpoints() {
		m[s.Address] = s.State
	}
	return m
}

func allIn(g *Group, state string, bs ...*backend) func() bool {
	return func() bool {
		st := states(g)
		for _, b := range bs {
			if st[b.addr()] != state {
				return false
			}
		}
		return true
	}
}

func get(t *testing.T, g *Group, path string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", g.Next()+path, nil)
	resp, err := g.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func hits(bs []*backend) []int64 {
	var out []int64
	for _, b := range bs {
		out = append(out, b.hits.Load())
	}
	return out
}

func resetHits(bs []*backend) {
	for _, b := range bs {
		b.hits.Store(0)
	}
}

// Each of three replicas behind one name gets its share, and the request
// carries the configured Host, not the address.
func TestSpreadsOverEveryAddress(t *testing.T) {
	bs, _, g := readyGroup(t, 3, nil)
	for range 300 {
		status, body, err := get(t, g, "/x")
		if err != nil || status != 200 {
			t.Fatalf("%d %s %v", status, body, err)
		}
		if !strings.Contains(body, `"host":"svc.test:`+bs[0].port+`"`) {
			t.Fatalf("Host header not the configured one: %s", body)
		}
	}
	for i, n := range hits(bs) {
		if n < 80 || n > 120 {
			t.Errorf("replica %d got %d of 300 requests: %v", i, n, hits(bs))
		}
	}
}

// Least outstanding requests: with one request held on a replica, the next
// goes to a replica with none, so three held requests land on three
// different replicas.
func TestLeastOutstandingRequests(t *testing.T) {
	bs, _, g := readyGroup(t, 3, nil)
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for i := range 3 {
		wg.Go(func() {
			if status, _, err := get(t, g, "/slow"); err != nil || status != 200 {
				t.Errorf("slow request: %d %v", status, err)
			}
		})
		// Wait until it is held by a replica before sending the next.
		var ip string
		select {
		case ip = <-bs[0].arrived:
		case ip = <-bs[1].arrived:
		case ip = <-bs[2].arrived:
		case <-time.After(15 * time.Second):
			t.Fatal("the slow request did not arrive")
		}
		if seen[ip] {
			t.Errorf("two held requests on %s: least-outstanding ignored", ip)
		}
		seen[ip] = true
		if i == 0 {
			// With one request held there, quick requests go elsewhere
			// (round-robin alone would send it a third of them).
			resetHits(bs)
			for range 30 {
				get(t, g, "/x")
			}
			for _, b := range bs {
				if b.ip == ip && b.hits.Load() != 0 {
					t.Errorf("the replica holding a request got %d of 30 quick ones: %v", b.hits.Load(), hits(bs))
				}
			}
		}
	}
	inflight := 0
	for _, s := range g.Endpoints() {
		inflight += int(s.InFlight)
	}
	if inflight != 3 {
		t.Errorf("in flight %d, want 3: %+v", inflight, g.Endpoints())
	}
	for _, b := range bs {
		close(b.block)
	}
	wg.Wait()
	waitFor(t, "nothing in flight once the answers are read", func() bool {
		for _, s := range g.Endpoints() {
			if s.InFlight != 0 {
				return false
			}
		}
		return true
	})
}

// A replica added to the name's DNS answer gets traffic.
func TestNewAddressInDNSGetsTraffic(t *testing.T) {
	bs := startBackends(t, 3)
	d := &dns{}
	d.set(bs[0].ip, bs[1].ip)
	g := newGroup(t, []string{"http://svc.test:" + bs[0].port}, fast(d, nil))
	waitFor(t, "the two first are ready", allIn(g, "ready", bs[0], bs[1]))
	for range 20 {
		get(t, g, "/x")
	}
	if bs[2].hits.Load() != 0 {
		t.Fatal("an address not in DNS got traffic")
	}
	d.set(ips(bs)...)
	waitFor(t, "the new address is ready", allIn(g, "ready", bs[2]))
	resetHits(bs)
	for range 30 {
		if status, _, err := get(t, g, "/x"); err != nil || status != 200 {
			t.Fatalf("%d %v", status, err)
		}
	}
	if n := bs[2].hits.Load(); n < 5 {
		t.Fatalf("the new replica got %d of 30 requests: %v", n, hits(bs))
	}
}

// A replica dropped from DNS gets nothing more, and its metric series go.
func TestAddressRemovedFromDNSStopsGettingTraffic(t *testing.T) {
	reg := prometheus.NewRegistry()
	bs, d, g := readyGroup(t, 3, reg)
	d.set(bs[0].ip, bs[2].ip)
	waitFor(t, "the address is dropped", func() bool { _, ok := states(g)[bs[1].addr()]; return !ok })
	resetHits(bs)
	for range 30 {
		if status, _, err := get(t, g, "/x"); err != nil || status != 200 {
			t.Fatalf("%d %v", status, err)
		}
	}
	if n := bs[1].hits.Load(); n != 0 {
		t.Fatalf("the removed replica got %d requests", n)
	}
	s := scrape(t, reg)
	if len(s.Find("acme_gateway_upstream_requests_total", "address", bs[1].addr())) != 0 {
		t.Error("the removed address's series are still exported")
	}
	// A DNS failure keeps the last answer; a name that no longer exists
	// empties the set, and requests fail at once.
	d.fail(errors.New("server misbehaving"))
	n := d.lookups.Load()
	waitFor(t, "two more lookups", func() bool { return d.lookups.Load() >= n+2 })
	if len(g.Endpoints()) != 2 {
		t.Fatalf("a failed lookup changed the set: %+v", g.Endpoints())
	}
	d.fail(&net.DNSError{Err: "no such host", Name: "svc.test", IsNotFound: true})
	waitFor(t, "the set is empty", func() bool { return len(g.Endpoints()) == 0 })
	if _, _, err := get(t, g, "/x"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no address: %v, want ErrUnavailable", err)
	}
}

// A replica killed while listed (refused connections) gets no more
// traffic, and no GET fails: the one sent to it is sent again elsewhere.
func TestClosedReplicaNoFailedGET(t *testing.T) {
	reg := prometheus.NewRegistry()
	bs, _, g := readyGroup(t, 3, reg)
	for range 6 {
		get(t, g, "/x") // keep-alive connections to each
	}
	bs[1].srv.Close()
	for i := range 60 {
		if status, body, err := get(t, g, "/x"); err != nil || status != 200 {
			t.Fatalf("GET %d after the kill: %d %s %v", i, status, body, err)
		}
	}
	if st := states(g)[bs[1].addr()]; st != "down" {
		t.Errorf("killed replica is %q, want down", st)
	}
	s := scrape(t, reg)
	if f, _ := s.Sum("acme_gateway_upstream_failures_total", "address", bs[1].addr()); f > 1 {
		t.Errorf("%v requests failed on the killed replica; after the first it is ejected", f)
	}
	if v, _ := s.Sum("acme_gateway_upstream_healthy", "address", bs[1].addr()); v != 0 {
		t.Errorf("healthy gauge of the killed replica %v", v)
	}
}

// After a failed connection nothing was sent, so even a POST goes to
// another replica, body intact; it arrives exactly once.
func TestPostSentAgainOnlyWhenNothingWasSent(t *testing.T) {
	bs := startBackends(t, 2)
	o := fast(nil, nil)
	o.ProbeInterval = time.Hour // no probe notices the kill: a request must
	g := newGroup(t, []string{"http://" + bs[0].addr(), "http://" + bs[1].addr()}, o)
	waitFor(t, "both ready", allIn(g, "ready", bs...))
	bs[0].srv.Close()
	payload := strings.Repeat("p", 100<<10)
	for range 2 { // one of the two picks the killed replica first
		req, _ := http.NewRequest("POST", g.Next()+"/x", io.NopCloser(strings.NewReader(payload)))
		req.ContentLength = int64(len(payload))
		resp, err := g.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), fmt.Sprintf(`"bytes":%d`, len(payload))) {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	if n := bs[1].hits.Load(); n != 2 {
		t.Fatalf("the live replica got %d POSTs, want 2", n)
	}
	if b := bs[1].bodies.Load(); b != 2*int64(len(payload)) {
		t.Fatalf("%d body bytes arrived, want %d", b, 2*len(payload))
	}
}

// A replica that takes a request and dies before answering: a POST whose
// body went out is never sent again (it may have been acted on); a GET is
// sent once more to another replica, and only once.
func TestPostNeverResentAfterItsBodyWasSent(t *testing.T) {
	bs := startBackends(t, 3)
	o := fast(nil, nil)
	o.ProbeInterval = time.Hour
	// Fresh connections only: on a reused one net/http itself sends a GET
	// once more when the server closed it, which would blur the counts.
	o.Transport = &http.Transport{DisableKeepAlives: true}
	g := newGroup(t, []string{"http://" + bs[0].addr(), "http://" + bs[1].addr(), "http://" + bs[2].addr()}, o)
	waitFor(t, "all ready", allIn(g, "ready", bs...))
	for _, b := range bs {
		b.hangUp.Store(true)
	}
	total := func() (n int64) {
		for _, b := range bs {
			n += b.hits.Load()
		}
		return n
	}
	for _, method := range []string{"POST", "PATCH", "PUT", "DELETE"} {
		before := total()
		req, _ := http.NewRequest(method, g.Next()+"/x", io.NopCloser(strings.NewReader(`{"a":1}`)))
		req.ContentLength = 7
		if _, err := g.RoundTrip(req); err == nil {
			t.Fatalf("%s: no error from a replica that hung up", method)
		}
		if n := total() - before; n != 1 {
			t.Fatalf("%s arrived %d times, want exactly 1", method, n)
		}
	}
	// A POST with a replayable body (GetBody) is not resent either.
	before := total()
	req, _ := http.NewRequest("POST", g.Next()+"/x", strings.NewReader(`{}`))
	if _, err := g.RoundTrip(req); err == nil {
		t.Fatal("no error")
	}
	if n := total() - before; n != 1 {
		t.Fatalf("POST with GetBody arrived %d times, want 1", n)
	}
	// GET: once more, elsewhere, and no more.
	before = total()
	if _, _, err := get(t, g, "/x"); err == nil {
		t.Fatal("GET: no error although every replica hangs up")
	}
	if n := total() - before; n != 2 {
		t.Fatalf("GET arrived %d times, want 2 (one retry)", n)
	}
	// With one replica answering again, GETs all succeed.
	bs[0].hangUp.Store(false)
	bs[2].hangUp.Store(false)
	for i := range 20 {
		if status, _, err := get(t, g, "/x"); err != nil || status != 200 {
			t.Fatalf("GET %d: %d %v", i, status, err)
		}
	}
}

// The session lookup's form, GET with a body (GetBody): sent again after
// its body went out and the replica hung up.
func TestGetWithReplayableBodyRetried(t *testing.T) {
	bs := startBackends(t, 2)
	o := fast(nil, nil)
	o.ProbeInterval = time.Hour
	g := newGroup(t, []string{"http://" + bs[0].addr(), "http://" + bs[1].addr()}, o)
	waitFor(t, "both ready", allIn(g, "ready", bs...))
	bs[0].hangUp.Store(true)
	for range 4 {
		req, _ := http.NewRequest("GET", g.Next()+"/ms/me", strings.NewReader(`{"sessionId":"x"}`))
		resp, err := (&http.Client{Transport: g}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"bytes":17`) {
			t.Fatalf("body not resent whole: %s", body)
		}
	}
}

// A replica failing its readiness probe gets no new requests while others
// pass, and gets them again once it passes.
func TestProbeFailureEjectsAndRecovery(t *testing.T) {
	reg := prometheus.NewRegistry()
	bs, _, g := readyGroup(t, 3, reg)
	bs[2].notReady.Store(true)
	waitFor(t, "the failing replica is not ready", allIn(g, "not ready", bs[2]))
	if v, _ := scrape(t, reg).Sum("acme_gateway_upstream_healthy", "address", bs[2].addr()); v != 0 {
		t.Errorf("healthy gauge %v for a replica failing its probe", v)
	}
	resetHits(bs)
	for range 30 {
		get(t, g, "/x")
	}
	if n := bs[2].hits.Load(); n != 0 {
		t.Fatalf("a replica failing its probe got %d requests", n)
	}
	bs[2].notReady.Store(false)
	waitFor(t, "it passes again", allIn(g, "ready", bs[2]))
	resetHits(bs)
	for range 30 {
		get(t, g, "/x")
	}
	if n := bs[2].hits.Load(); n < 5 {
		t.Fatalf("the recovered replica got %d of 30", n)
	}
}

// When every replica says it is not ready (a dependency they share is
// down), requests still reach them: the service's own answer is better
// than the gateway's.
func TestEveryReplicaNotReadyStillServed(t *testing.T) {
	bs := startBackends(t, 2)
	d := &dns{}
	d.set(ips(bs)...)
	g := newGroup(t, []string{"http://svc.test:" + bs[0].port}, fast(d, nil))
	for _, b := range bs {
		b.notReady.Store(true)
	}
	waitFor(t, "both not ready", allIn(g, "not ready", bs...))
	for range 10 {
		if status, _, err := get(t, g, "/x"); err != nil || status != 200 {
			t.Fatalf("%d %v", status, err)
		}
	}
	if h := hits(bs); h[0] == 0 || h[1] == 0 {
		t.Fatalf("not spread over the not-ready replicas: %v", h)
	}
}

// Every replica killed: requests fail at once (the proxy answers 503), and
// a replica restarted on its address is used again.
func TestAllDownFailsFastThenRecovers(t *testing.T) {
	bs := startBackends(t, 2)
	g := newGroup(t, []string{"http://" + bs[0].addr(), "http://" + bs[1].addr()}, fast(nil, nil))
	waitFor(t, "both ready", allIn(g, "ready", bs...))
	for _, b := range bs {
		b.srv.Close()
	}
	for i := range 50 {
		start := time.Now()
		if _, _, err := get(t, g, "/x"); err == nil {
			t.Fatal("a request succeeded with every replica down")
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("request %d took %v to fail", i, d)
		}
	}
	waitFor(t, "both down", allIn(g, "down", bs...))
	if err := bs[1].listen(t); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restarted replica is ready", allIn(g, "ready", bs[1]))
	if status, _, err := get(t, g, "/x"); err != nil || status != 200 {
		t.Fatalf("after the restart: %d %v", status, err)
	}
}

// A lone replica that comes back is used by the very next request, not
// after its back-off: with every address down, one request may try one.
func TestLoneReplicaUsedAtOnceWhenBack(t *testing.T) {
	bs := startBackends(t, 1)
	o := fast(nil, nil)
	o.ProbeInterval, o.BackoffMin, o.BackoffMax = time.Hour, time.Hour, time.Hour // no probe helps
	g := newGroup(t, []string{"http://" + bs[0].addr()}, o)
	waitFor(t, "ready", allIn(g, "ready", bs[0]))
	bs[0].srv.Close()
	if _, _, err := get(t, g, "/x"); err == nil {
		t.Fatal("no error with the replica down")
	}
	if st := states(g)[bs[0].addr()]; st != "down" {
		t.Fatalf("state %q after a refused connection, want down", st)
	}
	if err := bs[0].listen(t); err != nil {
		t.Fatal(err)
	}
	if status, _, err := get(t, g, "/x"); err != nil || status != 200 {
		t.Fatalf("first request after the restart: %d %v", status, err)
	}
	if st := states(g)[bs[0].addr()]; st == "down" {
		t.Fatal("still down after answering")
	}
}

// With every address down, only one last-resort request at a time goes
// to an address; the others get ErrUnavailable at once, even while that one
// hangs in a dial (an address that vanished instead of refusing).
func TestOneLastResortRequestAtATime(t *testing.T) {
	bs := startBackends(t, 1)
	addr := bs[0].addr()
	bs[0].srv.Close()
	var hang atomic.Bool
	dialing, release := make(chan struct{}, 1), make(chan struct{})
	o := fast(nil, nil)
	o.ProbeInterval, o.BackoffMin, o.BackoffMax = time.Hour, time.Hour, time.Hour
	o.Transport = &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		if hang.Load() {
			dialing <- struct{}{}
			<-release
			return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("no route to host")}
		}
		return (&net.Dialer{}).DialContext(ctx, network, a)
	}}
	g := newGroup(t, []string{"http://" + addr}, o)
	waitFor(t, "down (the first probe was refused)", func() bool { return states(g)[addr] == "down" })
	hang.Store(true)
	done := make(chan error, 1)
	go func() { _, _, err := get(t, g, "/x"); done <- err }()
	select {
	case <-dialing:
	case <-time.After(15 * time.Second):
		t.Fatal("the last-resort request did not dial")
	}
	for range 20 {
		start := time.Now()
		if _, _, err := get(t, g, "/x"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("while the last resort hangs: %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("refused after %v", d)
		}
	}
	close(release)
	if err := <-done; err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("the last-resort request: %v, want its dial error", err)
	}
}

// IP literals, several URLs, base paths and plain 127.0.0.1 work with the
// default resolver (never called for literals).
func TestLiteralAddressesNeedNoResolver(t *testing.T) {
	bs := startBackends(t, 1)
	o := fast(nil, nil)
	o.Lookup = func(context.Context, string) ([]string, error) {
		t.Error("a literal address was looked up")
		return nil, errors.New("no")
	}
	g := newGroup(t, []string{"http://" + bs[0].addr() + "/base/"}, o)
	status, body, err := get(t, g, "/x")
	if err != nil || status != 200 || !strings.Contains(body, `"path":"/base/x"`) || !strings.Contains(body, `"host":"`+bs[0].addr()+`"`) {
		t.Fatalf("%d %s %v", status, body, err)
	}
	if _, err := New("svc", []string{"ftp://x"}, Options{}); err == nil {
		t.Fatal("a URL that is not http(s) was accepted")
	}
	empty := newGroup(t, nil, o)
	if empty.Deployed() {
		t.Fatal("no URL, yet deployed")
	}
}

// Requests and answers of 128 MiB each stream through in bounded memory.
func TestStreamsLargeBodiesInBoundedMemory(t *testing.T) {
	bs := startBackends(t, 2)
	d := &dns{}
	d.set(ips(bs)...)
	g := newGroup(t, []string{"http://svc.test:" + bs[0].port}, fast(d, nil))
	waitFor(t, "ready", allIn(g, "ready", bs...))
	const size = 128 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	req, _ := http.NewRequest("POST", g.Next()+"/upload", io.NopCloser(io.LimitReader(zeros{}, size)))
	req.ContentLength = size
	resp, err := g.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), fmt.Sprintf(`"bytes":%d`, size)) {
		t.Fatalf("upload: %s", body)
	}
	req, _ = http.NewRequest("GET", g.Next()+fmt.Sprintf("/big?n=%d", size), nil)
	resp, err = g.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	runtime.ReadMemStats(&after)
	// Allocated in total by the whole process (client, balancer and the
	// servers): buffering either body would be at least 128 MiB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/8 {
		t.Fatalf("%d MiB allocated to stream 2 × %d MiB", alloc>>20, size>>20)
	}
}

// The per-address metrics.
func TestMetricsPerAddress(t *testing.T) {
	bs := startBackends(t, 2)
	d := &dns{}
	d.set(ips(bs)...)
	reg := prometheus.NewRegistry()
	g := newGroup(t, []string{"http://svc.test:" + bs[0].port}, fast(d, reg))
	waitFor(t, "ready", allIn(g, "ready", bs...))
	for range 10 {
		get(t, g, "/x")
	}
	s := scrape(t, reg)
	for _, b := range bs {
		lbl := []string{"service", "svc", "address", b.addr()}
		if v, _ := s.Sum("acme_gateway_upstream_requests_total", lbl...); v != float64(b.hits.Load()) || v == 0 {
			t.Errorf("requests %s = %v, replica counted %d", b.addr(), v, b.hits.Load())
		}
		if v, ok := s.Sum("acme_gateway_upstream_in_flight", lbl...); !ok || v != 0 {
			t.Errorf("in flight %s = %v (%v)", b.addr(), v, ok)
		}
		if v, _ := s.Sum("acme_gateway_upstream_healthy", lbl...); v != 1 {
			t.Errorf("healthy %s = %v", b.addr(), v)
		}
		if v, ok := s.Sum("acme_gateway_upstream_failures_total", lbl...); !ok || v != 0 {
			t.Errorf("failures %s = %v (%v)", b.addr(), v, ok)
		}
	}
	for _, name := range []string{"acme_gateway_upstream_retries_total", "acme_gateway_upstream_unavailable_total"} {
		if _, ok := s.Sum(name, "service", "svc"); !ok {
			t.Errorf("%s not exported from the start", name)
		}
	}
}

func scrape(t *testing.T, reg *prometheus.Registry) metricstest.Samples {
	t.Helper()
	rec := httptest.NewRecorder()
	metrics.Handler(reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	s, err := metricstest.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
