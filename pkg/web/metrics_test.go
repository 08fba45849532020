package web_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/pkg/web"
	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"
)

// testApp is a service as the services build theirs: NewApp with metrics,
// health, then the identity check in front of every other route.
func testApp(t *testing.T, out io.Writer) (*fiber.App, string) {
	t.Helper()
	pub, priv, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := identity.NewSigner(priv, 0).Sign(identity.Claims{Role: identity.RoleUser,
		RegisteredClaims: jwt.RegisteredClaims{Subject: "u1"}}, "svc")
	if err != nil {
		t.Fatal(err)
	}
	log := web.WithRequestIDs(slog.New(slog.NewJSONHandler(out, nil)))
	app := web.NewApp(web.Options{Name: "svc", Log: log, Metrics: metrics.NewRegistry()})
	web.Health(app, nil)
	app.Use(web.RequireIdentity(identity.NewVerifier(pub, "svc")))
	app.Get("/users/:id", func(c *fiber.Ctx) error {
		log.InfoContext(c.UserContext(), "looking the user up", "user", strings.Clone(c.Params("id")))
		return c.JSON(fiber.Map{"ok": true})
	})
	app.Post("/users", func(c *fiber.Ctx) error {
		return web.Errorf(http.StatusConflict, "email_taken", "taken")
	})
	app.Get("/boom", func(c *fiber.Ctx) error {
		return io.ErrUnexpectedEOF // an unknown error: 500, logged
	})
	return app, tok
}

func call(t *testing.T, app *fiber.App, method, path, token string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if token != "" {
		req.Header.Set(identity.Header, token)
	}
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestFiberMetricsByRouteTemplate(t *testing.T) {
	app, tok := testApp(t, io.Discard)
	for _, tc := range []struct {
		method, path, token string
		status              int
	}{
		{"GET", "/users/42", tok, 200},
		{"GET", "/users/43", tok, 200},
		{"POST", "/users", tok, 409},
		{"GET", "/boom", tok, 500},
		{"GET", "/users/44", "", 401}, // refused by the identity check in front of every route
		{"GET", "/no/such/route", tok, 404},
		{"GET", "/healthz", "", 200},
	} {
		if resp := call(t, app, tc.method, tc.path, tc.token); resp.StatusCode != tc.status {
			t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
		}
	}

	// /metrics needs no identity token.
	resp := call(t, app, "GET", "/metrics", "")
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics without a token: %d", resp.StatusCode)
	}
	s, err := metricstest.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		route, method, status string
		want                  float64
	}{
		{"/users/:id", "GET", "200", 2},
		{"/users", "POST", "409", 1},
		{"/boom", "GET", "500", 1},
		{metrics.Unmatched, "GET", "401", 1},
		{metrics.Unmatched, "GET", "404", 1},
		{"/healthz", "GET", "200", 1},
	} {
		labels := []string{"route", tc.route, "method", tc.method, "status", tc.status}
		if got, _ := s.Sum("acme_http_requests_total", labels...); got != tc.want {
			t.Errorf("requests_total %v = %v, want %v; have %v", labels, got, tc.want, s.Find("acme_http_requests_total"))
		}
		if got, _ := s.Sum("acme_http_request_duration_seconds_count", labels...); got != tc.want {
			t.Errorf("duration count %v = %v, want %v", labels, got, tc.want)
		}
		if got, _ := s.Sum("acme_http_request_duration_seconds_bucket", append(labels, "le", "+Inf")...); got != tc.want {
			t.Errorf("duration +Inf bucket %v = %v, want %v", labels, got, tc.want)
		}
	}
	for _, x := range s.Find("acme_http_requests_total") {
		if r := x.Labels["route"]; strings.Contains(r, "42") || strings.Contains(r, "no/such") {
			t.Errorf("raw path as a label: %v", x)
		}
	}
}

// Every line logged with the request's context carries its id: the
// handler's own line, the error line and the access line.
func TestRequestIDOnEveryRequestLogLine(t *testing.T) {
	var out apptest.Log
	app, tok := testApp(t, &out)
	for path, rid := range map[string]string{"/users/7": "rid-users", "/boom": "rid-boom"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set(identity.Header, tok)
		req.Header.Set(web.RequestIDHeader, rid)
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get(web.RequestIDHeader); got != rid {
			t.Fatalf("echoed request id %q, want %q", got, rid)
		}
	}
	seen := map[string]string{}
	for _, l := range out.Lines(t) {
		msg, _ := l["msg"].(string)
		rid, _ := l["rid"].(string)
		if rid == "" {
			t.Errorf("line without rid: %v", l)
		}
		seen[msg+" "+rid] = rid
	}
	for _, want := range []string{"looking the user up rid-users", "request rid-users", "internal error rid-boom", "request rid-boom"} {
		if _, ok := seen[want]; !ok {
			t.Errorf("no line %q; lines %v", want, out.Lines(t))
		}
	}
}

// A record that names its rid keeps it and does not get a second one.
func TestLogHandlerKeepsExplicitRID(t *testing.T) {
	var b bytes.Buffer
	log := web.WithRequestIDs(slog.New(slog.NewJSONHandler(&b, nil)))
	ctx := web.WithRequestID(t.Context(), "from-ctx")
	log.InfoContext(ctx, "explicit", "rid", "own")
	log.With("svc", "x").InfoContext(ctx, "implicit")
	log.Info("no context")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines %q", lines)
	}
	if strings.Count(lines[0], `"rid"`) != 1 || !strings.Contains(lines[0], `"rid":"own"`) {
		t.Errorf("explicit rid line %s", lines[0])
	}
	if !strings.Contains(lines[1], `"rid":"from-ctx"`) || !strings.Contains(lines[1], `"svc":"x"`) {
		t.Errorf("context rid line %s", lines[1])
	}
	if strings.Contains(lines[2], `"rid"`) {
		t.Errorf("rid without a context: %s", lines[2])
	}
}
