package handoff

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestObjectCache: the second whole fetch of a small object caches it, and
// later answers for it (whole, or a range) are served from memory: the
// object is removed from the store behind the cache's back to prove it.
// Answers that do not fit the cached bytes, a forgotten record, a read
// given up halfway and a too large object all go to the store.
func TestObjectCache(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 20_000) // 320,000 bytes
	url, _, mc, bucket, key := object(t, data)
	f := NewFetcher(nil, CacheConfig{Bytes: 1 << 20, MaxObject: 512 << 10, TTL: time.Minute})
	defer f.Close()
	whole := Answer{URL: url, End: -1, Length: int64(len(data)), File: "rec1"}
	for i := range 2 {
		if got, err := fetch(t, f, whole); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("fetch %d: %d bytes, %v", i+1, len(got), err)
		}
	}
	if n := testutil.ToFloat64(f.cache.stored); n != 1 {
		t.Fatalf("stored %v objects after two whole fetches, want 1", n)
	}
	if err := mc.RemoveObject(context.Background(), bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := fetch(t, f, whole); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("cached whole: %d bytes, %v", len(got), err)
	}
	if got, err := fetch(t, f, Answer{URL: url, Start: 100, End: 199, Length: 100}); err != nil || !bytes.Equal(got, data[100:200]) {
		t.Fatalf("cached range: %q, %v", got, err)
	}
	if n := testutil.ToFloat64(f.cache.hits); n != 2 {
		t.Fatalf("%v hits, want 2", n)
	}
	// A length that is not the cached object's goes to the store (which
	// no longer has it), as do ranges past its end.
	for _, a := range []Answer{{URL: url, End: -1, Length: 7}, {URL: url, Start: 319_999, End: 320_000, Length: 2}} {
		if _, err := f.Open(context.Background(), a); !errors.Is(err, ErrObject) {
			t.Errorf("answer %+v: %v, want ErrObject from the store", a, err)
		}
	}
	// The same path under another query (a new presigned URL) is the same object.
	if got, err := fetch(t, f, Answer{URL: strings.Split(url, "?")[0] + "?X-Amz-Signature=other", End: -1, Length: int64(len(data))}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("new signature: %d bytes, %v", len(got), err)
	}
	f.Forget("another")
	if _, err := fetch(t, f, whole); err != nil {
		t.Fatalf("after forgetting another record: %v", err)
	}
	apply := ApplyDeleted(f.Forget, f.ForgetAll, slog.New(slog.DiscardHandler))
	apply([]byte(`{"files":["rec1"]}`))
	if _, err := f.Open(context.Background(), whole); !errors.Is(err, ErrObject) {
		t.Fatalf("after its record's deletion: %v, want ErrObject", err)
	}
	if n := testutil.ToFloat64(f.cache.held); n != 0 {
		t.Fatalf("%v bytes held after the deletion, want 0", n)
	}

	// A read given up halfway is not cached.
	url2, _, mc2, bucket2, key2 := object(t, data)
	half := Answer{URL: url2, End: -1, Length: int64(len(data))}
	if _, err := fetch(t, f, half); err != nil {
		t.Fatal(err)
	}
	body, err := f.Open(context.Background(), half)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	body.Close()
	if n := testutil.ToFloat64(f.cache.stored); n != 1 || f.cache.inflight != 0 {
		t.Fatalf("a read given up was stored (%v stored), or still counts in flight (%d bytes)", n, f.cache.inflight)
	}
	mc2.RemoveObject(context.Background(), bucket2, key2, minio.RemoveObjectOptions{})
	if _, err := f.Open(context.Background(), half); !errors.Is(err, ErrObject) {
		t.Fatalf("after a read given up: %v, want ErrObject", err)
	}

	// An object over MaxObject is never cached.
	big := bytes.Repeat([]byte{7}, 600<<10)
	url3, _, _, _, _ := object(t, big)
	for range 3 {
		if got, err := fetch(t, f, Answer{URL: url3, End: -1, Length: int64(len(big))}); err != nil || len(got) != len(big) {
			t.Fatalf("large object: %d bytes, %v", len(got), err)
		}
	}
	if n := testutil.ToFloat64(f.cache.stored); n != 1 {
		t.Fatalf("a large object was stored (%v stored)", n)
	}
}

// TestObjectCacheBounds: the least recently sent objects go first when the
// bytes are full, objects expire TTL after they were cached, objects are
// admitted on their second fetch only and while the fills in flight leave
// room, and a bad deletion message empties the cache.
func TestObjectCacheBounds(t *testing.T) {
	c := newObjectCache(CacheConfig{Bytes: 1000, MaxObject: 400, TTL: time.Minute}, nil)
	now := time.Now()
	obj := func(b byte) []byte { return bytes.Repeat([]byte{b}, 400) }
	has := func(key string, at time.Time) bool {
		_, ok := c.get(key, Answer{End: -1, Length: 400}, at)
		return ok
	}
	if c.admit("/b/a", 400, now) || !c.admit("/b/a", 400, now) || c.admit("/b/x", 401, now) || c.admit("/b/x", 401, now) {
		t.Fatal("admission: wanted the second fetch of an object that fits, only")
	}
	// Fills in flight hold at most the cache's bytes: a and b (800) leave
	// no room for c until one of them is done.
	if c.admit("/b/b", 400, now) || !c.admit("/b/b", 400, now) || c.admit("/b/c", 400, now) || c.admit("/b/c", 400, now) {
		t.Fatal("admission: wanted b, and not c while a and b are in flight")
	}
	c.done(400, "/b/a", "a", obj('a'), now)
	c.done(400, "/b/b", "b", obj('b'), now)
	if !c.admit("/b/c", 400, now) || c.inflight != 400 {
		t.Fatalf("c not admitted once a and b were done (%d bytes in flight)", c.inflight)
	}
	if !has("/b/a", now) { // a is now the most recently sent
		t.Fatal("a not cached")
	}
	c.done(400, "/b/c", "c", obj('c'), now) // 1,200 > 1,000 bytes: b goes
	if has("/b/b", now) || !has("/b/a", now) || !has("/b/c", now) || c.size != 800 || c.inflight != 0 {
		t.Fatalf("eviction: b %v, a %v, c %v, %d bytes", has("/b/b", now), has("/b/a", now), has("/b/c", now), c.size)
	}
	if has("/b/a", now.Add(time.Minute)) || c.size != 400 {
		t.Fatalf("a served or held after its TTL (%d bytes held)", c.size)
	}
	f := &Fetcher{cache: c}
	ApplyDeleted(f.Forget, f.ForgetAll, slog.New(slog.DiscardHandler))([]byte("{"))
	if has("/b/c", now) || c.size != 0 || len(c.byFile) != 0 {
		t.Fatalf("bad message: cache not emptied (%d bytes)", c.size)
	}
	if newObjectCache(CacheConfig{}, nil) != nil {
		t.Fatal("a zero config made a cache")
	}
}

// The files service adds the owners whose records changed to its messages
// (an insert publishes them alone): the gateway's object cache forgets
// only the files named and never clears itself for them.
func TestApplyDeletedIgnoresOwners(t *testing.T) {
	var forgot []string
	cleared := 0
	apply := ApplyDeleted(func(ids ...string) { forgot = append(forgot, ids...) }, func() { cleared++ }, slog.New(slog.DiscardHandler))
	apply([]byte(`{"owners":["u1"]}`))
	apply([]byte(`{"files":["f1"],"owners":["u1"]}`))
	apply([]byte(`{"owners":["*"]}`))
	if cleared != 0 || len(forgot) != 1 || forgot[0] != "f1" {
		t.Fatalf("forgot %v, cleared %d times; want [f1] and no clear", forgot, cleared)
	}
	body, err := json.Marshal(Deleted{Owners: []string{"u1"}})
	if err != nil || string(body) != `{"owners":["u1"]}` {
		t.Fatalf("an insert's message: %s %v", body, err)
	}
}

// An image and its variants are objects of one record: forgetting the
// record drops them all, and nothing of another record.
func TestForgetDropsEveryObjectOfARecord(t *testing.T) {
	c := newObjectCache(CacheConfig{Bytes: 10_000, MaxObject: 1_000, TTL: time.Minute}, nil)
	now := time.Now()
	obj := func(b byte) []byte { return bytes.Repeat([]byte{b}, 100) }
	c.done(0, "/b/images/img", "img", obj('i'), now)
	c.done(0, "/b/variants/img/100x100c-q82.jpeg", "img", obj('v'), now)
	c.done(0, "/b/variants/img/50x50.png", "img", obj('w'), now)
	c.done(0, "/b/files/other", "other", obj('o'), now)
	c.forget("img")
	if c.size != 100 || len(c.byKey) != 1 || len(c.byFile) != 1 || c.byKey["/b/files/other"] == nil {
		t.Fatalf("after forgetting img: %d bytes, keys %v", c.size, c.byFile)
	}
}
