package web_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/pkg/web"
	"github.com/gofiber/fiber/v2"
)

// accessLines serves each path once through an app built as the services
// build theirs (NewApp with metrics, Health, a route of its own), logging
// at level, and returns the access lines logged, by route.
func accessLines(t *testing.T, level slog.Level, ready *atomic.Bool, paths ...string) map[string][]map[string]any {
	t.Helper()
	var out apptest.Log
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: level}))
	app := web.NewApp(web.Options{Name: "svc", Log: log, Metrics: metrics.NewRegistry()})
	web.Health(app, map[string]func(context.Context) error{"db": func(context.Context) error {
		if !ready.Load() {
			return errors.New("down")
		}
		return nil
	}})
	app.Get("/files/:id", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"ok": true}) })
	for _, p := range paths {
		resp, err := app.Test(httptest.NewRequest("GET", p, nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	byRoute := map[string][]map[string]any{}
	for _, l := range out.Lines(t) {
		if l["msg"] == "request" {
			route, _ := l["route"].(string)
			byRoute[route] = append(byRoute[route], l)
		}
	}
	return byRoute
}

// At the default level (INFO) the probes and scrapes that answer are not
// logged; every other request is, and so is a probe that fails.
func TestAccessLogRoutineRequestsAtDebug(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	paths := []string{"/healthz", "/readyz", "/metrics", "/files/7"}

	got := accessLines(t, slog.LevelInfo, &ready, paths...)
	for _, r := range []string{"/healthz", "/readyz", "/metrics"} {
		if n := len(got[r]); n != 0 {
			t.Errorf("GET %s answered and logged %d line(s) at INFO: %v", r, n, got[r])
		}
	}
	if n := len(got["/files/:id"]); n != 1 {
		t.Errorf("GET /files/7 logged %d access line(s) at INFO, want 1", n)
	}

	got = accessLines(t, slog.LevelDebug, &ready, paths...)
	for _, r := range []string{"/healthz", "/readyz", "/metrics"} {
		if len(got[r]) != 1 || got[r][0]["level"] != "DEBUG" {
			t.Errorf("GET %s at DEBUG: %v, want one DEBUG line", r, got[r])
		}
	}
	if l := got["/files/:id"]; len(l) != 1 || l[0]["level"] != "INFO" {
		t.Errorf("GET /files/7 at DEBUG: %v, want one INFO line", l)
	}

	ready.Store(false)
	got = accessLines(t, slog.LevelInfo, &ready, "/readyz")
	if l := got["/readyz"]; len(l) != 1 || l[0]["level"] != "INFO" || l[0]["status"] != float64(503) {
		t.Errorf("a failing /readyz at INFO: %v, want one INFO line with status 503", l)
	}
}

func TestAccessLevel(t *testing.T) {
	for _, tc := range []struct {
		route  string
		status int
		want   slog.Level
	}{
		{"/healthz", 200, slog.LevelDebug},
		{"/readyz", 200, slog.LevelDebug},
		{"/metrics", 200, slog.LevelDebug},
		{"/readyz", 503, slog.LevelInfo},
		{"/metrics", 404, slog.LevelInfo},
		{"/signin", 200, slog.LevelInfo},
		{"/", 404, slog.LevelInfo},
		{"/readyz/", 200, slog.LevelInfo},
	} {
		if got := web.AccessLevel(tc.route, tc.status); got != tc.want {
			t.Errorf("AccessLevel(%q, %d) = %v, want %v", tc.route, tc.status, got, tc.want)
		}
	}
}
