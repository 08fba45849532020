package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/acme/platform/pkg/testkit/apptest"
)

// The service's /metrics answers without an identity token and counts
// sign-ins by result, live sessions, and requests by route template.
func TestMetrics(t *testing.T) {
	h := newHarness(t, map[string]string{
		"AUTH_METRICS_INTERVAL":     "100ms",
		"AUTH_THROTTLE_ACCOUNT_MAX": "2",
		"AUTH_THROTTLE_ADDRESS_MAX": "0",
	})
	admin := h.signIn(adminEmail, adminPassword) // ok
	for range 2 {                                // failed, failed: the account locks
		r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": "nobody@example.com", "password": "wrong-password"}})
		want(t, r, 401, "invalid_credentials")
	}
	r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": "nobody@example.com", "password": "wrong-password"}})
	want(t, r, 429, "throttled")
	r = h.do(req{method: "POST", path: "/signin", body: map[string]string{"email": "x@example.com", "password": "whatever-password"}})
	want(t, r, 401, "identity_required") // no token: not an attempt
	tok, _ := h.tokenFor(admin)
	want(t, h.do(req{method: "GET", path: "/users/0123456789abcdef01234567", token: tok}), 404, "user_not_found")

	s := metricstest.Scrape(t, h.base+"/metrics")
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"acme_auth_signins_total", []string{"result", "ok"}, 1},
		{"acme_auth_signins_total", []string{"result", "failed"}, 2},
		{"acme_auth_signins_total", []string{"result", "throttled"}, 1},
		{"acme_http_requests_total", []string{"route", "/signin", "method", "POST", "status", "200"}, 1},
		{"acme_http_requests_total", []string{"route", "/signin", "method", "POST", "status", "401"}, 2},
		{"acme_http_requests_total", []string{"route", "/signin", "method", "POST", "status", "429"}, 1},
		{"acme_http_requests_total", []string{"route", "unmatched", "method", "POST", "status", "401"}, 1},
		{"acme_http_requests_total", []string{"route", "/ms/me", "method", "GET", "status", "200"}, 1},
		{"acme_http_requests_total", []string{"route", "/users/:id", "method", "GET", "status", "404"}, 1},
		{"acme_http_request_duration_seconds_count", []string{"route", "/signin", "status", "401"}, 2},
	} {
		if got, _ := s.Sum(tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v\n%v", tc.name, tc.labels, got, tc.want, s.Find(tc.name))
		}
	}

	// One live session (the admin's); a second sign-in makes two.
	waitSessions := func(want float64) {
		t.Helper()
		apptest.Eventually(t, 10*time.Second, func() error {
			got, ok := metricstest.Scrape(t, h.base+"/metrics").Sum("acme_auth_sessions_active")
			if !ok || got != want {
				return fmt.Errorf("acme_auth_sessions_active = %v (present %v), want %v", got, ok, want)
			}
			return nil
		})
	}
	waitSessions(1)
	h.signIn(adminEmail, adminPassword)
	waitSessions(2)
}
