package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/acme/platform/services/files/internal/imaging"
	"github.com/golang-jwt/jwt/v5"
)

// pageRecords is memRecords that notes the skip and limit the listing asked
// the store for.
type pageRecords struct {
	*memRecords
	mu          sync.Mutex
	skip, limit int
}

func (s *pageRecords) ListByOwner(_ context.Context, _ string, skip, limit int) ([]*files.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skip, s.limit = skip, limit
	return nil, nil
}

// FuzzFilesQuery sends arbitrary page and limit to GET /files through the
// real router and handlers. Never a 5xx or a panic, errors JSON with the
// parameter's code; a 200 echoes a page of 1..1,000,000 and a limit of
// 1..100, and the store was asked for a skip of (page-1)*limit (no
// overflow, never negative) and limit+1 records.
func FuzzFilesQuery(f *testing.F) {
	pub, priv, err := identity.GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	recs := &pageRecords{memRecords: &memRecords{m: map[string]*files.File{}}}
	svc := files.NewService(recs, &memObjects{m: map[string][]byte{}}, nil, files.Config{MaxUpload: 4 << 10, ImageMaxBytes: 4 << 10,
		ImageWait: time.Second, Image: imaging.Options{MaxPixels: 64 * 64, MaxSide: 16, JPEGQuality: 80}})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	app := New(Options{Log: log, Service: svc, Verifier: identity.NewVerifier(pub, "files"), PublicBaseURL: "http://gw.test",
		MaxUpload: 4 << 10, MaxMeta: 256, ImageMaxBytes: 4 << 10, ReadIdle: time.Second})
	tok, err := identity.NewSigner(priv, time.Hour).Sign(identity.Claims{Role: "user", RegisteredClaims: jwt.RegisteredClaims{Subject: "u1"}}, "files")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range [][2]string{{"1", "20"}, {"1000000", "100"}, {"1000001", "1"}, {"9223372036854775807", "100"},
		{"-1", "1"}, {"0", "0"}, {"1", "101"}, {"1", "-9223372036854775808"}, {"1e3", "1"}, {"+1", " 1"}, {"", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, page, limit string) {
		q := url.Values{}
		if page != "" {
			q.Set("page", page)
		}
		if limit != "" {
			q.Set("limit", limit)
		}
		req := httptest.NewRequest("GET", "/files", nil)
		req.URL.RawQuery = q.Encode()
		req.RequestURI = req.URL.RequestURI()
		req.Header.Set(identity.Header, tok)
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		if resp.StatusCode >= 500 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || json.Unmarshal(body, &m) != nil {
			t.Fatalf("page %q limit %q: %d %q", page, limit, resp.StatusCode, body)
		}
		if resp.StatusCode != 200 {
			if code := m["code"]; resp.StatusCode != 400 || code != "invalid_page" && code != "invalid_limit" {
				t.Fatalf("page %q limit %q: %d %v", page, limit, resp.StatusCode, m)
			}
			return
		}
		p, l := int(m["page"].(float64)), int(m["limit"].(float64))
		if p < 1 || p > 1_000_000 || l < 1 || l > 100 {
			t.Fatalf("page %q limit %q: answered page %d limit %d", page, limit, p, l)
		}
		if n, err := strconv.Atoi(page); page != "" && (err != nil || n != p) {
			t.Fatalf("page %q answered as %d", page, p)
		}
		if n, err := strconv.Atoi(limit); limit != "" && (err != nil || n != l) {
			t.Fatalf("limit %q answered as %d", limit, l)
		}
		recs.mu.Lock()
		skip, asked := recs.skip, recs.limit
		recs.mu.Unlock()
		if skip != (p-1)*l || skip < 0 || asked != l+1 {
			t.Fatalf("page %d limit %d: the store was asked skip %d limit %d", p, l, skip, asked)
		}
	})
}
