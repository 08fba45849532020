package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
)

func readyz(t *testing.T, checks map[string]func(context.Context) error) (int, map[string]any, time.Duration) {
	t.Helper()
	app := fiber.New()
	Health(app, checks)
	start := time.Now()
	resp, err := app.Test(httptest.NewRequest("GET", "/readyz", nil), 10_000)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("readyz body %q: %v", raw, err)
	}
	return resp.StatusCode, body, took
}

func TestReadyz(t *testing.T) {
	ok := func(context.Context) error { return nil }
	down := func(context.Context) error { return errors.New("down") }
	// stuck ignores its context, like a check waiting for a lock.
	release := make(chan struct{})
	defer close(release)
	stuck := func(context.Context) error { <-release; return nil }
	// slow passes, but only after a second: the checks run at once, so
	// two of them still answer within the bound.
	slow := func(context.Context) error { time.Sleep(time.Second); return nil }

	if code, body, _ := readyz(t, map[string]func(context.Context) error{"a": ok, "b": slow, "c": slow}); code != 200 || body["status"] != "ok" {
		t.Fatalf("passing checks: %d %v", code, body)
	}
	code, body, _ := readyz(t, map[string]func(context.Context) error{"a": ok, "b": down})
	if checks, _ := body["checks"].(map[string]any); code != 503 || checks["a"] != "ok" || checks["b"] != "unavailable" || body["code"] != "unavailable" {
		t.Fatalf("a failing check: %d %v", code, body)
	}
	code, body, took := readyz(t, map[string]func(context.Context) error{"a": ok, "stuck": stuck})
	if checks, _ := body["checks"].(map[string]any); code != 503 || checks["a"] != "ok" || checks["stuck"] != "timeout" {
		t.Fatalf("a stuck check: %d %v", code, body)
	}
	if took > ReadyTimeout+time.Second {
		t.Fatalf("a stuck check held /readyz for %v (bound %v)", took, ReadyTimeout)
	}
}
