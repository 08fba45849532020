package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/files"
	"github.com/acme/platform/services/files/internal/s3store"
	"github.com/minio/minio-go/v7"
)

// failingInserts is a Store whose inserts fail as if MongoDB were gone.
type failingInserts struct{ files.Store }

func (failingInserts) Insert(context.Context, *files.File) error {
	return fmt.Errorf("%w: injected: server selection timeout", files.ErrUnavailable)
}

func TestMongoInsertFails503(t *testing.T) {
	h := start(t, nil, hooks{store: func(s files.Store) files.Store { return failingInserts{s} }})
	tok := h.user("u")
	m := wantError(t, h.upload("/upload/file", tok, fileField("a.txt", text)), http.StatusServiceUnavailable, "unavailable")
	if m["err"] == nil {
		t.Fatalf("body %v", m)
	}
	wantError(t, h.upload("/upload/image", tok, fileField("a.png", pngBytes(t, solid(4, 4, nil2black())))), http.StatusServiceUnavailable, "unavailable")
	h.assertNothingStored(t) // the stored objects were removed
}

func nil2black() colorBlack { return colorBlack{} }

type colorBlack struct{}

func (colorBlack) RGBA() (r, g, b, a uint32) { return 0, 0, 0, 0xffff }

// switchable sends object operations to a dead endpoint while broken is set.
type switchable struct {
	live, dead files.ObjectStore
	broken     atomic.Bool
}

func (s *switchable) pick() files.ObjectStore {
	if s.broken.Load() {
		return s.dead
	}
	return s.live
}
func (s *switchable) Put(ctx context.Context, k string, r io.Reader, n int64, ct string) (files.PutResult, error) {
	return s.pick().Put(ctx, k, r, n, ct)
}
func (s *switchable) Get(ctx context.Context, k string, a, b int64) (*files.Object, error) {
	return s.pick().Get(ctx, k, a, b)
}
func (s *switchable) PutNew(ctx context.Context, k string, b []byte, ct, sum string) error {
	return s.pick().PutNew(ctx, k, b, ct, sum)
}
func (s *switchable) Stat(ctx context.Context, k string) (files.ObjectStat, error) {
	return s.pick().Stat(ctx, k)
}
func (s *switchable) Remove(ctx context.Context, k string) error { return s.pick().Remove(ctx, k) }
func (s *switchable) List(ctx context.Context, p string) iter.Seq2[files.ObjectInfo, error] {
	return s.pick().List(ctx, p)
}

// deadEndpoint is a loopback address nothing listens on.
func deadEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestS3Unreachable503(t *testing.T) {
	dead, err := s3store.New(s3store.Options{Endpoint: deadEndpoint(t), AccessKey: "x", SecretKey: "yyyyyyyy", Bucket: "dead-bucket", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	sw := &switchable{dead: dead}
	h := start(t, nil, hooks{objects: func(o files.ObjectStore) files.ObjectStore { sw.live = o; return sw }})
	tok := h.user("u")
	f := h.uploadFile(tok, "a.txt", text)

	sw.broken.Store(true)
	t.Run("upload503", func(t *testing.T) {
		wantError(t, h.upload("/upload/file", tok, fileField("b.txt", text)), http.StatusServiceUnavailable, "unavailable")
		wantError(t, h.upload("/upload/image", tok, fileField("b.png", pngBytes(t, solid(4, 4, colorBlack{})))), http.StatusServiceUnavailable, "unavailable")
		if n := h.records(); n != 1 {
			t.Fatalf("records %d, want only the first upload's", n)
		}
	})
	t.Run("download503", func(t *testing.T) {
		wantError(t, h.get("/download/file/"+f["id"].(string), tok, nil), http.StatusServiceUnavailable, "unavailable")
	})
	sw.broken.Store(false)
	wantStatus(t, h.get("/download/file/"+f["id"].(string), tok, nil), http.StatusOK)
}

// The sweeper removes objects without a record once old enough, and leaves
// recorded objects and keys it did not write alone.
func TestSweepRemovesOrphans(t *testing.T) {
	h := start(t, map[string]string{"FILES_SWEEP_INTERVAL": "100ms", "FILES_SWEEP_AGE": "2s"}, hooks{})
	f := h.uploadFile(h.user("u"), "kept.txt", text)
	ctx := context.Background()
	bucket := h.env["S3_BUCKET"]
	orphans := []string{
		files.ObjectKey(files.KindFile, files.NewID(), time.Now()),
		files.ObjectKey(files.KindImage, files.NewID(), time.Now()),
	}
	foreign := "elsewhere/not-ours"
	for _, k := range append(orphans, foreign) {
		if _, err := h.kit.S3.PutObject(ctx, bucket, k, io.LimitReader(rand.Reader, 10), 10, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		objs := h.objects()
		left := map[string]bool{}
		for _, k := range objs {
			left[k] = true
		}
		if !left[orphans[0]] && !left[orphans[1]] {
			if !left[f["path"].(string)] || !left[foreign] || len(objs) != 2 {
				t.Fatalf("sweep removed too much: %v", objs)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphans not swept: %v", objs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// blocks yields n bytes by repeating a random block (cheap under -race).
type blocks struct {
	block []byte
	left  int64
	off   int
}

func newBlocks(n int64) *blocks {
	b := make([]byte, 256<<10)
	rand.Read(b)
	return &blocks{block: b, left: n}
}

func (b *blocks) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n := copy(p, b.block[b.off:])
	b.off = (b.off + n) % len(b.block)
	b.left -= int64(n)
	return n, nil
}

// A streamed upload holds about PartSize*UploadThreads, not the body: the
// heap in use (client and server share this process) stays far below the
// upload's size.
func TestStreamedUploadMemory(t *testing.T) {
	const size = 48 << 20
	h := start(t, map[string]string{"FILES_S3_PART_SIZE": "5MiB", "FILES_S3_UPLOAD_THREADS": "2"}, hooks{})
	tok := h.user("u")
	h.uploadFile(tok, "warm.bin", []byte{1, 2, 3}) // warm pools and connections

	stopSampling := heapPeak(25 * time.Millisecond)
	r := h.streamForm("/upload/file", tok, "big.bin", newBlocks(size))
	growthMiB := stopSampling()
	wantStatus(t, r, http.StatusCreated)
	if got := r.json(t)["file"].(map[string]any)["size"]; got != float64(size) {
		t.Fatalf("size %v", got)
	}
	t.Logf("heap in use grew by %.1f MiB during a %d MiB upload", growthMiB, size>>20)
	if growthMiB > 32 {
		t.Fatalf("heap grew by %.0f MiB: the upload is being buffered", growthMiB)
	}
}
