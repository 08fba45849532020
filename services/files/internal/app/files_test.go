package app

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"mime"
	"net/http"
	"strings"
	"testing"
	"time"
)

var text = []byte(strings.Repeat("The quick brown fox jumps over the lazy dog.\n", 400))

func TestUploadRetrieveDownload(t *testing.T) {
	h := start(t, nil, hooks{})
	alice := h.user("alice")

	r := h.upload("/upload/file", alice, fileField("notes.txt", text), part{field: "meta", content: []byte(`{"tag":"x"}`)})
	wantStatus(t, r, http.StatusCreated)
	m := r.json(t)
	if m["msg"] == "" || m["msg"] == nil {
		t.Fatal("no msg")
	}
	f := m["file"].(map[string]any)
	id := f["id"].(string)
	sum := sha256.Sum256(text)
	for k, want := range map[string]any{
		"type":   "text/plain; charset=utf-8",
		"meta":   `{"tag":"x"}`,
		"name":   "notes.txt",
		"size":   float64(len(text)),
		"sha256": hex.EncodeToString(sum[:]),
		"kind":   "file",
	} {
		if f[k] != want {
			t.Errorf("file.%s = %v, want %v", k, f[k], want)
		}
	}
	if len(id) != 32 || !strings.HasPrefix(f["path"].(string), "files/") || !strings.HasSuffix(f["path"].(string), "/"+id) || strings.Contains(f["path"].(string), "notes") {
		t.Errorf("id %q path %q", id, f["path"])
	}
	created, err := time.Parse(time.RFC3339, f["createdAt"].(string))
	if err != nil || time.Since(created) > time.Minute {
		t.Errorf("createdAt %v %v", f["createdAt"], err)
	}
	if objs := h.objects(); len(objs) != 1 || objs[0] != f["path"] {
		t.Fatalf("objects %v", objs)
	}

	t.Run("retrieve200", func(t *testing.T) {
		r := h.get("/retrieve/file/"+id, alice, nil)
		wantStatus(t, r, http.StatusOK)
		m := r.json(t)
		if m["downloadUrl"] != "https://files.example.test/download/file/"+id {
			t.Fatalf("downloadUrl %v", m["downloadUrl"])
		}
		got := m["file"].(map[string]any)
		for _, k := range []string{"id", "type", "path", "meta", "createdAt", "name", "size", "sha256"} {
			if got[k] != f[k] {
				t.Errorf("retrieve file.%s = %v, upload said %v", k, got[k], f[k])
			}
		}
	})

	var etag string
	t.Run("download200Gzip", func(t *testing.T) {
		r := h.get("/download/file/"+id, alice, map[string]string{"Accept-Encoding": "gzip"})
		wantStatus(t, r, http.StatusOK)
		if r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("headers %v", r.Header)
		}
		zr, err := gzip.NewReader(bytes.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(plain, text) {
			t.Fatalf("gzip body does not inflate to the upload: %v", err)
		}
		if len(r.body) >= len(text) {
			t.Fatalf("stored form not compressed: %d bytes", len(r.body))
		}
		checkFileHeaders(t, r, "notes.txt", int64(len(r.body)))
		etag = r.Header.Get("ETag")
	})

	t.Run("download200Identity", func(t *testing.T) {
		r := h.get("/download/file/"+id, alice, nil)
		wantStatus(t, r, http.StatusOK)
		if r.Header.Get("Content-Encoding") != "" || !bytes.Equal(r.body, text) {
			t.Fatalf("identity download: encoding %q, %d bytes", r.Header.Get("Content-Encoding"), len(r.body))
		}
		checkFileHeaders(t, r, "notes.txt", int64(len(text)))
		if r.Header.Get("ETag") == etag || r.Header.Get("Accept-Ranges") != "none" {
			t.Fatalf("identity and gzip representations need their own ETag; ranges refused when inflating: %v", r.Header)
		}
		// Range is ignored when inflating on the fly.
		r = h.get("/download/file/"+id, alice, map[string]string{"Range": "bytes=0-9"})
		if r.StatusCode != http.StatusOK || !bytes.Equal(r.body, text) {
			t.Fatalf("range on inflated: %d, %d bytes", r.StatusCode, len(r.body))
		}
	})

	t.Run("download304", func(t *testing.T) {
		r := h.get("/download/file/"+id, alice, map[string]string{"Accept-Encoding": "gzip", "If-None-Match": etag})
		wantStatus(t, r, http.StatusNotModified)
		if len(r.body) != 0 || r.Header.Get("ETag") != etag {
			t.Fatalf("304: %q %v", r.body, r.Header)
		}
		r = h.get("/download/file/"+id, alice, map[string]string{"Accept-Encoding": "gzip", "If-None-Match": `"other"`})
		wantStatus(t, r, http.StatusOK)
		r = h.get("/download/file/"+id, alice, map[string]string{"If-Modified-Since": time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)})
		wantStatus(t, r, http.StatusNotModified)
	})

	t.Run("download206Gzip", func(t *testing.T) {
		full := h.get("/download/file/"+id, alice, map[string]string{"Accept-Encoding": "gzip"})
		r := h.get("/download/file/"+id, alice, map[string]string{"Accept-Encoding": "gzip", "Range": "bytes=10-19"})
		wantStatus(t, r, http.StatusPartialContent)
		if !bytes.Equal(r.body, full.body[10:20]) || r.Header.Get("Content-Range") == "" {
			t.Fatalf("range of the gzip representation: %q %v", r.body, r.Header)
		}
	})

	t.Run("head200", func(t *testing.T) {
		r := h.do(http.MethodHead, "/download/file/"+id, alice, nil, nil)
		wantStatus(t, r, http.StatusOK)
		if r.ContentLength != int64(len(text)) {
			t.Fatalf("HEAD Content-Length %d", r.ContentLength)
		}
	})
}

// checkFileHeaders checks what makes a browser save the file safely.
func checkFileHeaders(t *testing.T, r *response, name string, length int64) {
	t.Helper()
	if r.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Error("no nosniff")
	}
	if r.ContentLength != length {
		t.Errorf("Content-Length %d, want %d", r.ContentLength, length)
	}
	if r.Header.Get("ETag") == "" || r.Header.Get("Last-Modified") == "" {
		t.Errorf("validators missing: %v", r.Header)
	}
	disp, params, err := mime.ParseMediaType(r.Header.Get("Content-Disposition"))
	if err != nil || disp != "attachment" || params["filename"] != name {
		t.Errorf("Content-Disposition %q: %v %v", r.Header.Get("Content-Disposition"), params, err)
	}
}

func TestDownloadRanges(t *testing.T) {
	h := start(t, nil, hooks{})
	tok := h.user("u")
	data, _ := io.ReadAll(&pattern{n: 100_000})
	f := h.uploadFile(tok, "blob.bin", data)
	if f["type"] != "application/octet-stream" {
		t.Fatalf("type %v", f["type"])
	}
	id := f["id"].(string)
	path := "/download/file/" + id

	r := h.get(path, tok, map[string]string{"Accept-Encoding": "gzip"})
	wantStatus(t, r, http.StatusOK)
	if r.Header.Get("Content-Encoding") != "" || r.Header.Get("Accept-Ranges") != "bytes" || !bytes.Equal(r.body, data) {
		t.Fatalf("binary stored as is: %v", r.Header)
	}
	etag := r.Header.Get("ETag")

	for _, tc := range []struct {
		name, rng, ifRange string
		status             int
		want               []byte
		contentRange       string
	}{
		{"range206", "bytes=100-199", "", http.StatusPartialContent, data[100:200], "bytes 100-199/100000"},
		{"suffix206", "bytes=-10", "", http.StatusPartialContent, data[99990:], "bytes 99990-99999/100000"},
		{"open206", "bytes=99000-", "", http.StatusPartialContent, data[99000:], "bytes 99000-99999/100000"},
		{"ifRangeMatch206", "bytes=0-0", etag, http.StatusPartialContent, data[:1], "bytes 0-0/100000"},
		{"ifRangeStale200", "bytes=0-0", `"stale"`, http.StatusOK, data, ""},
		{"multi200", "bytes=0-1,5-6", "", http.StatusOK, data, ""},
		{"unsatisfiable416", "bytes=100000-", "", http.StatusRequestedRangeNotSatisfiable, nil, "bytes */100000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{"Range": tc.rng}
			if tc.ifRange != "" {
				hdr["If-Range"] = tc.ifRange
			}
			r := h.get(path, tok, hdr)
			wantStatus(t, r, tc.status)
			if r.Header.Get("Content-Range") != tc.contentRange {
				t.Fatalf("Content-Range %q", r.Header.Get("Content-Range"))
			}
			if tc.want != nil && !bytes.Equal(r.body, tc.want) {
				t.Fatalf("body %d bytes, want %d", len(r.body), len(tc.want))
			}
		})
	}
}

func TestAccess(t *testing.T) {
	h := start(t, nil, hooks{})
	f := h.uploadFile(h.user("alice"), "a.txt", text)
	id := f["id"].(string)
	routes := []string{"/retrieve/file/", "/download/file/"}

	for _, route := range routes {
		t.Run("owner200"+route, func(t *testing.T) { wantStatus(t, h.get(route+id, h.user("alice"), nil), http.StatusOK) })
		t.Run("admin200"+route, func(t *testing.T) { wantStatus(t, h.get(route+id, h.admin("root"), nil), http.StatusOK) })
		t.Run("other404"+route, func(t *testing.T) {
			m := wantError(t, h.get(route+id, h.user("mallory"), nil), http.StatusNotFound, "file_not_found")
			if m["sentId"] != id || m["err"] == nil {
				t.Fatalf("body %v", m)
			}
		})
		t.Run("anonymous401"+route, func(t *testing.T) {
			wantError(t, h.get(route+id, h.anonymous(), nil), http.StatusUnauthorized, "unauthenticated")
		})
		t.Run("noToken401"+route, func(t *testing.T) {
			wantError(t, h.get(route+id, "", nil), http.StatusUnauthorized, "identity_required")
		})
	}

	t.Run("readAll200", func(t *testing.T) {
		h2 := start(t, map[string]string{"FILES_READ_ALL": "true"}, hooks{})
		f := h2.uploadFile(h2.user("alice"), "a.txt", text)
		wantStatus(t, h2.get("/retrieve/file/"+f["id"].(string), h2.user("bob"), nil), http.StatusOK)
		wantStatus(t, h2.get("/download/file/"+f["id"].(string), h2.user("bob"), nil), http.StatusOK)
		wantError(t, h2.get("/download/file/"+f["id"].(string), h2.anonymous(), nil), http.StatusUnauthorized, "unauthenticated")
	})
}

func TestUnknownAndMalformedIDs(t *testing.T) {
	h := start(t, nil, hooks{})
	tok := h.user("u")
	for _, id := range []string{
		"0123456789abcdef0123456789abcdef", // well formed, unknown
		"not-an-id",
		"0123456789ABCDEF0123456789ABCDEF",
		"..%2F..%2Fetc%2Fpasswd",
		strings.Repeat("a", 2000),
		"507f1f77bcf86cd799439011", // an ObjectID
	} {
		for _, route := range []string{"/retrieve/file/", "/download/file/", "/images/"} {
			t.Run("404"+route+id[:min(len(id), 12)], func(t *testing.T) {
				m := wantError(t, h.get(route+id, tok, nil), http.StatusNotFound, "file_not_found")
				if m["sentId"] != id {
					t.Fatalf("sentId %v, want %s", m["sentId"], id)
				}
			})
		}
	}
}

func TestListOwnFiles(t *testing.T) {
	h := start(t, nil, hooks{})
	alice, bob := h.user("alice"), h.user("bob")
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, h.uploadFile(alice, "f.txt", []byte{byte('a' + i)})["id"].(string))
		time.Sleep(5 * time.Millisecond) // distinct createdAt
	}
	h.uploadFile(bob, "b.txt", []byte("bob's"))

	r := h.get("/files?page=1&limit=2", alice, nil)
	wantStatus(t, r, http.StatusOK)
	m := r.json(t)
	list := m["files"].([]any)
	if len(list) != 2 || m["hasMore"] != true || list[0].(map[string]any)["id"] != ids[4] || list[1].(map[string]any)["id"] != ids[3] {
		t.Fatalf("page 1: %s", r.body)
	}
	m = h.get("/files?page=3&limit=2", alice, nil).json(t)
	list = m["files"].([]any)
	if len(list) != 1 || m["hasMore"] != false || list[0].(map[string]any)["id"] != ids[0] {
		t.Fatalf("page 3: %v", m)
	}
	m = h.get("/files", bob, nil).json(t)
	if len(m["files"].([]any)) != 1 {
		t.Fatalf("bob sees %v", m)
	}
	for _, q := range []string{"page=0", "page=x", "limit=0", "limit=101"} {
		t.Run("list400"+q, func(t *testing.T) {
			wantStatus(t, h.get("/files?"+q, alice, nil), http.StatusBadRequest)
		})
	}
	wantError(t, h.get("/files", h.anonymous(), nil), http.StatusUnauthorized, "unauthenticated")
}

func TestHealth(t *testing.T) {
	h := start(t, nil, hooks{})
	wantStatus(t, h.get("/healthz", "", nil), http.StatusOK)
	r := h.get("/readyz", "", nil)
	wantStatus(t, r, http.StatusOK)
	checks := r.json(t)["checks"].(map[string]any)
	if checks["mongo"] != "ok" || checks["s3"] != "ok" {
		t.Fatalf("checks %v", checks)
	}
}
