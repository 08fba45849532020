package handoff

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestAnswerRoundTrip(t *testing.T) {
	for _, a := range []Answer{
		{URL: "http://minio:9000/b/k?X-Amz-Signature=x", End: -1, Length: 10},
		{URL: "https://s3.example/b/k", Start: 5, End: 9, Length: 5, Nodes: []string{"minio1:9000", "minio2:9000"}},
		{URL: "http://minio:9000/b/empty", End: -1, Length: 0},
		{URL: "http://minio:9000/b/text", End: -1, Length: 4096, Encoding: "gzip", Stored: 312, File: "f1"},
	} {
		h := http.Header{}
		a.Set(h.Set)
		got, ok, err := Parse(h)
		if !ok || err != nil || got.URL != a.URL || got.Start != a.Start || got.End != a.End || got.Length != a.Length || len(got.Nodes) != len(a.Nodes) ||
			got.Encoding != a.Encoding || got.Stored != a.Stored || got.File != a.File {
			t.Errorf("%+v came back as %+v, %v, %v", a, got, ok, err)
		}
		Strip(h)
		if len(h) != 0 {
			t.Errorf("left after Strip: %v", h)
		}
	}
	for offer, want := range map[string]bool{"gzip": true, "1, gzip": true, "1": false, "": false, "gzipx": false} {
		if got := Decodes(offer, "gzip"); got != want {
			t.Errorf("Decodes(%q, gzip) = %v, want %v", offer, got, want)
		}
	}
	if _, ok, _ := Parse(http.Header{"Content-Type": {"text/plain"}}); ok {
		t.Error("an answer without a handoff was taken for one")
	}
	for name, h := range map[string]http.Header{
		"relative url":   {URL: {"/b/k"}, Length: {"1"}},
		"other scheme":   {URL: {"file:///etc/passwd"}, Length: {"1"}},
		"no length":      {URL: {"http://m/b/k"}},
		"negative":       {URL: {"http://m/b/k"}, Length: {"-1"}},
		"range mismatch": {URL: {"http://m/b/k"}, Length: {"3"}, Range: {"0-9"}},
		"range reversed": {URL: {"http://m/b/k"}, Length: {"1"}, Range: {"9-0"}},
		"other encoding": {URL: {"http://m/b/k"}, Length: {"9"}, Encoding: {"br"}, Stored: {"3"}},
		"no stored":      {URL: {"http://m/b/k"}, Length: {"9"}, Encoding: {"gzip"}},
		"encoded range":  {URL: {"http://m/b/k"}, Length: {"3"}, Range: {"0-2"}, Encoding: {"gzip"}, Stored: {"3"}},
	} {
		if _, ok, err := Parse(h); !ok || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ok %v, err %v, want ErrMalformed", name, ok, err)
		}
	}
}

// object stores data under a fresh key of the test kit's MinIO and returns
// a presigned GET of it.
func object(t *testing.T, data []byte) (url, endpoint string, mc *minio.Client, bucket, key string) {
	t.Helper()
	kit := testkit.Get(t, testkit.S3)
	mc, err := minio.New(kit.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(kit.S3Access, kit.S3Secret, "")})
	if err != nil {
		t.Fatal(err)
	}
	bucket, key = kit.Bucket(t), "files/"+t.Name()
	ctx := context.Background()
	if _, err := mc.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := mc.PresignedGetObject(ctx, bucket, key, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u.String(), kit.S3Endpoint, mc, bucket, key
}

func fetch(t *testing.T, f *Fetcher, a Answer) ([]byte, error) {
	t.Helper()
	body, err := f.Open(context.Background(), a)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(body)
}

func TestFetchWholeAndRanges(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 50_000)
	url, _, _, _, _ := object(t, data)
	f := NewFetcher(nil, CacheConfig{})
	defer f.Close()
	for _, c := range []struct {
		name       string
		start, end int64
		want       []byte
	}{{"whole", 0, -1, data}, {"range", 1000, 299_999, data[1000:300_000]}, {"last byte", 499_999, 499_999, data[499_999:]}} {
		a := Answer{URL: url, Start: c.start, End: c.end, Length: int64(len(c.want))}
		got, err := fetch(t, f, a)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%s: %d bytes, %v; want the %d asked for", c.name, len(got), err, len(c.want))
		}
	}
	// A length that is not the object's (a record out of step with its
	// object) is refused before any byte.
	if _, err := f.Open(context.Background(), Answer{URL: url, End: -1, Length: 7}); !errors.Is(err, ErrObject) {
		t.Errorf("wrong length: %v, want ErrObject", err)
	}
	// A tampered signature is refused by the object store.
	if _, err := f.Open(context.Background(), Answer{URL: url + "0", End: -1, Length: int64(len(data))}); !errors.Is(err, ErrObject) {
		t.Errorf("tampered URL: %v, want ErrObject", err)
	}
}

func TestFetchMissingObject(t *testing.T) {
	url, _, mc, bucket, key := object(t, []byte("soon gone"))
	if err := mc.RemoveObject(context.Background(), bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	f := NewFetcher(nil, CacheConfig{})
	defer f.Close()
	if _, err := f.Open(context.Background(), Answer{URL: url, End: -1, Length: 9}); !errors.Is(err, ErrObject) {
		t.Fatalf("missing object: %v, want ErrObject", err)
	}
}

// cutter is a TCP proxy to target that cuts every connection after n bytes
// from the server: a node that dies mid-download.
func cutter(t *testing.T, target string, n int) (addr string, cuts *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cuts = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go io.Copy(s, c)
				if w, _ := io.CopyN(c, s, int64(n)); w == int64(n) {
					cuts.Add(1)
				}
			}()
		}
	}()
	return ln.Addr().String(), cuts
}

// TestFetchResumesOnAnotherNode: with the nodes of a cluster, a download
// whose node fails mid-body goes on from the byte it reached on another.
func TestFetchResumesOnAnotherNode(t *testing.T) {
	data := bytes.Repeat([]byte("abcdefghij"), 300_000)
	url, endpoint, _, _, _ := object(t, data)
	bad, cuts := cutter(t, endpoint, 200_000)
	f := NewFetcher(nil, CacheConfig{})
	defer f.Close()
	a := Answer{URL: url, End: -1, Length: int64(len(data)), Nodes: []string{bad, endpoint}}
	for i := range 4 { // new connections go to the nodes in turn: some start on the bad one
		f.mu.Lock()
		for _, c := range f.clusters {
			c.transport.CloseIdleConnections()
		}
		f.mu.Unlock()
		got, err := fetch(t, f, a)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("download %d: %d bytes, %v; want the %d stored", i, len(got), err, len(data))
		}
	}
	if cuts.Load() == 0 {
		t.Fatal("no download was cut: the test did not test resumption")
	}
}
