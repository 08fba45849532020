package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/jpeg"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/scripts/stack"
	"github.com/minio/minio-go/v7"
)

// variantObjects lists the variant objects in bucket.
func variantObjects(t *testing.T, bucket string) []string {
	t.Helper()
	var keys []string
	for o := range testkit.Get(t).S3.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: "variants/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// noiseJPEG is a w×h JPEG of noise (it compresses badly: the largest
// file of its size).
func noiseJPEG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	x := uint32(1)
	for i := range img.Pix {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		img.Pix[i] = byte(x)
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestHostileVariants asks an image's public URL, anonymously through the
// gateway, for what would make the files service render and store without
// bound: sides far past the image's and the settings' (and past int64),
// and thousands of distinct variants of one image. Every size outside the
// limits is a 400 naming its parameter and stores nothing; of 1,500
// distinct sizes exactly FILES_IMAGE_VARIANTS (20) are rendered and
// stored, the rest 400 too_many_variants; those 20 are still served.
func TestHostileVariants(t *testing.T) {
	var bucket string
	p, sec, _ := platformOn(t, nil, stack.Options{}, func(s *stack.Servers) { bucket = s.S3Bucket })
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	r := admin.upload("/upload/image", part{field: "file", filename: "big.jpg", contentType: "image/jpeg", data: bytes.NewReader(noiseJPEG(t, 1600, 1200))})
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	id := r.json(t)["image"].(map[string]any)["id"].(string)
	anon := newClient(t, p.GatewayURL)

	for _, tc := range []struct{ query, field string }{
		{"w=1601", "w"},
		{"h=1201", "h"},
		{"w=1025", "w"}, // FILES_IMAGE_VARIANT_MAX_SIDE
		{"w=100000&h=100000", "w"},
		{"w=99999999999999999999999", "w"},
		{"w=-1", "w"},
		{"w=1e3", "w"},
		{"w=0x10", "w"},
		{"w=100&h=100&fit=" + strings.Repeat("x", 5000), "fit"},
		{"w=10&" + strings.Repeat("a", 100) + "=1", strings.Repeat("a", 32)},
	} {
		r := anon.raw("GET", "/images/"+id+"?"+tc.query, nil, nil, "")
		if r.status != 400 {
			t.Errorf("%.60s: %d %.200s, want 400", tc.query, r.status, r.body)
			continue
		}
		if m := r.json(t); m["code"] != "invalid_parameter" || m["field"] != tc.field {
			t.Errorf("%.60s: %v, want invalid_parameter naming %q", tc.query, m, tc.field)
		}
	}
	if keys := variantObjects(t, bucket); len(keys) != 0 {
		t.Fatalf("refused requests stored variants: %v", keys)
	}

	// 1,500 distinct sizes, 16 at a time.
	var ok, refused, other atomic.Int64
	var served sync.Map
	sizes := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for w := range sizes {
				r := anon.raw("GET", fmt.Sprintf("/images/%s?w=%d&h=%d&fit=fill", id, 1+w%1000, 1+w/1000), nil, nil, "")
				switch {
				case r.status == 200:
					ok.Add(1)
					served.Store(w, true)
				case r.status == 400 && bytes.Contains(r.body, []byte(`"too_many_variants"`)):
					refused.Add(1)
				default:
					other.Add(1)
					t.Errorf("w %d: %d %.200s", w, r.status, r.body)
				}
			}
		})
	}
	for w := range 1500 {
		sizes <- w
	}
	close(sizes)
	wg.Wait()
	t.Logf("1500 distinct variants asked: %d served, %d refused", ok.Load(), refused.Load())
	if ok.Load() != 20 || refused.Load() != 1480 {
		t.Fatalf("%d served, %d refused too_many_variants, %d other; want 20 and 1480", ok.Load(), refused.Load(), other.Load())
	}
	if keys := variantObjects(t, bucket); len(keys) != 20 {
		t.Fatalf("%d variant objects stored, want 20", len(keys))
	}
	renders, _ := metricstest.Scrape(t, p.MetricsURLs["files"]).Sum("acme_files_image_variants_rendered_total")
	if renders != 20 {
		t.Fatalf("%v renders, want 20", renders)
	}
	served.Range(func(k, _ any) bool {
		w := k.(int)
		if r := anon.raw("GET", fmt.Sprintf("/images/%s?w=%d&h=%d&fit=fill", id, 1+w%1000, 1+w/1000), nil, nil, ""); r.status != 200 {
			t.Errorf("variant %d no longer served: %d", w, r.status)
		}
		return true
	})
}

// TestHostileVariantsOfTheLargestImage: the largest images the upload
// admits (a decompression bomb is refused at upload, 422; what passes is
// stored at most FILES_IMAGE_MAX_SIDE a side) asked for eight distinct
// 1024-pixel WebP variants at once, the costliest render there is. The
// image budget runs them in turn (each 200, or 503 busy with Retry-After
// when it waited FILES_IMAGE_WAIT), and the files process's peak RSS stays
// under 512 MiB.
func TestHostileVariantsOfTheLargestImage(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"FILES_IMAGE_WAIT": "60s"})
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	bomb := admin.upload("/upload/image", part{field: "file", filename: "bomb.png", contentType: "image/png", data: bytes.NewReader(zeroPNG16(t, 6300, 6300))})
	if bomb.status != 422 {
		t.Fatalf("bomb: %d %s, want 422", bomb.status, bomb.body)
	}
	r := admin.upload("/upload/image", part{field: "file", filename: "large.png", contentType: "image/png", data: bytes.NewReader(zeroPNG16(t, 3000, 3000))})
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	img := r.json(t)["image"].(map[string]any)
	id := img["id"].(string)
	if img["width"] != float64(2048) {
		t.Fatalf("stored %v", img)
	}
	pid := p.Procs["files"].Pid()
	before := vmRSS(t, pid)
	if err := stack.ResetPeakRSS(pid); err != nil {
		t.Fatal(err)
	}
	anon := newClient(t, p.GatewayURL)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			r := anon.raw("GET", fmt.Sprintf("/images/%s?w=%d&format=webp", id, 1024-i), nil, nil, "")
			switch {
			case r.status == 200 && r.header.Get("Content-Type") == "image/webp":
			case r.status == 503 && r.header.Get("Retry-After") != "" && bytes.Contains(r.body, []byte(`"busy"`)):
				t.Logf("variant %d: busy", 1024-i)
			default:
				t.Errorf("variant %d: %d %.200s", 1024-i, r.status, r.body)
			}
		})
	}
	wg.Wait()
	peak, err := stack.PeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("files RSS before %d MiB, peak %d MiB", before>>20, peak>>20)
	if peak >= 512<<20 {
		t.Errorf("files peak RSS %d MiB with eight large WebP variants asked at once, want < 512", peak>>20)
	}
}
