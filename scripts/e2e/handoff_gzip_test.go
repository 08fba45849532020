package e2e

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/scripts/stack"
)

// objectGets is a proxy in front of the object store that counts the GETs
// of each object path, whoever sends them (the gateway's handoff fetches,
// the files service's own downloads). Presigned URLs name the proxy, and it
// passes the Host header on unchanged, so their signatures hold.
type objectGets struct {
	mu   sync.Mutex
	gets map[string]int
}

func countObjectGets(t *testing.T, endpoint string) (*objectGets, string) {
	t.Helper()
	target, err := url.Parse("http://" + endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target) // keeps the request's Host
	g := &objectGets{gets: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			g.mu.Lock()
			g.gets[r.URL.Path]++
			g.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return g, strings.TrimPrefix(srv.URL, "http://")
}

// of returns the GETs of the object whose key is key.
func (g *objectGets) of(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for p, k := range g.gets {
		if strings.HasSuffix(p, "/"+key) {
			n += k
		}
	}
	return n
}

// TestObjectCacheGzip: a small text file, stored gzip-compressed, is sent
// from the gateway's object cache to clients that accept gzip (as stored,
// Content-Encoding: gzip) and to those that do not (inflated by the
// gateway), whichever came first: the object store is asked for it twice
// (the second whole fetch caches it), then never again, as the GETs a
// proxy in front of MinIO counts show. Both representations keep their
// headers (ETags, Vary, attachment, nosniff), ranges address the gzip
// bytes and are refused when inflating, as the files service does
// without the cache, and a deleted file is refused at once.
func TestObjectCacheGzip(t *testing.T) {
	var gets *objectGets
	p, sec, _ := platformOn(t, nil, stack.Options{}, func(s *stack.Servers) {
		gets, s.S3Endpoint = countObjectGets(t, s.S3Endpoint)
	})
	gw, m := p.GatewayURL, p.MetricsURLs["gateway"]
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)

	text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog; ", 92)[:4096])
	up := admin.upload("/upload/file", part{field: "file", filename: "notes.txt", contentType: "text/plain", data: bytes.NewReader(text)})
	if up.status != 201 {
		t.Fatalf("upload: %d %s", up.status, up.body)
	}
	rec := up.json(t)["file"].(map[string]any)
	id, key, sum := rec["id"].(string), rec["path"].(string), rec["sha256"].(string)
	if gets.of(key) != 0 {
		t.Fatalf("%d GETs of the object after its upload", gets.of(key))
	}

	common := func(what string, d rawResp) {
		t.Helper()
		noHandoffHeaders(t, what, d.header)
		if !strings.HasPrefix(d.header.Get("Content-Disposition"), "attachment") || d.header.Get("X-Content-Type-Options") != "nosniff" ||
			d.header.Get("Vary") != "Accept-Encoding" || !strings.HasPrefix(d.header.Get("Content-Type"), "text/plain") {
			t.Fatalf("%s: headers %v", what, d.header)
		}
	}
	var stored []byte // the gzip representation, as first sent
	identity := func(what string) {
		t.Helper()
		d := admin.raw("GET", "/download/file/"+id, nil, nil, "")
		common(what, d)
		if d.status != 200 || !bytes.Equal(d.body, text) || d.header.Get("Content-Length") != strconv.Itoa(len(text)) ||
			d.header.Get("Content-Encoding") != "" || d.header.Get("ETag") != `"`+sum+`"` || d.header.Get("Accept-Ranges") != "none" {
			t.Fatalf("%s: %d, %d bytes, %v", what, d.status, len(d.body), d.header)
		}
	}
	gzipped := func(what string) {
		t.Helper()
		d := admin.raw("GET", "/download/file/"+id, map[string]string{"Accept-Encoding": "gzip"}, nil, "")
		common(what, d)
		if d.status != 200 || d.header.Get("Content-Encoding") != "gzip" || d.header.Get("ETag") != `"`+sum+`-gzip"` ||
			d.header.Get("Accept-Ranges") != "bytes" || d.header.Get("Content-Length") != strconv.Itoa(len(d.body)) {
			t.Fatalf("%s: %d, %d bytes, %v", what, d.status, len(d.body), d.header)
		}
		zr, err := gzip.NewReader(bytes.NewReader(d.body))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if plain, err := io.ReadAll(zr); err != nil || !bytes.Equal(plain, text) {
			t.Fatalf("%s: inflates to %d bytes, %v", what, len(plain), err)
		}
		if stored == nil {
			stored = d.body
		} else if !bytes.Equal(d.body, stored) {
			t.Fatalf("%s: not the bytes sent before", what)
		}
	}
	wantGets := func(what string, n int) {
		t.Helper()
		if got := gets.of(key); got != n {
			t.Fatalf("%s: %d GETs of the object from MinIO, want %d", what, got, n)
		}
	}

	identity("download 1, identity")
	wantGets("download 1 (identity)", 1)
	gzipped("download 2, gzip")
	wantGets("download 2 (gzip; caches it)", 2)
	for i := range 3 {
		identity("identity from the cache " + strconv.Itoa(i+1))
		gzipped("gzip from the cache " + strconv.Itoa(i+1))
	}
	wantGets("six downloads after it was cached", 2)
	if h, b := objectCache(t, m, `object_cache_total{result="hit"}`), objectCache(t, m, "object_cache_bytes"); h != 6 || b != float64(len(stored)) {
		t.Fatalf("cache: %v hits, %v bytes held; want 6 and %d (the stored, compressed bytes)", h, b, len(stored))
	}

	// Ranges address the gzip bytes, sent from the cache; inflating, a
	// Range is ignored (the whole body, 200).
	rg := admin.raw("GET", "/download/file/"+id, map[string]string{"Accept-Encoding": "gzip", "Range": "bytes=10-19"}, nil, "")
	if rg.status != 206 || !bytes.Equal(rg.body, stored[10:20]) || rg.header.Get("Content-Range") != "bytes 10-19/"+strconv.Itoa(len(stored)) ||
		rg.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip range: %d %v %q", rg.status, rg.header, rg.body)
	}
	common("gzip range", rg)
	if r := admin.raw("GET", "/download/file/"+id, map[string]string{"Range": "bytes=10-19"}, nil, ""); r.status != 200 || !bytes.Equal(r.body, text) || r.header.Get("Content-Range") != "" {
		t.Fatalf("identity range: %d, %d bytes, %v", r.status, len(r.body), r.header)
	}
	past := admin.raw("GET", "/download/file/"+id, map[string]string{"Accept-Encoding": "gzip", "Range": "bytes=" + strconv.Itoa(len(stored)) + "-"}, nil, "")
	if past.status != 416 || past.json(t)["code"] != "range_not_satisfiable" || past.header.Get("Content-Range") != "bytes */"+strconv.Itoa(len(stored)) {
		t.Fatalf("range past the gzip bytes: %d %v %s", past.status, past.header, past.body)
	}
	// Each representation is validated by its own ETag.
	if nm := admin.raw("GET", "/download/file/"+id, map[string]string{"If-None-Match": `"` + sum + `"`}, nil, ""); nm.status != 304 {
		t.Fatalf("If-None-Match, identity: %d", nm.status)
	}
	if nm := admin.raw("GET", "/download/file/"+id, map[string]string{"Accept-Encoding": "gzip", "If-None-Match": `"` + sum + `"`}, nil, ""); nm.status != 200 || !bytes.Equal(nm.body, stored) {
		t.Fatalf("If-None-Match with the identity ETag, gzip: %d", nm.status)
	}
	wantGets("ranges and validators", 2)

	// Deleted: refused at once for both, nothing sent from the cache; the
	// deletion message drops the bytes.
	admin.mustStatus(204, "DELETE", "/files/"+id, nil)
	checkErrSentID(t, "identity download of a deleted file", admin.raw("GET", "/download/file/"+id, nil, nil, ""), 404, id)
	checkErrSentID(t, "gzip download of a deleted file", admin.raw("GET", "/download/file/"+id, map[string]string{"Accept-Encoding": "gzip"}, nil, ""), 404, id)
	deadline := time.Now().Add(5 * time.Second)
	for objectCache(t, m, "object_cache_bytes") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the deleted file's bytes are still in the gateway's object cache")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
