package e2e

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/testkit"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// uploadRandom uploads size random bytes (from seed) as a file through c and
// returns them with the new record.
func uploadRandom(t *testing.T, c *client, size int, seed byte) ([]byte, map[string]any) {
	t.Helper()
	data := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{seed}).Read(data)
	r := c.upload("/upload/file", part{field: "file", filename: "r.bin", data: bytes.NewReader(data)})
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	return data, r.json(t)["file"].(map[string]any)
}

// handoffs reads acme_gateway_handoffs_total{result} from the gateway's
// metrics (0 before the first).
func handoffs(t *testing.T, metricsURL, result string) float64 {
	t.Helper()
	v, _ := metric(t, metricsURL, metrics.Namespace+`_gateway_handoffs_total{result="`+result+`"}`)
	return v
}

func noHandoffHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-acme-handoff") {
			t.Fatalf("%s: %s reached the client: %v", what, k, h)
		}
	}
}

// TestHandoff: downloads, ranges, images and shared files are sent by the
// gateway from the object store after the files service authorized them
// (package handoff), with the files service's headers; an object the gateway
// cannot fetch is asked of the files service, which answers as it always
// did; no handoff header reaches a client, and one a client sends is not
// passed on.
func TestHandoff(t *testing.T) {
	p, sec, _ := platform(t, nil)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	anon := newClient(t, p.GatewayURL)
	metrics := p.MetricsURLs["gateway"]

	data, rec := uploadRandom(t, admin, 3<<20+123, 7)
	id, key := rec["id"].(string), rec["path"].(string)

	ok0, failed0 := handoffs(t, metrics, "ok"), handoffs(t, metrics, "failed")
	// A client's own handoff headers are dropped at the gateway.
	d := admin.raw("GET", "/download/file/"+id, map[string]string{"X-Acme-Handoff-Url": "http://169.254.169.254/latest", "X-Acme-Handoff-Length": "5"}, nil, "")
	if d.status != 200 || !bytes.Equal(d.body, data) || d.header.Get("Content-Length") != strconv.Itoa(len(data)) ||
		d.header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(d.header.Get("Content-Disposition"), "attachment") || d.header.Get("ETag") == "" {
		t.Fatalf("download: %d, %d bytes, %v", d.status, len(d.body), d.header)
	}
	noHandoffHeaders(t, "download", d.header)
	rg := admin.raw("GET", "/download/file/"+id, map[string]string{"Range": "bytes=1000000-1000099"}, nil, "")
	if rg.status != 206 || !bytes.Equal(rg.body, data[1000000:1000100]) || rg.header.Get("Content-Range") != "bytes 1000000-1000099/"+strconv.Itoa(len(data)) {
		t.Fatalf("range: %d %q %d bytes", rg.status, rg.header.Get("Content-Range"), len(rg.body))
	}
	noHandoffHeaders(t, "range", rg.header)
	if nm := admin.raw("GET", "/download/file/"+id, map[string]string{"If-None-Match": d.header.Get("ETag")}, nil, ""); nm.status != 304 || len(nm.body) != 0 {
		t.Fatalf("If-None-Match: %d", nm.status)
	}
	img := admin.upload("/upload/image", part{field: "file", filename: "a.png", contentType: "image/png", data: bytes.NewReader(testPNG(t, 64, 48))})
	if img.status != 201 {
		t.Fatalf("image: %d %s", img.status, img.body)
	}
	iurl := strings.TrimPrefix(img.json(t)["image"].(map[string]any)["url"].(string), p.GatewayURL)
	pub := anon.raw("GET", iurl, nil, nil, "")
	if pub.status != 200 || pub.header.Get("Content-Type") != "image/png" || len(pub.body) == 0 {
		t.Fatalf("image: %d %v", pub.status, pub.header)
	}
	noHandoffHeaders(t, "image", pub.header)
	if got := handoffs(t, metrics, "ok") - ok0; got != 3 {
		t.Fatalf("%v downloads handed off, want 3 (whole, range, image; not the 304)", got)
	}

	// The object gone behind the record's back: the gateway's fetch fails,
	// the files service is asked again and gives the spec's 404.
	kit := testkit.Get(t, testkit.S3)
	mc, err := minio.New(kit.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(kit.S3Access, kit.S3Secret, "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	buckets, err := mc.ListBuckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	removed := 0
	for _, b := range buckets { // the platform's bucket is the one holding key
		if _, err := mc.StatObject(ctx, b.Name, key, minio.StatObjectOptions{}); err == nil {
			if err := mc.RemoveObject(ctx, b.Name, key, minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed != 1 {
		t.Fatalf("%d objects %s removed, want 1", removed, key)
	}
	checkErrSentID(t, "download of a record without its object", admin.raw("GET", "/download/file/"+id, nil, nil, ""), 404, id)
	if got := handoffs(t, metrics, "failed") - failed0; got != 1 {
		t.Fatalf("%v failed handoffs, want 1", got)
	}
}

// TestHandoffOff: with GATEWAY_HANDOFF=false the files service streams the
// bytes, and an offer a client sends itself is not passed on (the files
// service would otherwise answer with a presigned URL for the client).
func TestHandoffOff(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"GATEWAY_HANDOFF": "false"})
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	r := admin.upload("/upload/file", part{field: "file", filename: "x.bin", data: strings.NewReader("streamed by files")})
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	id := r.json(t)["file"].(map[string]any)["id"].(string)
	d := admin.raw("GET", "/download/file/"+id, map[string]string{"X-Acme-Handoff-Offer": "1"}, nil, "")
	if d.status != 200 || string(d.body) != "streamed by files" {
		t.Fatalf("download: %d %q", d.status, d.body)
	}
	noHandoffHeaders(t, "download", d.header)
	if n := handoffs(t, p.MetricsURLs["gateway"], "ok"); n != 0 {
		t.Fatalf("%v handoffs with handoff off", n)
	}
}

// prefetches reads acme_gateway_handoff_prefetches_total{result}.
func prefetches(t *testing.T, metricsURL, result string) float64 {
	t.Helper()
	v, _ := metric(t, metricsURL, metrics.Namespace+`_gateway_handoff_prefetches_total{result="`+result+`"}`)
	return v
}

// TestHandoffPrefetch: a download handed off to the same caller before
// starts its object fetch together with the request to the files service
// (gateway/internal/proxy/prefetch.go), and its bytes are sent only when
// the files service hands off the same object again. A range, another
// caller, an exhausted share link and a deleted file get exactly what the
// files service answers: the prefetched bytes are dropped unsent. The
// object cache is off: an object in it is sent from memory, never
// prefetched (TestObjectCache).
func TestHandoffPrefetch(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"GATEWAY_OBJECT_CACHE_BYTES": "0"})
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	anon := newClient(t, gw)
	m := p.MetricsURLs["gateway"]
	counts := func() (used, dropped float64) {
		return prefetches(t, m, "used"), prefetches(t, m, "dropped")
	}
	wantCounts := func(what string, used, dropped float64) {
		t.Helper()
		if u, d := counts(); u != used || d != dropped {
			t.Fatalf("%s: prefetches used %v dropped %v, want %v and %v", what, u, d, used, dropped)
		}
	}

	data, rec := uploadRandom(t, admin, 300<<10+7, 9)
	id := rec["id"].(string)
	whole := func(c *client, path, what string) {
		t.Helper()
		d := c.raw("GET", path, nil, nil, "")
		if d.status != 200 || !bytes.Equal(d.body, data) || d.header.Get("Content-Length") != strconv.Itoa(len(data)) ||
			d.header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(d.header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("%s: %d, %d bytes, %v", what, d.status, len(d.body), d.header)
		}
		noHandoffHeaders(t, what, d.header)
	}
	whole(admin, "/download/file/"+id, "first download")
	wantCounts("first download (nothing known yet)", 0, 0)
	for i := range 3 {
		whole(admin, "/download/file/"+id, "download "+strconv.Itoa(i+2))
	}
	wantCounts("three more downloads", 3, 0)
	if rg := admin.raw("GET", "/download/file/"+id, map[string]string{"Range": "bytes=5-9"}, nil, ""); rg.status != 206 || !bytes.Equal(rg.body, data[5:10]) {
		t.Fatalf("range: %d %q", rg.status, rg.body)
	}
	wantCounts("a range (never prefetched)", 3, 0)

	// Another user: nothing was handed off to them, nothing is prefetched.
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "pre@example.com", "password": "correct horse battery", "fullName": "P", "edv": "E"})
	other := signIn(t, gw, "pre@example.com", "correct horse battery")
	if d := other.raw("GET", "/download/file/"+id, nil, nil, ""); d.status == 200 || bytes.Contains(d.body, data[:64]) {
		t.Fatalf("another user's download: %d, %d bytes", d.status, len(d.body))
	}
	wantCounts("another user", 3, 0)

	// A second session of the administrator: its second download is
	// prefetched; once it is signed out, its cookie gets the gateway's 401
	// although a prefetch had started, and no byte.
	second := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	u, _ := url.Parse(gw)
	var cookie string
	for _, c := range second.http.Jar.Cookies(u) {
		if c.Name == "sessionId" {
			cookie = c.Value
		}
	}
	whole(second, "/download/file/"+id, "second session, download 1")
	whole(second, "/download/file/"+id, "second session, download 2")
	wantCounts("second session", 4, 0)
	second.mustStatus(200, "DELETE", "/signout", nil)
	if d := anon.raw("GET", "/download/file/"+id, map[string]string{"Cookie": "sessionId=" + cookie}, nil, ""); d.status != 401 || bytes.Contains(d.body, data[:64]) {
		t.Fatalf("signed-out session: %d, %d bytes", d.status, len(d.body))
	}
	wantCounts("signed-out session", 4, 1)

	// A share link for two downloads: the second is prefetched; the third
	// is refused by the files service (410) while the object is still
	// there, so the prefetched bytes must be dropped.
	path := sharePath(t, gw, admin.mustStatus(201, "POST", "/files/"+id+"/links", map[string]any{"maxDownloads": 2}))
	whole(anon, path, "shared download 1")
	whole(anon, path, "shared download 2")
	wantCounts("two shared downloads", 5, 1)
	if g := anon.raw("GET", path, nil, nil, ""); g.status != 410 || g.json(t)["code"] != "link_exhausted" {
		t.Fatalf("exhausted link: %d %s", g.status, g.body)
	}
	wantCounts("exhausted link", 5, 2)

	// Deleted: 404 from the files service, the prefetch dropped; the
	// caller's entry is forgotten, so the next try prefetches nothing.
	admin.mustStatus(204, "DELETE", "/files/"+id, nil)
	for range 2 {
		checkErrSentID(t, "download of a deleted file", admin.raw("GET", "/download/file/"+id, nil, nil, ""), 404, id)
	}
	wantCounts("deleted file", 5, 3)

	// A gzip-stored text file: its two representations are handed off
	// apart (as stored with gzip, to be inflated without), each prefetched
	// from its own last answer and sent intact.
	text := []byte(strings.Repeat("prefetched and inflated; ", 400))
	up := admin.upload("/upload/file", part{field: "file", filename: "t.txt", contentType: "text/plain", data: bytes.NewReader(text)})
	if up.status != 201 {
		t.Fatalf("text upload: %d %s", up.status, up.body)
	}
	tid := up.json(t)["file"].(map[string]any)["id"].(string)
	var gz []byte
	for i := range 3 {
		d := admin.raw("GET", "/download/file/"+tid, nil, nil, "")
		if d.status != 200 || !bytes.Equal(d.body, text) || d.header.Get("Content-Encoding") != "" {
			t.Fatalf("text download %d: %d, %d bytes, %v", i+1, d.status, len(d.body), d.header)
		}
		g := admin.raw("GET", "/download/file/"+tid, map[string]string{"Accept-Encoding": "gzip"}, nil, "")
		if g.status != 200 || g.header.Get("Content-Encoding") != "gzip" || len(g.body) == 0 || gz != nil && !bytes.Equal(g.body, gz) {
			t.Fatalf("gzip text download %d: %d, %d bytes, %v", i+1, g.status, len(g.body), g.header)
		}
		gz = g.body
	}
	wantCounts("text downloads, three of each representation", 9, 3)
}

func objectCache(t *testing.T, metricsURL, series string) float64 {
	t.Helper()
	v, _ := metric(t, metricsURL, metrics.Namespace+`_gateway_`+series)
	return v
}

// TestObjectCache: a small file downloaded again is sent from the
// gateway's object cache (pkg/handoff/objects.go), yet only to whom the
// files service hands it off: another user, an exhausted share link and a
// deleted file get the files service's refusal, and the deletion empties
// the cache of the file's bytes.
func TestObjectCache(t *testing.T) {
	p, sec, _ := platform(t, nil)
	gw, m := p.GatewayURL, p.MetricsURLs["gateway"]
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	anon := newClient(t, gw)
	data, rec := uploadRandom(t, admin, 200<<10+3, 4)
	id := rec["id"].(string)
	get := func(c *client, path, what string, hdr map[string]string) rawResp {
		t.Helper()
		d := c.raw("GET", path, hdr, nil, "")
		noHandoffHeaders(t, what, d.header)
		return d
	}
	for i := range 4 {
		d := get(admin, "/download/file/"+id, "download "+strconv.Itoa(i+1), nil)
		if d.status != 200 || !bytes.Equal(d.body, data) || !strings.HasPrefix(d.header.Get("Content-Disposition"), "attachment") ||
			d.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("download %d: %d, %d bytes, %v", i+1, d.status, len(d.body), d.header)
		}
	}
	// The first two fetch from MinIO (the second caches), the others hit.
	if s, h := objectCache(t, m, `object_cache_total{result="stored"}`), objectCache(t, m, `object_cache_total{result="hit"}`); s != 1 || h != 2 {
		t.Fatalf("after four downloads: %v stored, %v hits; want 1 and 2", s, h)
	}
	if b := objectCache(t, m, "object_cache_bytes"); b != float64(len(data)) {
		t.Fatalf("cache holds %v bytes, want %d", b, len(data))
	}
	if d := get(admin, "/download/file/"+id, "range", map[string]string{"Range": "bytes=10-19"}); d.status != 206 || !bytes.Equal(d.body, data[10:20]) {
		t.Fatalf("range: %d %q", d.status, d.body)
	}
	hits := objectCache(t, m, `object_cache_total{result="hit"}`)
	if hits != 3 {
		t.Fatalf("the range was not sent from the cache (%v hits)", hits)
	}

	// Another user, and an exhausted share link: refused by the files
	// service, nothing sent from the cache.
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "oc@example.com", "password": "correct horse battery", "fullName": "O", "edv": "E"})
	other := signIn(t, gw, "oc@example.com", "correct horse battery")
	if d := get(other, "/download/file/"+id, "another user", nil); d.status != 404 || bytes.Contains(d.body, data[:64]) {
		t.Fatalf("another user's download: %d, %d bytes", d.status, len(d.body))
	}
	path := sharePath(t, gw, admin.mustStatus(201, "POST", "/files/"+id+"/links", map[string]any{"maxDownloads": 1}))
	if d := get(anon, path, "shared download", nil); d.status != 200 || !bytes.Equal(d.body, data) {
		t.Fatalf("shared download: %d, %d bytes", d.status, len(d.body))
	}
	if d := get(anon, path, "exhausted link", nil); d.status != 410 || bytes.Contains(d.body, data[:64]) {
		t.Fatalf("exhausted link: %d, %d bytes", d.status, len(d.body))
	}
	if h := objectCache(t, m, `object_cache_total{result="hit"}`); h != hits+1 {
		t.Fatalf("%v hits after the refusals and one shared download, want %v", h, hits+1)
	}

	// Deleted: 404 from the files service, and the gateway drops the bytes
	// when the deletion is announced.
	admin.mustStatus(204, "DELETE", "/files/"+id, nil)
	checkErrSentID(t, "download of a deleted file", admin.raw("GET", "/download/file/"+id, nil, nil, ""), 404, id)
	deadline := time.Now().Add(5 * time.Second)
	for objectCache(t, m, "object_cache_bytes") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the deleted file's bytes are still in the gateway's object cache")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
