package proxy

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/acme/platform/pkg/handoff"
)

// Which requests may prefetch, and under which key: whole-object GETs only,
// per credential (never the credential itself), anonymous routes under
// none, and a session route without a cookie not at all.
func TestPrefetchKeys(t *testing.T) {
	session := Route{Prefix: "/download/file/", Service: "files", Access: Session}
	public := Route{Prefix: "/s/", Service: "files", Access: Public}
	r := httptest.NewRequest("GET", "/download/file/abc?x=1", nil)
	r.AddCookie(&http.Cookie{Name: "sessionId", Value: "secret-one"})
	caller, ok := prefetchCaller(r, session, "")
	if !ok || caller == "" || caller == "secret-one" || len(caller) != 64 {
		t.Fatalf("session caller %q %v: want a hash", caller, ok)
	}
	if k := prefetchKey(r, caller); k != caller+" /download/file/abc?x=1 " {
		t.Fatalf("key %q", k)
	}
	gz := r.Clone(r.Context())
	gz.Header.Set("Accept-Encoding", "gzip")
	if k := prefetchKey(gz, caller); k == prefetchKey(r, caller) {
		t.Fatal("a client accepting gzip and one that does not share a key (their answers differ)")
	}
	r2 := httptest.NewRequest("GET", "/download/file/abc?x=1", nil)
	r2.AddCookie(&http.Cookie{Name: "sessionId", Value: "secret-two"})
	if other, _ := prefetchCaller(r2, session, ""); other == caller {
		t.Fatal("two sessions share a prefetch key")
	}
	if key, _ := prefetchCaller(r2, session, "Bearer acme_k"); key == caller || key == "" {
		t.Fatalf("API key caller %q", key)
	}
	if _, ok := prefetchCaller(httptest.NewRequest("GET", "/download/file/abc", nil), session, ""); ok {
		t.Fatal("a session route without a cookie may prefetch")
	}
	if c, ok := prefetchCaller(httptest.NewRequest("GET", "/s/tok", nil), public, ""); !ok || c != "" {
		t.Fatalf("public route: %q %v", c, ok)
	}
	for _, h := range []string{"Range", "If-Range", "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since"} {
		q := httptest.NewRequest("GET", "/download/file/abc", nil)
		q.Header.Set(h, "x")
		if prefetchKey(q, caller) != "" {
			t.Fatalf("a GET with %s may prefetch", h)
		}
	}
	if prefetchKey(httptest.NewRequest("HEAD", "/download/file/abc", nil), caller) != "" {
		t.Fatal("HEAD may prefetch")
	}
}

// Entries expire, are forgotten, and the table never grows past its bound.
func TestPrefetchTable(t *testing.T) {
	var p prefetches
	now := time.Now()
	a := handoff.Answer{URL: "http://minio:9000/b/k?X-Amz-Signature=1", End: -1, Length: 10}
	p.put("k", a, now)
	if got, ok := p.get("k", now.Add(prefetchTTL-time.Second)); !ok || got.URL != a.URL {
		t.Fatalf("get: %+v %v", got, ok)
	}
	if _, ok := p.get("k", now.Add(prefetchTTL)); ok {
		t.Fatal("an expired entry was served")
	}
	p.forget("k")
	if _, ok := p.get("k", now); ok {
		t.Fatal("a forgotten entry was served")
	}
	for i := range prefetchMax + 10 {
		p.put(strconv.Itoa(i), a, now)
	}
	if n := len(p.m); n > prefetchMax {
		t.Fatalf("%d entries, bound %d", n, prefetchMax)
	}
	pre := &prefetch{a: a}
	if !pre.matches(a) {
		t.Fatal("the same answer does not match")
	}
	for _, b := range []handoff.Answer{
		{URL: a.URL + "2", End: -1, Length: 10},
		{URL: a.URL, Start: 0, End: 4, Length: 5},
		{URL: a.URL, End: -1, Length: 11},
		{URL: a.URL, End: -1, Length: 10, Nodes: []string{"m1:9000", "m2:9000"}},
		{URL: a.URL, End: -1, Length: 10, Encoding: "gzip", Stored: 10},
	} {
		if pre.matches(b) {
			t.Fatalf("%+v matches %+v", b, a)
		}
	}
}
