package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/metrics/metricstest"
)

// Two auth replicas behind the real gateway, one killed between requests:
// session lookups (GET /ms/me), GETs and sign-ins (a POST: its connection
// was refused, so nothing was sent) all succeed, /readyz reports the dead
// replica, and the per-address metrics show both.
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
	status, body := do(t, "GET", g.url+"/readyz", "", "", nil)
	checks, _ := body["checks"].(map[string]any)
	// Replicas are numbered by address order, whatever the ports drawn.
	if a, b := checks["auth[0]"], checks["auth[1]"]; status != 503 ||
		!(a == "unreachable" && b == "ok" || a == "ok" && b == "unreachable") {
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
