package httpapi

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/gofiber/fiber/v2"
)

// The files app is built without web.NewApp: it mounts web.Recover itself,
// so a handler's panic is a JSON 500 with the request id, not the end of
// the process (without it the panic ends this test binary).
func TestFilesAppRecoversPanics(t *testing.T) {
	pub, _, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	svc := files.NewService(&memRecords{m: map[string]*files.File{}}, &memObjects{m: map[string][]byte{}}, nil, files.Config{MaxUpload: 1 << 10})
	app := New(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Service: svc, Verifier: identity.NewVerifier(pub, "files"),
		PublicBaseURL: "http://gw.test", MaxUpload: 1 << 10, ReadIdle: time.Second})
	app.Get("/test-panic", func(c *fiber.Ctx) error { panic("boom") })
	for range 2 {
		req := httptest.NewRequest("GET", "/test-panic", nil)
		req.Header.Set(web.RequestIDHeader, "rid-files-panic")
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		body, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(body, &m); err != nil || resp.StatusCode != 500 || m["code"] != "internal" || m["requestId"] != "rid-files-panic" {
			t.Fatalf("panic: %d %s", resp.StatusCode, body)
		}
	}
	resp, err := app.Test(httptest.NewRequest("GET", "/healthz", nil), -1)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the panics: %v %v", resp, err)
	}
}
