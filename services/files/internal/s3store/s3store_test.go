package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/minio/minio-go/v7"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func newStore(t *testing.T) *Store {
	t.Helper()
	kit := testkit.Get(t, testkit.S3)
	s, err := New(Options{Endpoint: kit.S3Endpoint, AccessKey: kit.S3Access, SecretKey: kit.S3Secret,
		Bucket: kit.Bucket(t), PartSize: 5 << 20, UploadThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureBucket(context.Background()); err != nil { // exists already: no error
		t.Fatal(err)
	}
	return s
}

func keys(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	for o, err := range s.List(context.Background(), "") {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o.Key)
	}
	return out
}

func TestPutGetRemove(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	// Of unknown size: 1 byte and SmallObject (one request), SmallObject+1
	// (the multipart path from the first byte on), 7 MB (two parts).
	for _, n := range []int{1, SmallObject, SmallObject + 1} {
		data := bytes.Repeat([]byte{'a' + byte(n%7)}, n)
		if res, err := s.Put(ctx, "files/small", bytes.NewReader(data), -1, "text/plain"); err != nil || res.Size != int64(n) {
			t.Fatalf("put %d bytes of unknown size: %v %+v", n, err, res)
		}
		obj, err := s.Get(ctx, "files/small", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(obj.Body)
		obj.Body.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes put, %d read back (or other bytes)", n, len(got))
		}
	}
	data := bytes.Repeat([]byte("0123456789"), 700_000) // 7 MB: two parts
	for _, size := range []int64{-1, int64(len(data))} {
		res, err := s.Put(ctx, "files/k", bytes.NewReader(data), size, "application/octet-stream")
		if err != nil || res.Size != int64(len(data)) {
			t.Fatalf("put (size %d): %v %+v", size, err, res)
		}
		obj, err := s.Get(ctx, "files/k", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(obj.Body)
		obj.Body.Close()
		if !bytes.Equal(got, data) || obj.Size != int64(len(data)) {
			t.Fatalf("get: %d bytes, size %d", len(got), obj.Size)
		}
	}
	obj, err := s.Get(ctx, "files/k", 5, 14)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	if string(got) != "5678901234" || obj.Size != 10 {
		t.Fatalf("range: %q size %d", got, obj.Size)
	}
	if err := s.Remove(ctx, "files/k"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "files/k"); err != nil {
		t.Fatalf("removing a missing key: %v", err)
	}
	if _, err := s.Get(ctx, "files/k", 0, -1); !errors.Is(err, files.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
}

// failAfter yields n bytes then fails, like a client that goes away.
type failAfter struct{ n int }

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("client went away")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	for i := range p {
		p[i] = 'x'
	}
	f.n -= len(p)
	return len(p), nil
}

func TestFailedPutLeavesNoObject(t *testing.T) {
	s := newStore(t)
	// before anything, inside the first SmallObject, inside and after the first parts
	for _, n := range []int{0, 1000, SmallObject + 10, 6 << 20, 11 << 20} {
		if _, err := s.Put(context.Background(), "files/broken", &failAfter{n: n}, -1, "x/y"); err == nil {
			t.Fatalf("put of a failing reader (%d bytes) succeeded", n)
		}
		if k := keys(t, s); len(k) != 0 {
			t.Fatalf("after a failed put of %d bytes: %v", n, k)
		}
	}
	incomplete := 0
	for range s.client.ListIncompleteUploads(context.Background(), s.bucket, "", true) {
		incomplete++
	}
	if incomplete != 0 {
		t.Fatalf("%d incomplete multipart uploads left", incomplete)
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	s, err := New(Options{Endpoint: "127.0.0.1:1", AccessKey: "a", SecretKey: "bbbbbbbb", Bucket: "some-bucket", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, "files/k", strings.NewReader("x"), 1, "text/plain"); !errors.Is(err, files.ErrUnavailable) {
		t.Fatalf("put: %v", err)
	}
	if _, err := s.Get(ctx, "files/k", 0, -1); !errors.Is(err, files.ErrUnavailable) {
		t.Fatalf("get: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, files.ErrUnavailable) {
		t.Fatalf("ping: %v", err)
	}
}

// brokenBody yields n bytes of the real body, then fails the way a
// connection to a server that died does.
type brokenBody struct {
	io.ReadCloser
	n int
}

func (b *brokenBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if len(p) > b.n {
		p = p[:b.n]
	}
	n, err := b.ReadCloser.Read(p)
	b.n -= n
	return n, err
}

// breaking opens objects whose bodies fail: the first after first bytes,
// the next after next bytes, the others not.
func breaking(s *Store, first, next int) getter {
	opened := 0
	return func(ctx context.Context, key string, off, end int64, etag string) (io.ReadCloser, minio.ObjectInfo, error) {
		body, info, err := s.getObject(ctx, key, off, end, etag)
		if err != nil {
			return nil, info, err
		}
		opened++
		switch opened {
		case 1:
			return &brokenBody{body, first}, info, nil
		case 2:
			return &brokenBody{body, next}, info, nil
		}
		return body, info, nil
	}
}

func TestReadResumesWhereTheServerFailed(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("abcdefghij"), 100_000)
	if _, err := s.Put(ctx, "files/r", bytes.NewReader(data), int64(len(data)), "application/octet-stream"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		start, end int64
		want       []byte
	}{{"whole", 0, -1, data}, {"range", 1000, 500_999, data[1000:501_000]}} {
		t.Run(c.name, func(t *testing.T) {
			// Fails after 12,345 bytes, again 777 bytes after resuming,
			// then resumes for the rest: within the tries.
			obj, err := s.get(ctx, "files/r", c.start, c.end, breaking(s, 12345, 777))
			if err != nil {
				t.Fatal(err)
			}
			defer obj.Body.Close()
			got, err := io.ReadAll(obj.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, c.want) || int64(len(got)) != obj.Size {
				t.Fatalf("read %d bytes (size %d), want the %d stored", len(got), obj.Size, len(c.want))
			}
		})
	}
	// The object replaced meanwhile: the read fails rather than mix two versions.
	obj, err := s.get(ctx, "files/r", 0, -1, breaking(s, 10, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	if _, err := s.Put(ctx, "files/r", strings.NewReader("another version"), 15, "text/plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(obj.Body); err == nil {
		t.Fatal("a read resumed on another version of the object")
	}
}

// TestSeveralEndpoints: with a list of nodes the store uses the ones that
// answer; requests are signed for the first, which need not be reachable.
func TestSeveralEndpoints(t *testing.T) {
	kit := testkit.Get(t, testkit.S3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	s, err := New(Options{Endpoint: dead + ", " + kit.S3Endpoint, AccessKey: kit.S3Access, SecretKey: kit.S3Secret,
		Bucket: kit.Bucket(t), MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 4 { // every connection either way round the list
		key := fmt.Sprintf("files/n%d", i)
		if _, err := s.Put(ctx, key, strings.NewReader("several nodes"), 13, "text/plain"); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		obj, err := s.Get(ctx, key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(obj.Body)
		obj.Body.Close()
		if string(got) != "several nodes" {
			t.Fatalf("get %d: %q", i, got)
		}
	}
	if r := s.nodes.Ready(); r[0] || !r[1] {
		t.Fatalf("ready %v, want the dead node set aside", r)
	}
	if _, err := New(Options{Endpoint: "minio1:9000,minio2"}); err == nil {
		t.Fatal("an endpoint without a port was accepted")
	}
}

// TestPresign: a presigned GET reads the object with no credentials, is
// reused while it has more than half its life left, and names the nodes of
// a cluster.
func TestPresign(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.Put(ctx, "files/p", strings.NewReader("presigned"), 9, "text/plain"); err != nil {
		t.Fatal(err)
	}
	u, nodes, err := s.Presign(ctx, "files/p", 10*time.Minute)
	if err != nil || nodes != nil {
		t.Fatalf("presign: %v, nodes %v", err, nodes)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "presigned" {
		t.Fatalf("GET presigned: %d %q", resp.StatusCode, body)
	}
	if again, _, _ := s.Presign(ctx, "files/p", 10*time.Minute); again != u {
		t.Fatal("signed again while the first URL had most of its life left")
	}
	if other, _, _ := s.Presign(ctx, "files/q", 10*time.Minute); other == u || !strings.Contains(other, "/files/q?") {
		t.Fatalf("another key's URL %q", other)
	}
	s.presignMu.Lock()
	p := s.presigned["files/p"]
	p.reuseUntil = time.Now().Add(-time.Second) // half its life gone
	s.presigned["files/p"] = p
	s.presignMu.Unlock()
	time.Sleep(1100 * time.Millisecond) // X-Amz-Date has one-second steps
	if fresh, _, _ := s.Presign(ctx, "files/p", 10*time.Minute); fresh == u {
		t.Fatal("a URL past half its life was reused")
	}

	kit := testkit.Get(t, testkit.S3)
	cluster, err := New(Options{Endpoint: kit.S3Endpoint + ",127.0.0.1:1", AccessKey: kit.S3Access, SecretKey: kit.S3Secret, Bucket: kit.Bucket(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	if _, nodes, err := cluster.Presign(ctx, "files/p", time.Minute); err != nil || len(nodes) != 2 || nodes[1] != "127.0.0.1:1" {
		t.Fatalf("cluster presign: %v, nodes %v", err, nodes)
	}
}

// A body held whole (unknown size, at most SmallObject) goes in one PUT
// whose signature covers its SHA-256 (not minio-go's chunked signature),
// and MinIO refuses it when the bytes that arrive are not the ones signed.
func TestSmallPutSignsPayloadHash(t *testing.T) {
	direct := newStore(t)
	target := &url.URL{Scheme: "http", Host: direct.client.EndpointURL().Host}
	var mu sync.Mutex
	var seen []string // method and X-Amz-Content-Sha256 of each request
	corrupt := false
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // as signed
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.In.Method+" "+r.In.Header.Get("X-Amz-Content-Sha256"))
		if corrupt && r.In.Method == http.MethodPut {
			b, _ := io.ReadAll(r.In.Body)
			b[0] ^= 1
			r.Out.Body = io.NopCloser(bytes.NewReader(b))
		}
	}})
	t.Cleanup(proxy.Close)
	kit := testkit.Get(t, testkit.S3)
	s, err := New(Options{Endpoint: strings.TrimPrefix(proxy.URL, "http://"), AccessKey: kit.S3Access, SecretKey: kit.S3Secret,
		Bucket: direct.bucket, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil { // and the bucket's location, looked up once
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("4 KiB "), 700)
	sum := sha256.Sum256(data)
	mu.Lock()
	seen = nil
	mu.Unlock()
	if _, err := s.Put(ctx, "files/signed", bytes.NewReader(data), -1, "application/octet-stream"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if want := []string{"PUT " + hex.EncodeToString(sum[:])}; !slices.Equal(got, want) {
		t.Fatalf("requests %q, want %q", got, want)
	}

	mu.Lock()
	corrupt = true
	mu.Unlock()
	if _, err := s.Put(ctx, "files/altered", bytes.NewReader(data), -1, "application/octet-stream"); err == nil {
		t.Fatal("a body altered on its way was stored")
	}
	if _, err := direct.Get(ctx, "files/altered", 0, -1); !errors.Is(err, files.ErrNotFound) {
		t.Fatalf("get of the altered upload: %v, want ErrNotFound", err)
	}
}
