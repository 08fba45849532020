package app

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/pkg/userevents"
	"github.com/gen2brain/webp"
	"github.com/minio/minio-go/v7"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// gradient is a w×h opaque image whose colour changes across it.
func gradient(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{uint8(x * 255 / w), uint8(y * 255 / h), 128, 255})
		}
	}
	return img
}

// decoded decodes a variant's body by its Content-Type and returns its size.
func decoded(t *testing.T, r *response) image.Point {
	t.Helper()
	var img image.Image
	var err error
	switch ct := r.Header.Get("Content-Type"); ct {
	case "image/jpeg":
		img, err = jpeg.Decode(bytes.NewReader(r.body))
	case "image/png":
		img, err = png.Decode(bytes.NewReader(r.body))
	case "image/webp":
		img, err = webp.Decode(bytes.NewReader(r.body))
	default:
		t.Fatalf("content type %q", ct)
	}
	if err != nil {
		t.Fatalf("decoding the variant: %v", err)
	}
	return img.Bounds().Size()
}

// renders is the process's count of variants rendered.
func (h *harness) renders(t *testing.T) float64 {
	t.Helper()
	n, _ := metricstest.Scrape(t, h.base+"/metrics").Sum("acme_files_image_variants_rendered_total")
	return n
}

// restart stops the service and starts it again on the same database,
// bucket and settings.
func (h *harness) restart(t *testing.T) {
	t.Helper()
	if err := h.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	tusc := make(chan string, 1)
	h.svc = apptest.Start(t, func(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(string)) error {
		return run(ctx, getenv, stdout, ready, hooks{tusReady: func(a string) { tusc <- a }})
	}, h.env.Getenv, apptest.Options{})
	h.base = h.svc.URL
	<-tusc
}

func (h *harness) variantKeys(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, k := range h.objects() {
		if strings.HasPrefix(k, "variants/") {
			out = append(out, k)
		}
	}
	return out
}

func TestImageVariants(t *testing.T) {
	h := start(t, map[string]string{"FILES_IMAGE_VARIANTS": "12", "FILES_IMAGE_VARIANT_MAX_SIDE": "300"}, hooks{})
	tok := h.user("alice")
	img := uploadImage(t, h, tok, jpegBytes(t, gradient(400, 300)))
	id := img["id"].(string)
	pngImg := uploadImage(t, h, tok, pngBytes(t, gradient(40, 20)))
	anon := h.anonymous()

	for _, tc := range []struct {
		name, query, accept, typ string
		size                     image.Point
		vary                     bool
	}{
		{"variant200WidthKeepsRatio", "w=100", "", "image/jpeg", image.Pt(100, 75), false},
		{"variant200HeightKeepsRatio", "h=60", "", "image/jpeg", image.Pt(80, 60), false},
		{"variant200Cover", "w=100&h=100", "", "image/jpeg", image.Pt(100, 100), false},
		{"variant200Contain", "w=100&h=100&fit=contain", "", "image/jpeg", image.Pt(100, 75), false},
		{"variant200Fill", "w=100&h=20&fit=fill", "", "image/jpeg", image.Pt(100, 20), false},
		{"variant200PNG", "w=50&format=png", "", "image/png", image.Pt(50, 38), false},
		{"variant200WebP", "w=64&format=webp&q=70", "", "image/webp", image.Pt(64, 48), false},
		{"variant200AutoWebP", "w=64&format=auto", "image/avif,image/webp,*/*", "image/webp", image.Pt(64, 48), true},
		{"variant200AutoJPEG", "w=64&format=auto", "*/*", "image/jpeg", image.Pt(64, 48), true},
		{"variant200Quality", "w=100&q=30", "", "image/jpeg", image.Pt(100, 75), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.get("/images/"+id+"?"+tc.query, anon, map[string]string{"Accept": tc.accept})
			wantStatus(t, r, http.StatusOK)
			if got := decoded(t, r); got != tc.size {
				t.Fatalf("size %v, want %v", got, tc.size)
			}
			if r.Header.Get("Content-Type") != tc.typ || r.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" ||
				r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Header.Get("ETag") == "" || r.ContentLength != int64(len(r.body)) {
				t.Fatalf("headers %v", r.Header)
			}
			if got := r.Header.Get("Vary") == "Accept"; got != tc.vary {
				t.Fatalf("Vary %q", r.Header.Get("Vary"))
			}
		})
	}
	t.Run("variant200PNGKeepsItsFormat", func(t *testing.T) {
		r := h.get("/images/"+pngImg["id"].(string)+"?w=20", anon, nil)
		wantStatus(t, r, http.StatusOK)
		if got := decoded(t, r); r.Header.Get("Content-Type") != "image/png" || got != image.Pt(20, 10) {
			t.Fatalf("%s %v", r.Header.Get("Content-Type"), got)
		}
	})
	t.Run("variant206And304", func(t *testing.T) {
		full := h.get("/images/"+id+"?w=100", anon, nil)
		r := h.get("/images/"+id+"?w=100", anon, map[string]string{"Range": "bytes=0-9"})
		wantStatus(t, r, http.StatusPartialContent)
		if !bytes.Equal(r.body, full.body[:10]) || r.Header.Get("Content-Range") != fmt.Sprintf("bytes 0-9/%d", len(full.body)) {
			t.Fatalf("range %q %q", r.body, r.Header.Get("Content-Range"))
		}
		wantStatus(t, h.get("/images/"+id+"?w=100", anon, map[string]string{"If-None-Match": full.Header.Get("ETag")}), http.StatusNotModified)
	})
	t.Run("variantsSameCanonicalShareOneObject", func(t *testing.T) {
		before := len(h.variantKeys(t))
		a := h.get("/images/"+id+"?w=100&h=75&fit=fill", anon, nil) // = w=100
		wantStatus(t, a, http.StatusOK)
		if len(h.variantKeys(t)) != before {
			t.Fatalf("a second object for the same variant: %v", h.variantKeys(t))
		}
	})

	for _, tc := range []struct{ name, query, field string }{
		{"variant400NoSide", "fit=cover", "w"},
		{"variant400WidthZero", "w=0", "w"},
		{"variant400WidthNotANumber", "w=abc", "w"},
		{"variant400WidthNegative", "w=-5", "w"},
		{"variant400WidthOverImage", "w=401", "w"},
		{"variant400WidthOverMaxSide", "w=301", "w"},
		{"variant400HeightOverImage", "h=301", "h"},
		{"variant400Huge", "w=99999999999999999999", "w"},
		{"variant400Twice", "w=10&w=20", "w"},
		{"variant400Fit", "w=10&fit=crop", "fit"},
		{"variant400Format", "w=10&format=gif", "format"},
		{"variant400QualityZero", "w=10&q=0", "q"},
		{"variant400QualityOver", "w=10&q=101", "q"},
		{"variant400Unknown", "w=10&thumb=1", "thumb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := wantError(t, h.get("/images/"+id+"?"+tc.query, anon, nil), http.StatusBadRequest, "invalid_parameter")
			if m["field"] != tc.field {
				t.Fatalf("field %v, want %s: %v", m["field"], tc.field, m)
			}
		})
	}
	t.Run("variant404", func(t *testing.T) {
		wantError(t, h.get("/images/0123456789abcdef0123456789abcdef?w=10", anon, nil), http.StatusNotFound, "file_not_found")
		f := h.uploadFile(tok, "a.txt", []byte("hello"))
		wantError(t, h.get("/images/"+f["id"].(string)+"?w=10", anon, nil), http.StatusNotFound, "file_not_found")
	})

	t.Run("variant400TooMany", func(t *testing.T) {
		// Those made above count; new ones are made up to 12, the 13th is
		// refused, and those made are still served.
		mine := func() int {
			n := 0
			for _, k := range h.variantKeys(t) {
				if strings.Contains(k, "/"+id+"/") {
					n++
				}
			}
			return n
		}
		for k := mine(); k < 12; k++ {
			wantStatus(t, h.get(fmt.Sprintf("/images/%s?w=%d", id, 20+k), anon, nil), http.StatusOK)
		}
		m := wantError(t, h.get("/images/"+id+"?w=99", anon, nil), http.StatusBadRequest, "too_many_variants")
		if m["limit"] != float64(12) {
			t.Fatalf("limit %v", m["limit"])
		}
		wantStatus(t, h.get("/images/"+id+"?w=100", anon, nil), http.StatusOK)
		if n := mine(); n != 12 {
			t.Fatalf("%d variant objects, want 12: %v", n, h.variantKeys(t))
		}
	})

	t.Run("quotaCountsOnlyUploads", func(t *testing.T) {
		r := h.get("/me/usage", tok, nil)
		wantStatus(t, r, http.StatusOK)
		want := img["size"].(float64) + pngImg["size"].(float64) + 5
		if got := r.json(t)["used"]; got != want {
			t.Fatalf("used %v, want %v (the uploads alone)", got, want)
		}
	})

	t.Run("deleteRemovesVariants", func(t *testing.T) {
		wantStatus(t, h.do(http.MethodDelete, "/files/"+id, tok, nil, nil), http.StatusNoContent)
		for _, k := range h.variantKeys(t) {
			if strings.Contains(k, id) {
				t.Fatalf("variant %s left after its image's deletion", k)
			}
		}
		wantError(t, h.get("/images/"+id+"?w=100", anon, nil), http.StatusNotFound, "file_not_found")
	})
}

// Concurrent first requests of one variant render it once; it survives a
// restart (read from the object store, not rendered again).
func TestImageVariantRenderedOnce(t *testing.T) {
	h := start(t, nil, hooks{})
	tok := h.user("bob")
	id := uploadImage(t, h, tok, jpegBytes(t, gradient(1200, 900)))["id"].(string)
	anon := h.anonymous()
	const n = 16
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := h.get("/images/"+id+"?w=100&h=100", anon, nil)
			if r.StatusCode == http.StatusOK {
				bodies[i] = r.body
			}
		})
	}
	wg.Wait()
	for i, b := range bodies {
		if b == nil || !bytes.Equal(b, bodies[0]) {
			t.Fatalf("request %d got a different answer", i)
		}
	}
	if got := h.renders(t); got != 1 {
		t.Fatalf("%v renders for %d concurrent first requests, want 1", got, n)
	}
	if keys := h.variantKeys(t); len(keys) != 1 {
		t.Fatalf("variant objects %v", keys)
	}

	h.restart(t)
	r := h.get("/images/"+id+"?w=100&h=100", anon, nil)
	wantStatus(t, r, http.StatusOK)
	if !bytes.Equal(r.body, bodies[0]) {
		t.Fatal("the variant changed across a restart")
	}
	if got := h.renders(t); got != 0 {
		t.Fatalf("rendered again after a restart (%v renders)", got)
	}
}

// second starts another replica on h's database, bucket and NATS prefix.
func (h *harness) second(t *testing.T) *harness {
	t.Helper()
	tusc := make(chan string, 1)
	svc := apptest.Start(t, func(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(string)) error {
		return run(ctx, getenv, stdout, ready, hooks{tusReady: func(a string) { tusc <- a }})
	}, h.env.Getenv, apptest.Options{})
	h2 := *h
	h2.svc, h2.base, h2.tus = svc, svc.URL, "http://"+<-tusc
	return &h2
}

// Two replicas asked for the same new variant at once: one object stored,
// one stored render counted across both, the image's count 1.
func TestImageVariantAcrossReplicas(t *testing.T) {
	h := start(t, nil, hooks{})
	h2 := h.second(t)
	tok := h.user("carol")
	id := uploadImage(t, h, tok, jpegBytes(t, gradient(1600, 1200)))["id"].(string)
	anon := h.anonymous()
	for round := range 3 {
		q := fmt.Sprintf("/images/%s?w=%d&h=%d", id, 90+round, 60)
		var wg sync.WaitGroup
		bodies := make([][]byte, 8)
		for i := range 8 {
			wg.Go(func() {
				r := []*harness{h, h2}[i%2].get(q, anon, nil)
				if r.StatusCode == http.StatusOK {
					bodies[i] = r.body
				}
			})
		}
		wg.Wait()
		for i, b := range bodies {
			if b == nil {
				t.Fatalf("round %d: request %d failed", round, i)
			}
		}
	}
	if got := h.renders(t) + h2.renders(t); got != 3 {
		t.Fatalf("%v stored renders across two replicas, want 3", got)
	}
	if keys := h.variantKeys(t); len(keys) != 3 {
		t.Fatalf("variant objects %v", keys)
	}
	var d struct {
		Variants int64 `bson:"variants"`
	}
	if err := h.kit.Mongo.Database(h.env["MONGO_DB"]).Collection("files").FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil || d.Variants != 3 {
		t.Fatalf("the image counts %d variants (%v), want 3", d.Variants, err)
	}
}

// A deleted user's erasure removes their images' variants too.
func TestImageVariantsErased(t *testing.T) {
	h := start(t, nil, hooks{})
	tok := h.user("dave")
	id := uploadImage(t, h, tok, jpegBytes(t, gradient(200, 100)))["id"].(string)
	for _, q := range []string{"w=50", "w=20&format=png", "h=10&format=webp"} {
		wantStatus(t, h.get("/images/"+id+"?"+q, h.anonymous(), nil), http.StatusOK)
	}
	if n := len(h.variantKeys(t)); n != 3 {
		t.Fatalf("%d variants", n)
	}
	ctx := context.Background()
	if err := userevents.EnsureStream(ctx, h.kit.JS, h.env["NATS_SUBJECT_PREFIX"]); err != nil {
		t.Fatal(err)
	}
	if err := userevents.PublishDeleted(ctx, h.kit.JS, h.env["NATS_SUBJECT_PREFIX"], "dave"); err != nil {
		t.Fatal(err)
	}
	h.assertNothingStored(t)
}

// The sweeper removes a variant whose image has no record (a render that
// stored after its image's deletion).
func TestOrphanVariantSwept(t *testing.T) {
	h := start(t, map[string]string{"FILES_SWEEP_INTERVAL": "100ms", "FILES_SWEEP_AGE": "1s"}, hooks{})
	tok := h.user("erin")
	id := uploadImage(t, h, tok, jpegBytes(t, gradient(200, 100)))["id"].(string)
	wantStatus(t, h.get("/images/"+id+"?w=50", h.anonymous(), nil), http.StatusOK)
	orphan := "variants/2026/01/" + strings.Repeat("ab", 16) + "/10x10-q82.jpeg"
	if _, err := h.kit.S3.PutObject(context.Background(), h.env["S3_BUCKET"], orphan, bytes.NewReader([]byte("x")), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 20*time.Second, func() error {
		if slices.Contains(h.variantKeys(t), orphan) {
			return fmt.Errorf("orphan variant still there")
		}
		return nil
	})
	if n := len(h.variantKeys(t)); n != 1 {
		t.Fatalf("the sweeper removed a live variant: %v", h.variantKeys(t))
	}
}
