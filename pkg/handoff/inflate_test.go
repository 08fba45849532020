package handoff

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestObjectCacheGzip: a gzip-stored object is cached as stored on its
// second whole fetch, whichever representation each fetch was for (sent as
// stored, or inflated), and both are then served from memory: the object
// is removed from the store to prove it. The cache counts the stored bytes.
func TestObjectCacheGzip(t *testing.T) {
	text := []byte(strings.Repeat("a line of text, compressible. ", 137)[:4096])
	stored := gzipped(t, text)
	url, _, mc, bucket, key := object(t, stored)
	f := NewFetcher(nil, CacheConfig{Bytes: 1 << 20, MaxObject: 512 << 10, TTL: time.Minute})
	defer f.Close()
	asStored := Answer{URL: url, End: -1, Length: int64(len(stored)), File: "text"}
	inflated := Answer{URL: url, End: -1, Length: int64(len(text)), File: "text", Encoding: "gzip", Stored: int64(len(stored))}

	if got, err := fetch(t, f, inflated); err != nil || !bytes.Equal(got, text) {
		t.Fatalf("first fetch, inflated: %d bytes, %v", len(got), err)
	}
	if f.Cached(inflated) || f.Cached(asStored) {
		t.Fatal("cached on its first fetch")
	}
	if got, err := fetch(t, f, asStored); err != nil || !bytes.Equal(got, stored) {
		t.Fatalf("second fetch, as stored: %d bytes, %v", len(got), err)
	}
	if n, b := testutil.ToFloat64(f.cache.stored), testutil.ToFloat64(f.cache.held); n != 1 || b != float64(len(stored)) {
		t.Fatalf("after two whole fetches: %v stored, %v bytes held; want 1 and %d (the stored bytes)", n, b, len(stored))
	}
	if !f.Cached(inflated) || !f.Cached(asStored) {
		t.Fatal("Cached: false for a cached object")
	}
	if err := mc.RemoveObject(context.Background(), bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := fetch(t, f, inflated); err != nil || !bytes.Equal(got, text) {
			t.Fatalf("cached, inflated: %d bytes, %v", len(got), err)
		}
	}
	if got, err := fetch(t, f, asStored); err != nil || !bytes.Equal(got, stored) {
		t.Fatalf("cached, as stored: %d bytes, %v", len(got), err)
	}
	if got, err := fetch(t, f, Answer{URL: url, Start: 10, End: 19, Length: 10}); err != nil || !bytes.Equal(got, stored[10:20]) {
		t.Fatalf("cached range of the stored bytes: %v, %v", got, err)
	}
	if n := testutil.ToFloat64(f.cache.hits); n != 4 {
		t.Fatalf("%v hits, want 4", n)
	}
	// A stored length that is not the cached object's goes to the store.
	wrong := inflated
	wrong.Stored++
	if _, err := f.Open(context.Background(), wrong); !errors.Is(err, ErrObject) {
		t.Fatalf("a wrong stored length: %v, want ErrObject from the store", err)
	}

	// Inflated fetches alone fill the cache too (the inflater reads the
	// stored stream to its end), with the stored bytes.
	url2, _, mc2, bucket2, key2 := object(t, stored)
	inflated2 := Answer{URL: url2, End: -1, Length: int64(len(text)), File: "text2", Encoding: "gzip", Stored: int64(len(stored))}
	for i := range 2 {
		if got, err := fetch(t, f, inflated2); err != nil || !bytes.Equal(got, text) {
			t.Fatalf("inflated fetch %d: %d bytes, %v", i+1, len(got), err)
		}
	}
	if n, b := testutil.ToFloat64(f.cache.stored), testutil.ToFloat64(f.cache.held); n != 2 || b != float64(2*len(stored)) {
		t.Fatalf("after two inflated fetches: %v stored, %v bytes held; want 2 and %d", n, b, 2*len(stored))
	}
	if err := mc2.RemoveObject(context.Background(), bucket2, key2, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := fetch(t, f, inflated2); err != nil || !bytes.Equal(got, text) {
		t.Fatalf("cached after inflated fetches: %d bytes, %v", len(got), err)
	}
}

// TestInflateBounds: an inflated object is sent only when it inflates to
// exactly its recorded length. A longer one (a decompression bomb: 64 MiB
// from a few KiB) never gives more than that length, and not even its last
// bytes; a shorter, a corrupt and a non-gzip one fail.
func TestInflateBounds(t *testing.T) {
	text := []byte(strings.Repeat("0123456789", 1000))
	good := gzipped(t, text)
	bomb := gzipped(t, make([]byte, 64<<20))
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-5] ^= 0xff // the CRC-32 of the trailer
	read := func(stored []byte, n int64) ([]byte, error) {
		body, err := Inflate(io.NopCloser(bytes.NewReader(stored)), n)
		if err != nil {
			return nil, err
		}
		defer body.Close()
		return io.ReadAll(body)
	}
	if got, err := read(good, int64(len(text))); err != nil || !bytes.Equal(got, text) {
		t.Fatalf("exact: %d bytes, %v", len(got), err)
	}
	if got, err := read(good, int64(len(text))); err != nil || !bytes.Equal(got, text) {
		t.Fatalf("exact, a pooled reader: %d bytes, %v", len(got), err)
	}
	for name, c := range map[string]struct {
		stored []byte
		n      int64
	}{
		"bomb":     {bomb, 4096},
		"longer":   {good, int64(len(text)) - 1},
		"shorter":  {good, int64(len(text)) + 1},
		"corrupt":  {corrupt, int64(len(text))},
		"not gzip": {text, int64(len(text))},
		"cut":      {good[:len(good)/2], int64(len(text))},
	} {
		got, err := read(c.stored, c.n)
		if !errors.Is(err, ErrDecoded) || int64(len(got)) >= c.n {
			t.Errorf("%s: %d bytes of %d, %v; want fewer and ErrDecoded", name, len(got), c.n, err)
		}
	}
}
