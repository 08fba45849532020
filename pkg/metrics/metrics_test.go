package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/metrics/metricstest"
)

// scrape serves reg through Handler and parses the answer.
func scrape(t *testing.T, h http.Handler) metricstest.Samples {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	s, err := metricstest.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMiddlewareLabels(t *testing.T) {
	reg := metrics.NewRegistry()
	m := metrics.NewHTTP(reg)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/users/") {
			metrics.SetRoute(r.Context(), "/users")
			w.WriteHeader(http.StatusCreated)
			return
		}
		http.NotFound(w, r) // no SetRoute: the mux pattern "/" would mislead
		metrics.SetRoute(r.Context(), metrics.Unmatched)
	})
	h := m.Middleware(mux)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/healthz"}, {"GET", "/healthz"},
		{"POST", "/users/1"}, {"POST", "/users/2"}, {"POST", "/users/3"},
		{"GET", "/no/such/thing"},
		{"BREW", "/users/4"},
	} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
	}

	s := scrape(t, metrics.Handler(reg))
	for _, tc := range []struct {
		route, method, status string
		want                  float64
	}{
		{"/healthz", "GET", "200", 2},
		{"/users", "POST", "201", 3},
		{metrics.Unmatched, "GET", "404", 1},
		{"/users", "OTHER", "201", 1},
	} {
		got, _ := s.Sum("acme_http_requests_total", "route", tc.route, "method", tc.method, "status", tc.status)
		if got != tc.want {
			t.Errorf("requests_total{route=%s,method=%s,status=%s} = %v, want %v\n%v", tc.route, tc.method, tc.status, got, tc.want, s.Find("acme_http_requests_total"))
		}
		n, _ := s.Sum("acme_http_request_duration_seconds_count", "route", tc.route, "method", tc.method, "status", tc.status)
		if n != tc.want {
			t.Errorf("duration count{route=%s} = %v, want %v", tc.route, n, tc.want)
		}
	}
	for _, x := range s.Find("acme_http_requests_total") {
		if strings.Contains(x.Labels["route"], "/users/") || strings.Contains(x.Labels["route"], "/no/") {
			t.Errorf("a raw path became a label: %v", x)
		}
	}
	if v, ok := s.Sum("acme_http_requests_in_flight"); !ok || v != 0 {
		t.Errorf("in flight %v (present %v), want 0", v, ok)
	}
	if !s.Has("go_goroutines") || !s.Has("process_cpu_seconds_total") {
		t.Errorf("runtime collectors missing: %v", s.Names())
	}
}

// Two registries in one process (two services in one test binary) do not
// see each other's requests and do not panic on registration.
func TestRegistriesAreSeparate(t *testing.T) {
	a, b := metrics.NewRegistry(), metrics.NewRegistry()
	ma, _ := metrics.NewHTTP(a), metrics.NewHTTP(b)
	ma.End(ma.Begin(), "/x", "GET", 200)
	if _, ok := scrape(t, metrics.Handler(b)).Sum("acme_http_requests_total"); ok {
		t.Fatal("registry b shows a request recorded on a")
	}
	if v, _ := scrape(t, metrics.Handler(a)).Sum("acme_http_requests_total", "route", "/x"); v != 1 {
		t.Fatalf("registry a: %v, want 1", v)
	}
}

// The recorder keeps the final status, not an informational 1xx, and lets
// flushes through (the gateway streams answers).
func TestMiddlewareStatusAndFlush(t *testing.T) {
	reg := metrics.NewRegistry()
	h := metrics.NewHTTP(reg).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusAccepted)
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if !rec.Flushed {
		t.Error("flush did not reach the writer")
	}
	if v, _ := scrape(t, metrics.Handler(reg)).Sum("acme_http_requests_total", "status", "202", "route", metrics.Unmatched); v != 1 {
		t.Fatalf("status 202 count %v, want 1", v)
	}
}
