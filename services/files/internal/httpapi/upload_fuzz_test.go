package httpapi

import (
	"bytes"
	"context"
	"io"
	"iter"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/acme/platform/services/files/internal/imaging"
	"github.com/golang-jwt/jwt/v5"
)

// In-memory stores for the handler fuzz target (the real adapters are
// tested against FerretDB and MinIO).
type memRecords struct {
	noLinks
	noQuotas
	mu sync.Mutex
	m  map[string]*files.File
}

func (s *memRecords) TakeVariant(context.Context, string, int64) (bool, error) { return true, nil }
func (s *memRecords) GiveBackVariant(context.Context, string) error            { return nil }

func (s *memRecords) Insert(_ context.Context, f *files.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[f.ID] = f
	return nil
}

func (s *memRecords) Get(_ context.Context, id string) (*files.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.m[id]; ok {
		return f, nil
	}
	return nil, files.ErrNotFound
}

func (s *memRecords) ListByOwner(context.Context, string, int, int) ([]*files.File, error) {
	return nil, nil
}

func (s *memRecords) Existing(context.Context, []string) (map[string]bool, error) { return nil, nil }

func (s *memRecords) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
	return nil
}

// The fuzz target runs without share links or quotas.
type noLinks struct{ files.LinkStore }
type noQuotas struct{}

func (noQuotas) Account(context.Context, string) (files.Account, error) { return files.Account{}, nil }
func (noQuotas) Reserve(context.Context, string, int64, files.Account, int64) (files.Account, bool, error) {
	return files.Account{}, true, nil
}
func (noQuotas) Release(context.Context, string, int64) error   { return nil }
func (noQuotas) SetQuota(context.Context, string, *int64) error { return nil }
func (noQuotas) ForgetUsage(context.Context, string) error      { return nil }

type memObjects struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (o *memObjects) Put(_ context.Context, key string, r io.Reader, _ int64, _ string) (files.PutResult, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return files.PutResult{}, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[key] = b
	return files.PutResult{Size: int64(len(b))}, nil
}

func (o *memObjects) Get(_ context.Context, key string, start, end int64) (*files.Object, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.m[key]
	if !ok {
		return nil, files.ErrNotFound
	}
	if end >= 0 {
		b = b[start : end+1]
	}
	return &files.Object{Body: io.NopCloser(bytes.NewReader(b)), Size: int64(len(b))}, nil
}

func (o *memObjects) Remove(_ context.Context, key string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, key)
	return nil
}

func (o *memObjects) PutNew(_ context.Context, key string, data []byte, _, _ string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.m[key]; ok {
		return files.ErrConflict
	}
	o.m[key] = bytes.Clone(data)
	return nil
}

func (o *memObjects) Stat(_ context.Context, key string) (files.ObjectStat, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.m[key]
	if !ok {
		return files.ObjectStat{}, files.ErrNotFound
	}
	return files.ObjectStat{Size: int64(len(b))}, nil
}

func (o *memObjects) List(context.Context, string) iter.Seq2[files.ObjectInfo, error] {
	return func(func(files.ObjectInfo, error) bool) {}
}

// FuzzUpload sends arbitrary multipart bodies (any boundary, part headers,
// file names, meta, truncation) to both upload routes through the real
// router and handlers, then reads what was stored back through retrieve
// and download. No input may give a 5xx or an error without a JSON body;
// a 201 must describe a stored object whose bytes download unchanged.
func FuzzUpload(f *testing.F) {
	pub, priv, err := identity.GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	recs := &memRecords{m: map[string]*files.File{}}
	objs := &memObjects{m: map[string][]byte{}}
	svc := files.NewService(recs, objs, nil, files.Config{MaxUpload: 4 << 10, ImageMaxBytes: 4 << 10, ImageWait: time.Second,
		Image: imaging.Options{MaxPixels: 64 * 64, MaxSide: 16, JPEGQuality: 80}})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	app := New(Options{Log: log, Service: svc, Verifier: identity.NewVerifier(pub, "files"), PublicBaseURL: "http://gw.test",
		MaxUpload: 4 << 10, MaxMeta: 256, ImageMaxBytes: 4 << 10, ReadIdle: time.Second})
	tok, err := identity.NewSigner(priv, time.Hour).Sign(identity.Claims{Role: "user", RegisteredClaims: jwt.RegisteredClaims{Subject: "u1"}}, "files")
	if err != nil {
		f.Fatal(err)
	}
	form := func(parts ...string) []byte {
		return []byte(strings.Join(parts, "\r\n"))
	}
	f.Add(false, "multipart/form-data; boundary=B", form("--B", `Content-Disposition: form-data; name="file"; filename="a.txt"`, "", "hello", "--B", `Content-Disposition: form-data; name="meta"`, "", `{"k":1}`, "--B--", ""))
	f.Add(false, "multipart/form-data; boundary=B", form("--B", `Content-Disposition: form-data; name="file"; filename*=UTF-8''%E2%80%AEgnp.exe`, "", "x", "--B"))
	f.Add(false, "multipart/form-data; boundary=B", form("--B", `Content-Disposition: form-data; name="file"; filename="e"`, "", "", "--B--"))
	f.Add(false, "multipart/form-data; boundary=B", form("--B", `Content-Disposition: form-data; name="meta"`, "", "\xff", "--B--"))
	f.Add(false, "multipart/form-data", []byte("x"))
	f.Add(false, "text/plain", []byte("x"))
	f.Add(true, "multipart/form-data; boundary=B", form("--B", `Content-Disposition: form-data; name="file"; filename="p.gif"`, "", "GIF89a\x01\x00\x01\x00\x00\x00\x00;", "--B--", ""))
	f.Add(true, "multipart/form-data; boundary=B", form("--B", `Content-Disposition: form-data; name="file"`, "", "not an image", "--B--", ""))
	f.Fuzz(func(t *testing.T, image bool, ct string, body []byte) {
		path := "/upload/file"
		if image {
			path = "/upload/image"
		}
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set(identity.Header, tok)
		if !validHeader(ct) {
			return
		}
		req.Header.Set("Content-Type", ct)
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, got)
		}
		if resp.StatusCode != 201 {
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("%s: %d without JSON", path, resp.StatusCode)
			}
			return
		}
		// What was accepted can be read back.
		var id string
		recs.mu.Lock()
		for k := range recs.m {
			if strings.Contains(string(got), k) {
				id = k
			}
		}
		recs.mu.Unlock()
		if id == "" {
			t.Fatalf("201 %s but no record", got)
		}
		get := httptest.NewRequest("GET", "/retrieve/file/"+id, nil)
		get.Header.Set(identity.Header, tok)
		r2, err := app.Test(get, -1)
		if err != nil || r2.StatusCode != 200 {
			t.Fatalf("retrieve after 201: %v %v", r2.StatusCode, err)
		}
		r2.Body.Close()
		if !image {
			dl := httptest.NewRequest("GET", "/download/file/"+id, nil)
			dl.Header.Set(identity.Header, tok)
			r3, err := app.Test(dl, -1)
			if err != nil || r3.StatusCode != 200 {
				t.Fatalf("download after 201: %v %v", r3.StatusCode, err)
			}
			data, _ := io.ReadAll(r3.Body)
			r3.Body.Close()
			if recs.m[id].Size != int64(len(data)) {
				t.Fatalf("downloaded %d bytes, record says %d", len(data), recs.m[id].Size)
			}
			if r3.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(r3.Header.Get("Content-Disposition"), "attachment") {
				t.Fatalf("download headers: %v", r3.Header)
			}
		}
		recs.mu.Lock()
		delete(recs.m, id)
		recs.mu.Unlock()
	})
}

func validHeader(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
