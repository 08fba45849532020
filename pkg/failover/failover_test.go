package failover

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// node is a server that says its name and answers its readiness URL
// with 200 or 503.
type node struct {
	name  string
	srv   *httptest.Server
	ready atomic.Bool
}

func newNode(t *testing.T, name string) *node {
	n := &node{name: name}
	n.ready.Store(true)
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" {
			if !n.ready.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		io.WriteString(w, n.name+" "+r.Host)
	}))
	t.Cleanup(n.srv.Close)
	return n
}

func (n *node) addr() string { return n.srv.Listener.Addr().String() }

// client is an HTTP client over d that opens a connection per request, so
// every request shows which node the dialer picked.
func client(d *Dialer) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

func get(t *testing.T, c *http.Client) string {
	t.Helper()
	resp, err := c.Get("http://logical.example:9000/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestSpreadsOverNodesAndKeepsTheHost(t *testing.T) {
	a, b, c := newNode(t, "a"), newNode(t, "b"), newNode(t, "c")
	d, err := New([]string{a.addr(), b.addr(), c.addr()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	hc := client(d)
	seen := map[string]int{}
	for range 9 {
		name, host, _ := strings.Cut(get(t, hc), " ")
		if host != "logical.example:9000" {
			t.Fatalf("the node got Host %q, want the request's", host)
		}
		seen[name]++
	}
	if seen["a"] != 3 || seen["b"] != 3 || seen["c"] != 3 {
		t.Fatalf("connections per node %v, want 3 each", seen)
	}
}

func TestSkipsADeadNode(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	dead := newNode(t, "dead")
	deadAddr := dead.addr()
	dead.srv.Close() // nothing listens there any more: connection refused
	d, err := New([]string{a.addr(), deadAddr, b.addr()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	hc := client(d)
	for range 6 {
		if name, _, _ := strings.Cut(get(t, hc), " "); name == "dead" {
			t.Fatal("answered by the dead node")
		}
	}
	if r := d.Ready(); !r[0] || r[1] || !r[2] {
		t.Fatalf("ready %v, want the dead node set aside", r)
	}
}

func TestProbeSetsAsideANodeThatIsNotReady(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	b.ready.Store(false)
	d, err := New([]string{a.addr(), b.addr()}, Options{ProbeURL: "http://%s/ready", Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	waitReady(t, d, []bool{true, false})
	hc := client(d)
	for range 4 {
		if name, _, _ := strings.Cut(get(t, hc), " "); name != "a" {
			t.Fatalf("answered by %s while it is not ready", name)
		}
	}
	// Ready again: it gets connections again.
	b.ready.Store(true)
	waitReady(t, d, []bool{true, true})
	seen := map[string]bool{}
	for range 4 {
		name, _, _ := strings.Cut(get(t, hc), " ")
		seen[name] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("answered by %v, want both", seen)
	}
}

func TestNoNodeAnswers(t *testing.T) {
	var addrs []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		l.Close()
	}
	d, err := New(addrs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = d.DialContext(t.Context(), "tcp", "ignored:1")
	if err == nil || !strings.Contains(err.Error(), addrs[0]) || !strings.Contains(err.Error(), addrs[1]) {
		t.Fatalf("got %v, want an error naming both nodes", err)
	}
}

func TestBadAddresses(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("no address accepted")
	}
	if _, err := New([]string{"minio1"}, Options{}); err == nil {
		t.Fatal("an address without a port accepted")
	}
	if got := Split(" a:1, b:2,,"); fmt.Sprint(got) != "[a:1 b:2]" {
		t.Fatalf("Split: %q", got)
	}
}

func waitReady(t *testing.T, d *Dialer, want []bool) {
	t.Helper()
	for range 500 {
		if fmt.Sprint(d.Ready()) == fmt.Sprint(want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("ready %v, want %v", d.Ready(), want)
}
