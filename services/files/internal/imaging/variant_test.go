package imaging

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"testing"

	"github.com/gen2brain/webp"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name         string
		sw, sh, w, h int
		fit          Fit
		f            Format
		q            int
		want         string
		crop         image.Rectangle
	}{
		{"widthKeepsRatio", 400, 200, 100, 0, Cover, JPEG, 82, "100x50-q82.jpeg", image.Rect(0, 0, 400, 200)},
		{"heightKeepsRatio", 400, 200, 0, 50, Fill, JPEG, 82, "100x50-q82.jpeg", image.Rect(0, 0, 400, 200)},
		{"fillStretches", 400, 200, 100, 100, Fill, JPEG, 82, "100x100-q82.jpeg", image.Rect(0, 0, 400, 200)},
		{"containFitsInside", 400, 200, 100, 100, Contain, PNG, 82, "100x50.png", image.Rect(0, 0, 400, 200)},
		{"coverCropsMiddle", 400, 200, 100, 100, Cover, WebP, 60, "100x100c-q60.webp", image.Rect(100, 0, 300, 200)},
		{"coverTallCropsMiddle", 200, 400, 100, 100, Cover, JPEG, 82, "100x100c-q82.jpeg", image.Rect(0, 100, 200, 300)},
		{"coverSameRatioNoCrop", 400, 200, 200, 100, Cover, JPEG, 82, "200x100-q82.jpeg", image.Rect(0, 0, 400, 200)},
		{"tinySideAtLeast1", 4000, 10, 100, 0, Cover, JPEG, 82, "100x1-q82.jpeg", image.Rect(0, 0, 4000, 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Plan(tc.sw, tc.sh, tc.w, tc.h, tc.fit, tc.f, tc.q)
			if got := v.Name(); got != tc.want {
				t.Errorf("name %q, want %q", got, tc.want)
			}
			if v.Crop != tc.crop {
				t.Errorf("crop %v, want %v", v.Crop, tc.crop)
			}
		})
	}
}

func TestRender(t *testing.T) {
	// Left half red, right half blue: a cover crop of the middle keeps both.
	src := image.NewRGBA(image.Rect(0, 0, 400, 200))
	for y := 0; y < 200; y++ {
		for x := 0; x < 400; x++ {
			c := color.RGBA{255, 0, 0, 255}
			if x >= 200 {
				c = color.RGBA{0, 0, 255, 255}
			}
			src.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, src); err != nil {
		t.Fatal(err)
	}
	o := Options{MaxPixels: 1 << 24, MaxMemory: 256 << 20, MaxScans: 16}
	for _, tc := range []struct {
		v    Variant
		typ  string
		w, h int
	}{
		{Plan(400, 200, 100, 100, Cover, JPEG, 90), "image/jpeg", 100, 100},
		{Plan(400, 200, 100, 0, Cover, PNG, 0), "image/png", 100, 50},
		{Plan(400, 200, 64, 64, Contain, WebP, 80), "image/webp", 64, 32},
	} {
		t.Run(tc.v.Name(), func(t *testing.T) {
			res, err := Render(context.Background(), b.Bytes(), o, tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if res.Type != tc.typ {
				t.Fatalf("type %s", res.Type)
			}
			var img image.Image
			switch tc.typ {
			case "image/jpeg":
				img, err = jpeg.Decode(bytes.NewReader(res.Data))
			case "image/png":
				img, err = png.Decode(bytes.NewReader(res.Data))
			default:
				img, err = webp.Decode(bytes.NewReader(res.Data))
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := img.Bounds().Size(); got != image.Pt(tc.w, tc.h) {
				t.Fatalf("size %v, want %dx%d", got, tc.w, tc.h)
			}
			// The left edge is red, the right edge blue.
			lr, _, lb, _ := img.At(1, tc.h/2).RGBA()
			rr, _, rb, _ := img.At(tc.w-2, tc.h/2).RGBA()
			if lr>>8 < 200 || lb>>8 > 60 || rb>>8 < 200 || rr>>8 > 60 {
				t.Fatalf("colours left %d,%d right %d,%d", lr>>8, lb>>8, rr>>8, rb>>8)
			}
			c, err := VariantCost(b.Bytes(), o, tc.v)
			if err != nil || c.Bytes() <= 0 {
				t.Fatalf("cost %v %v", c, err)
			}
		})
	}
	// Larger than the source: refused, never enlarged.
	if _, err := Render(context.Background(), b.Bytes(), o, Variant{Width: 800, Height: 400, Crop: image.Rect(0, 0, 400, 200), Format: JPEG, Quality: 80}); err == nil {
		t.Fatal("a variant larger than its source was rendered")
	}
}
