package app

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"testing"

	"github.com/acme/platform/pkg/metrics/metricstest"
)

// /metrics answers without an identity token and counts uploads by kind
// and result, bytes in and out, and requests by route template.
func TestMetrics(t *testing.T) {
	h := start(t, nil, hooks{})
	tok := h.user("u1")
	content := make([]byte, 100_000) // incompressible: stored and sent as is
	rand.Read(content)
	f := h.uploadFile(tok, "random.bin", content)
	wantError(t, h.upload("/upload/file", tok, fileField("empty.txt", nil)), http.StatusBadRequest, "empty_file")
	wantError(t, h.upload("/upload/image", tok, fileField("not-an-image.png", text)), http.StatusUnsupportedMediaType, "unsupported_image")
	r := h.get("/download/file/"+f["id"].(string), tok, nil)
	wantStatus(t, r, http.StatusOK)
	if !bytes.Equal(r.body, content) {
		t.Fatal("downloaded bytes differ")
	}
	wantStatus(t, h.get("/download/file/"+f["id"].(string), "", nil), http.StatusUnauthorized)

	s := metricstest.Scrape(t, h.base+"/metrics")
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"acme_files_uploads_total", []string{"kind", "file", "result", "ok"}, 1},
		{"acme_files_uploads_total", []string{"kind", "file", "result", "rejected"}, 1},
		{"acme_files_uploads_total", []string{"kind", "image", "result", "rejected"}, 1},
		{"acme_files_uploads_total", []string{"kind", "image", "result", "ok"}, 0},
		{"acme_files_uploads_total", []string{"result", "failed"}, 0},
		{"acme_files_downloaded_bytes_total", nil, float64(len(content))},
		{"acme_http_requests_total", []string{"route", "/upload/file", "method", "POST", "status", "201"}, 1},
		{"acme_http_requests_total", []string{"route", "/upload/file", "method", "POST", "status", "400"}, 1},
		{"acme_http_requests_total", []string{"route", "/download/file/:id", "method", "GET", "status", "200"}, 1},
		{"acme_http_requests_total", []string{"route", "/download/file/:id", "method", "GET", "status", "401"}, 1},
	} {
		if got, ok := s.Sum(tc.name, tc.labels...); !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v\n%v", tc.name, tc.labels, got, ok, tc.want, s.Find(tc.name))
		}
	}
	// Bodies are multipart: the content plus boundaries and part headers.
	if got, _ := s.Sum("acme_files_uploaded_bytes_total"); got < float64(len(content)+len(text)) || got > float64(len(content)+len(text))+4096 {
		t.Errorf("uploaded bytes %v, want the bodies sent (about %d)", got, len(content)+len(text))
	}
}
