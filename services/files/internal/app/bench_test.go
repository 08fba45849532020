package app

// Benchmarks (`make bench`; plain `go test` skips them):
//
//	go test -run '^$' -bench . -benchtime 3x ./internal/app/
//
// FILES_BENCH_SIZE sets the body size (default 64MiB; "1GiB" for the
// issue's figure). Each benchmark reports the service's and raw minio-go's
// throughput on the same MinIO and their ratio. The service numbers are
// in-process over loopback HTTP, without the gateway.

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/services/files/internal/imaging"
	"github.com/minio/minio-go/v7"
)

func benchSize(b *testing.B) int64 {
	b.Helper()
	n := int64(64 << 20)
	if v := os.Getenv("FILES_BENCH_SIZE"); v != "" {
		var err error
		if n, err = config.ParseSize(v); err != nil || n <= 0 {
			b.Fatalf("FILES_BENCH_SIZE: %v", err)
		}
	}
	return n
}

func mbps(bytes int64, d time.Duration) float64 {
	return float64(bytes) / (1 << 20) / d.Seconds()
}

func BenchmarkUploadVsRawPut(b *testing.B) {
	size := benchSize(b)
	h := start(b, map[string]string{"FILES_MAX_UPLOAD": "8GiB"}, hooks{})
	ctx := context.Background()
	bucket := h.env["S3_BUCKET"]
	var raw, svc time.Duration
	var peak float64
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := h.kit.S3.PutObject(ctx, bucket, "raw/bench", newBlocks(size), size, minio.PutObjectOptions{}); err != nil {
			b.Fatal(err)
		}
		raw += time.Since(t0)

		stop := heapPeak(50 * time.Millisecond)
		t0 = time.Now()
		r := h.streamForm("/upload/file", h.user("bench"), "bench.bin", newBlocks(size)) // tokens live 30 s
		svc += time.Since(t0)
		peak = max(peak, stop())
		if r.StatusCode != http.StatusCreated {
			b.Fatalf("upload: %d %s", r.StatusCode, r.body)
		}
	}
	b.StopTimer()
	n := size * int64(b.N)
	b.ReportMetric(mbps(n, svc), "svc-MB/s")
	b.ReportMetric(mbps(n, raw), "raw-MB/s")
	b.ReportMetric(raw.Seconds()/svc.Seconds(), "ratio")
	b.ReportMetric(peak, "peak-heap-MiB")
}

func BenchmarkDownloadVsRawGet(b *testing.B) {
	size := benchSize(b)
	h := start(b, map[string]string{"FILES_MAX_UPLOAD": "8GiB"}, hooks{})
	tok := h.user("bench")
	r := h.streamForm("/upload/file", tok, "bench.bin", newBlocks(size))
	if r.StatusCode != http.StatusCreated {
		b.Fatalf("upload: %d %s", r.StatusCode, r.body)
	}
	f := r.json(b)["file"].(map[string]any)
	ctx := context.Background()
	bucket := h.env["S3_BUCKET"]
	var raw, svc time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		obj, err := h.kit.S3.GetObject(ctx, bucket, f["path"].(string), minio.GetObjectOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, obj)
		obj.Close()
		if err != nil || n != size {
			b.Fatalf("raw get: %d %v", n, err)
		}
		raw += time.Since(t0)

		t0 = time.Now()
		req, _ := http.NewRequest(http.MethodGet, h.base+"/download/file/"+f["id"].(string), nil)
		req.Header.Set(identity.Header, h.user("bench")) // tokens live 30 s
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != size || resp.StatusCode != http.StatusOK {
			b.Fatalf("download: %d %d %v", resp.StatusCode, n, err)
		}
		svc += time.Since(t0)
	}
	b.StopTimer()
	n := size * int64(b.N)
	b.ReportMetric(mbps(n, svc), "svc-MB/s")
	b.ReportMetric(mbps(n, raw), "raw-MB/s")
	b.ReportMetric(raw.Seconds()/svc.Seconds(), "ratio")
}

// BenchmarkImageReencode12MP re-encodes a 4000×3000 JPEG photo-like image
// with the default settings (longest side 2048, quality 82).
func BenchmarkImageReencode12MP(b *testing.B) {
	img := image.NewYCbCr(image.Rect(0, 0, 4000, 3000), image.YCbCrSubsampleRatio420)
	for y := 0; y < 3000; y++ {
		for x := 0; x < 4000; x++ {
			yy, cb, cr := color.RGBToYCbCr(uint8(x*255/4000), uint8(y*255/3000), uint8((x^y)&0xff))
			img.Y[img.YOffset(x, y)] = yy
			img.Cb[img.COffset(x, y)] = cb
			img.Cr[img.COffset(x, y)] = cr
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	opts := imaging.Options{MaxPixels: 40_000_000, MaxSide: 2048, JPEGQuality: 82}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := imaging.Process(context.Background(), data, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "images/s")
}
