package proxy

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/gateway/internal/upstream"
	"github.com/acme/platform/pkg/identity"
)

// replica is a fake service replica: /readyz 200, /ms/me knows the user
// session, anything else echoes 200.
func replica(t *testing.T, served *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/readyz":
		case "/ms/me":
			io.WriteString(w, `{"user":{"id":"u1","roleName":"user"},"session":{"id":"s1"}}`)
		default:
			served.Add(1)
		}
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(s.Close)
	return s
}

func balancedHandler(t *testing.T, urls map[string][]string) *Handler {
	_, priv, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]*upstream.Group{}
	for svc, u := range urls {
		g, err := upstream.New(svc, u, upstream.Options{Transport: &http.Transport{},
			ProbeInterval: 20 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		groups[svc] = g
	}
	// No cache: every request asks auth.
	resolver := sessions.NewResolver(groups["auth"], "cred", &http.Client{Transport: groups["auth"]}, 0)
	return New(Config{Upstreams: groups, Resolver: resolver, Signer: identity.NewSigner(priv, 30*time.Second),
		Log: slog.New(slog.DiscardHandler), TokenTTL: 30 * time.Second})
}

func serve(h http.Handler, method, path, cookie string) (*httptest.ResponseRecorder, time.Duration) {
	req := httptest.NewRequest(method, path, strings.NewReader(""))
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: "sessionId", Value: cookie})
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, req)
	return rec, time.Since(start)
}

// Every replica of a service gone: the answer is a prompt JSON 503 in the
// gateway's error shape (auth's session lookup included), never a hang.
func TestAllReplicasDownIsPrompt503JSON(t *testing.T) {
	var n atomic.Int64
	a, b := replica(t, &n), replica(t, &n)
	h := balancedHandler(t, map[string][]string{"files": {a.URL, b.URL}, "auth": {a.URL, b.URL}})
	if rec, _ := serve(h, "GET", "/images/x", ""); rec.Code != 200 {
		t.Fatalf("with the replicas up: %d %s", rec.Code, rec.Body)
	}
	a.Close()
	b.Close()
	for _, c := range []struct{ path, cookie, code string }{
		{"/images/x", "", "service_unavailable"},
		{"/files", fuzzUserSID, "auth_unavailable"},
	} {
		for range 3 {
			rec, took := serve(h, "GET", c.path, c.cookie)
			var body map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 503 || body["code"] != c.code || body["error"] == "" {
				t.Fatalf("%s: %d %q, want 503 JSON %s", c.path, rec.Code, rec.Body, c.code)
			}
			if rec.Header().Get("Retry-After") == "" && c.code == "service_unavailable" {
				t.Errorf("%s: no Retry-After", c.path)
			}
			if took > 2*time.Second {
				t.Fatalf("%s: answered after %v", c.path, took)
			}
		}
	}
}

// A replica killed: GETs (and their session lookups) go on without a
// failure, through the proxy and the resolver alike.
func TestReplicaKilledNoFailedRequest(t *testing.T) {
	var n atomic.Int64
	a, b := replica(t, &n), replica(t, &n)
	h := balancedHandler(t, map[string][]string{"files": {a.URL, b.URL}, "auth": {a.URL, b.URL}})
	for range 4 {
		if rec, _ := serve(h, "GET", "/files", fuzzUserSID); rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	a.Close()
	for i := range 40 {
		if rec, _ := serve(h, "GET", "/files", fuzzUserSID); rec.Code != 200 {
			t.Fatalf("request %d after the kill: %d %s", i, rec.Code, rec.Body)
		}
	}
	if n.Load() != 44 {
		t.Fatalf("%d requests served, want 44", n.Load())
	}
}
