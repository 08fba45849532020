package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/pkg/web"
	"github.com/gofiber/fiber/v2"
)

// get sends GET path with a request id and returns the status, headers and
// body.
func get(t *testing.T, c *http.Client, url, rid string) (int, http.Header, []byte, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if rid != "" {
		req.Header.Set(web.RequestIDHeader, rid)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// checkInternal asserts the JSON 500 of a recovered panic.
func checkInternal(t *testing.T, status int, h http.Header, body []byte, rid string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil || status != 500 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		t.Fatalf("want a JSON 500, got %d %q %q (%v)", status, h.Get("Content-Type"), body, err)
	}
	if m["code"] != "internal" || m["error"] != "internal error" || m["requestId"] != rid || h.Get(web.RequestIDHeader) != rid {
		t.Fatalf("500 body %v, X-Request-Id %q; want code internal and request id %q", m, h.Get(web.RequestIDHeader), rid)
	}
	if len(m) != 3 {
		t.Fatalf("500 body %v has more than error, code and requestId", m)
	}
}

// panicLines returns the log lines about a panic with the given request id.
func panicLines(t *testing.T, out *apptest.Log, msg, rid string) []map[string]any {
	t.Helper()
	var got []map[string]any
	for _, l := range out.Lines(t) {
		if l["msg"] == msg && l["rid"] == rid {
			got = append(got, l)
		}
	}
	return got
}

// A handler's panic, through a real listener (fasthttp recovers nothing by
// itself: without web.Recover the panic ends the test binary): a JSON 500
// with the request id, headers the handler had set are dropped, one log
// line with the panic and the stack, the access line and the metrics see
// the 500, and the server keeps answering, on the same connection too.
func TestRecoverFiberPanic(t *testing.T) {
	var out apptest.Log
	log := web.WithRequestIDs(slog.New(slog.NewJSONHandler(&out, nil)))
	reg := metrics.NewRegistry()
	app := web.NewApp(web.Options{Name: "svc", Log: log, Metrics: reg})
	app.Get("/panic", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentEncoding, "gzip") // must not reach the 500
		c.Set(fiber.HeaderContentDisposition, `attachment; filename="x"`)
		var m map[string]int
		m["x"]++ // nil map: a runtime panic
		return nil
	})
	app.Get("/panic-error", func(c *fiber.Ctx) error { panic(errors.New("an error value")) })
	app.Get("/ok", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"ok": true}) })
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- web.Serve(ctx, app, "127.0.0.1:0", time.Second, func(a string) { addr <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + <-addr
	c := &http.Client{Timeout: 5 * time.Second}

	for i, path := range []string{"/panic", "/panic-error", "/panic"} {
		rid := "rid-panic-" + string(rune('a'+i))
		status, h, body, err := get(t, c, base+path, rid)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		checkInternal(t, status, h, body, rid)
		if h.Get("Content-Encoding") != "" || h.Get("Content-Disposition") != "" {
			t.Fatalf("the handler's headers reached the 500: %v", h)
		}
		lines := panicLines(t, &out, "panic", rid)
		if len(lines) != 1 {
			t.Fatalf("%d panic lines for %s, want 1: %v", len(lines), rid, out.Lines(t))
		}
		stack, _ := lines[0]["stack"].(string)
		if !strings.Contains(stack, "recover_test.go") || lines[0]["path"] != path || lines[0]["panic"] == "" {
			t.Fatalf("panic line without the stack or path: %v", lines[0])
		}
		if access := panicLines(t, &out, "request", rid); len(access) != 1 || access[0]["status"] != float64(500) {
			t.Fatalf("access line %v, want one with status 500", access)
		}
		// The next request is served, on the kept-alive connection.
		if status, _, body, err := get(t, c, base+"/ok", ""); err != nil || status != 200 || !strings.Contains(string(body), `"ok":true`) {
			t.Fatalf("after the panic: %d %q %v", status, body, err)
		}
	}
	// A request without an id gets a new one, in the body and the header.
	status, h, body, err := get(t, c, base+"/panic", "")
	if err != nil {
		t.Fatal(err)
	}
	checkInternal(t, status, h, body, h.Get(web.RequestIDHeader))
	if !web.ValidRequestID(h.Get(web.RequestIDHeader)) {
		t.Fatalf("no request id: %v", h)
	}
	s := metricstest.Scrape(t, base+web.MetricsPath)
	if n, _ := s.Sum("acme_http_requests_total", "route", "/panic", "status", "500"); n != 3 {
		t.Fatalf("acme_http_requests_total{route=/panic,status=500} = %v, want 3; have %v", n, s.Find("acme_http_requests_total"))
	}
}

// An unknown error (not a panic) is a 500 with the request id as well.
func TestInternalErrorCarriesRequestID(t *testing.T) {
	var out apptest.Log
	app, tok := testApp(t, &out)
	req := httptest.NewRequest("GET", "/boom", nil)
	req.Header.Set(identity.Header, tok)
	req.Header.Set(web.RequestIDHeader, "rid-boom-2")
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	checkInternal(t, resp.StatusCode, resp.Header, body, "rid-boom-2")
}

// A panic in a body stream writer (fasthttp runs it in a goroutine of its
// own, after every middleware) cuts that answer, is logged with the stack,
// and the server keeps answering.
func TestGuardStreamPanic(t *testing.T) {
	var out apptest.Log
	log := web.WithRequestIDs(slog.New(slog.NewJSONHandler(&out, nil)))
	app := web.NewApp(web.Options{Name: "svc", Log: log})
	app.Get("/stream", func(c *fiber.Ctx) error {
		c.Context().SetBodyStreamWriter(web.GuardStream(log, web.RequestID(c), func(w *bufio.Writer) {
			_, _ = w.WriteString("first line\n")
			_ = w.Flush()
			var p *struct{ n int }
			p.n++ // nil pointer: a runtime panic
		}))
		return nil
	})
	app.Get("/ok", func(c *fiber.Ctx) error { return c.SendString("ok") })
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- web.Serve(ctx, app, "127.0.0.1:0", time.Second, func(a string) { addr <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + <-addr
	c := &http.Client{Timeout: 5 * time.Second}
	status, _, body, err := get(t, c, base+"/stream", "rid-stream")
	if status != 200 || !strings.HasPrefix(string(body), "first line\n") {
		t.Fatalf("stream: %d %q %v", status, body, err)
	}
	apptest.Eventually(t, 5*time.Second, func() error {
		if l := panicLines(t, &out, "panic in a streamed answer", "rid-stream"); len(l) != 1 || !strings.Contains(l[0]["stack"].(string), "recover_test.go") {
			return errors.New("no panic line with the stack yet")
		}
		return nil
	})
	if status, _, body, err := get(t, c, base+"/ok", ""); err != nil || status != 200 || string(body) != "ok" {
		t.Fatalf("after the panic: %d %q %v", status, body, err)
	}
}

// RecoverHTTP (the gateway's): a panic before the answer is a JSON 500 with
// the request id the handler set; after the answer began the connection is
// aborted (never a whole-looking answer); http.ErrAbortHandler passes
// through unlogged; the server keeps answering.
func TestRecoverHTTP(t *testing.T) {
	var out apptest.Log
	log := slog.New(slog.NewJSONHandler(&out, nil))
	mux := http.NewServeMux()
	mux.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(web.RequestIDHeader, "rid-set-by-handler")
		w.Header().Set("Content-Encoding", "gzip")
		panic("boom")
	})
	mux.HandleFunc("/panic-late", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		_, _ = w.Write([]byte("partial"))
		panic("late boom")
	})
	mux.HandleFunc("/abort", func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) })
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := httptest.NewUnstartedServer(web.RecoverHTTP(log, mux))
	srv.Config.ErrorLog = slog.NewLogLogger(slog.NewJSONHandler(io.Discard, nil), slog.LevelWarn)
	srv.Start()
	t.Cleanup(srv.Close)
	c := srv.Client()

	status, h, body, err := get(t, c, srv.URL+"/panic", "rid-from-client")
	if err != nil {
		t.Fatal(err)
	}
	checkInternal(t, status, h, body, "rid-set-by-handler")
	if h.Get("Content-Encoding") != "" {
		t.Fatalf("the handler's headers reached the 500: %v", h)
	}
	if l := panicLines(t, &out, "panic", "rid-set-by-handler"); len(l) != 1 || !strings.Contains(l[0]["stack"].(string), "recover_test.go") || l[0]["panic"] != "boom" {
		t.Fatalf("panic lines %v", out.Lines(t))
	}
	// A fresh connection: on a reused one the client would retry the GET.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	if _, _, _, err := get(t, fresh, srv.URL+"/panic-late", "rid-late"); err == nil {
		t.Fatal("a panic after the answer began gave a whole answer")
	}
	if l := panicLines(t, &out, "panic", "rid-late"); len(l) != 1 {
		t.Fatalf("%d late panic lines, want 1", len(l))
	}
	if _, _, _, err := get(t, fresh, srv.URL+"/abort", "rid-abort"); err == nil {
		t.Fatal("http.ErrAbortHandler gave an answer")
	}
	if l := panicLines(t, &out, "panic", "rid-abort"); len(l) != 0 {
		t.Fatalf("http.ErrAbortHandler was logged as a panic: %v", l)
	}
	if status, _, body, err := get(t, c, srv.URL+"/ok", ""); err != nil || status != 200 || string(body) != "ok" {
		t.Fatalf("after the panics: %d %q %v", status, body, err)
	}
}
