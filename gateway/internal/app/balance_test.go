package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/acme/platform/pkg/testkit/apptest"
)

// Two auth replicas behind the real gateway, one killed between requests:
// session lookups (GET /ms/me), GETs and sign-ins (a POST: its connection
// was refused, so nothing was sent) all succeed, /readyz stays 200 and
// counts the replicas ready, and the per-address metrics show both.
func TestAuthReplicaKilled(t *testing.T) {
	a1, a2 := httptest.NewServer(&fakeAuth{}), httptest.NewServer(&fakeAuth{})
	t.Cleanup(a1.Close)
	t.Cleanup(a2.Close)
	g := runGateway(t, map[string]http.Handler{"files": http.HandlerFunc(echo), "logs": http.HandlerFunc(echo)}, io.Discard,
		map[string]string{"GATEWAY_AUTH_URL": a1.URL + "," + a2.URL, "GATEWAY_SESSION_CACHE_TTL": "0s"})
	for range 4 {
		if status, body := do(t, "GET", g.url+"/me", userCookie, "", nil); status != 200 {
			t.Fatalf("before: %d %v", status, body)
		}
	}
	a1Addr := strings.TrimPrefix(a1.URL, "http://")
	a1.Close()
	for i := range 20 {
		if status, body := do(t, "GET", g.url+"/me", userCookie, "", nil); status != 200 {
			t.Fatalf("GET /me %d after the kill: %d %v", i, status, body)
		}
		if status, body := do(t, "POST", g.url+"/signin", "", `{"email":"a@b.c"}`, nil); status != 200 {
			t.Fatalf("POST /signin %d after the kill: %d %v", i, status, body)
		}
	}
	// One ready replica is enough to serve: the gateway is ready, and
	// says how many are.
	status, body := do(t, "GET", g.url+"/readyz", "", "", nil)
	checks, _ := body["checks"].(map[string]any)
	if status != 200 || checks["auth"] != "ok (1 of 2 replicas ready)" {
		t.Fatalf("readyz with one auth replica dead: %d %v", status, body)
	}
	s := metricstest.Scrape(t, "http://"+g.metricsAddr+"/metrics")
	for _, addr := range []string{a1Addr, strings.TrimPrefix(a2.URL, "http://")} {
		if v, _ := s.Sum("acme_gateway_upstream_requests_total", "service", "auth", "address", addr); v == 0 {
			t.Errorf("no requests counted for %s: %v", addr, s.Find("acme_gateway_upstream_requests_total"))
		}
	}
	if v, _ := s.Sum("acme_gateway_upstream_healthy", "service", "auth", "address", a1Addr); v != 0 {
		t.Errorf("the dead replica's healthy gauge is %v", v)
	}
}

// /readyz of the gateway: 200 while every service has a ready replica,
// with the count per service and never an address; 503 in the usual error
// shape once every replica of one is gone.
func TestReadyzCountsReadyReplicas(t *testing.T) {
	a1, a2 := httptest.NewServer(&fakeAuth{}), httptest.NewServer(&fakeAuth{})
	t.Cleanup(a1.Close)
	t.Cleanup(a2.Close)
	g := runGateway(t, map[string]http.Handler{"files": http.HandlerFunc(echo), "logs": http.HandlerFunc(echo)}, io.Discard,
		map[string]string{"GATEWAY_AUTH_URL": a1.URL + "," + a2.URL})
	readyz := func() (int, map[string]any, string) {
		t.Helper()
		resp, err := http.Get(g.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("readyz: not JSON: %q", raw)
		}
		for _, s := range []*httptest.Server{a1, a2} {
			if strings.Contains(string(raw), strings.TrimPrefix(s.URL, "http://")) || strings.Contains(string(raw), "127.0.0.1") {
				t.Fatalf("readyz shows an address: %s", raw)
			}
		}
		checks, _ := body["checks"].(map[string]any)
		return resp.StatusCode, body, fmt.Sprint(checks["auth"])
	}
	if status, body, auth := readyz(); status != 200 || auth != "ok (2 of 2 replicas ready)" {
		t.Fatalf("both up: %d %v", status, body)
	}
	if status, body, _ := readyz(); body["checks"].(map[string]any)["files"] != "ok (1 of 1 replicas ready)" ||
		body["checks"].(map[string]any)["nats"] != "ok" {
		t.Fatalf("the other checks: %d %v", status, body)
	}
	a1.Close()
	if status, body, auth := readyz(); status != 200 || auth != "ok (1 of 2 replicas ready)" {
		t.Fatalf("one of two down: %d %v", status, body)
	}
	a2.Close()
	status, body, auth := readyz()
	if status != 503 || auth != "no replica ready (0 of 2)" || body["status"] != "unavailable" || body["code"] != "not_ready" {
		t.Fatalf("both down: %d %v", status, body)
	}
}

// The only auth replica is replaced (stopped, and a new process listens
// on its address about a second later, as a recreated container comes
// back): a session lookup (GET /me) and a sign-in (POST) sent during the
// gap wait for it and succeed, never a 503.
func TestAuthReplacedRequestsWait(t *testing.T) {
	fa := &fakeAuth{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	a := httptest.NewUnstartedServer(fa)
	a.Listener.Close()
	a.Listener = ln
	a.Start()
	t.Cleanup(a.Close)
	var out apptest.Log
	g := runGateway(t, map[string]http.Handler{"files": http.HandlerFunc(echo), "logs": http.HandlerFunc(echo)}, &out,
		map[string]string{"GATEWAY_AUTH_URL": "http://" + addr, "GATEWAY_SESSION_CACHE_TTL": "0s", "GATEWAY_RETRY_WAIT": "20s"})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", out.String())
		}
	})
	if status, body := do(t, "GET", g.url+"/me", userCookie, "", nil); status != 200 {
		t.Fatalf("before: %d %v", status, body)
	}
	a.Close()
	// Once the gateway has seen it go (a request sent at the very moment
	// the replica closes its kept-alive connections may have been written
	// to one; a POST then fails, as it may have been acted on).
	apptest.Eventually(t, 15*time.Second, func() error {
		if status, _ := do(t, "GET", g.url+"/readyz", "", "", nil); status != 503 {
			return fmt.Errorf("readyz still %d with the only auth replica stopped", status)
		}
		return nil
	})
	type result struct {
		status int
		body   map[string]any
	}
	me, signin := make(chan result, 1), make(chan result, 1)
	go func() { s, b := do(t, "GET", g.url+"/me", userCookie, "", nil); me <- result{s, b} }()
	go func() { s, b := do(t, "POST", g.url+"/signin", "", `{"email":"a@b.c"}`, nil); signin <- result{s, b} }()
	time.Sleep(time.Second)
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address was taken meanwhile: %v", err)
	}
	b := httptest.NewUnstartedServer(fa)
	b.Listener.Close()
	b.Listener = ln
	b.Start()
	t.Cleanup(b.Close)
	for name, c := range map[string]chan result{"GET /me": me, "POST /signin": signin} {
		select {
		case r := <-c:
			if r.status != 200 {
				t.Errorf("%s during the gap: %d %v", name, r.status, r.body)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer", name)
		}
	}
}

// A request waiting for a replica when the gateway is told to stop is
// answered (503 JSON) within the shutdown grace, and Run returns cleanly.
func TestShutdownEndsWaits(t *testing.T) {
	var out apptest.Log
	g := runGateway(t, map[string]http.Handler{"auth": &fakeAuth{}, "logs": http.HandlerFunc(echo)}, &out,
		map[string]string{"GATEWAY_RETRY_WAIT": "1m", "GATEWAY_SHUTDOWN_GRACE": "2s"}) // files: a closed port
	c := apptest.NewClient(t, g.url)
	c.HTTP = &http.Client{Transport: &http.Transport{}} // a connection of its own
	resc := c.Go("GET", "/images/x", nil)               // public: files only
	apptest.Eventually(t, 15*time.Second, func() error {
		if !strings.Contains(out.String(), "requests wait for one") {
			return fmt.Errorf("the request is not waiting; log:\n%s", out.String())
		}
		return nil
	})
	start := time.Now()
	g.stop()
	select {
	case r := <-resc:
		if r.Err != nil || r.Status != 503 || !strings.Contains(string(r.Body), `"service_unavailable"`) {
			t.Fatalf("the waiting request: %d %q %v", r.Status, r.Body, r.Err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("answered %v after shutdown began, grace 2s", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting request got no answer")
	}
	select {
	case <-g.svc.Done():
		err := g.svc.Err()
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
}
