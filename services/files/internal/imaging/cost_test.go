package imaging

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/color/palette"
	"image/gif"
	"runtime"
	"testing"
)

// craftedPNG is a valid PNG header for w×h at the given bit depth, colour
// type and interlace method, with a small zlib stream of zeros as its data
// (a real file of those dimensions is slow to encode; the cost comes from
// the header alone). trns adds a tRNS chunk before the data.
func craftedPNG(t testing.TB, w, h uint32, depth, ctype, interlace byte, trns bool) []byte {
	t.Helper()
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, depth, ctype, 0, 0, interlace)
	b := []byte("\x89PNG\r\n\x1a\n")
	b = append(b, pngChunk("IHDR", ihdr)...)
	if ctype == 3 {
		b = append(b, pngChunk("PLTE", []byte{0, 0, 0, 255, 255, 255})...)
	}
	if trns {
		b = append(b, pngChunk("tRNS", make([]byte, 6))...)
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	_, _ = zw.Write(make([]byte, 4096))
	_ = zw.Close()
	b = append(b, pngChunk("IDAT", z.Bytes())...)
	return append(b, pngChunk("IEND", nil)...)
}

// hostilePNG is the attack's file: 6300×6300, 16-bit RGBA, a few KB.
func hostilePNG(t testing.TB) []byte { return craftedPNG(t, 6300, 6300, 16, 6, 0, false) }

func TestEstimatePNGBytesPerPixel(t *testing.T) {
	const w, h = 1000, 500
	for _, tc := range []struct {
		name             string
		depth, ctype, il byte
		trns             bool
		bpp              int64 // bytes per pixel of the decoded image
		passes           int64
	}{
		{"grey 1-bit", 1, 0, 0, false, 1, 1},
		{"grey 8-bit", 8, 0, 0, false, 1, 1},
		{"grey 16-bit", 16, 0, 0, false, 2, 1},
		{"grey 8-bit tRNS", 8, 0, 0, true, 4, 1},
		{"grey 16-bit tRNS", 16, 0, 0, true, 8, 1},
		{"RGB 8-bit", 8, 2, 0, false, 4, 1},
		{"RGB 16-bit", 16, 2, 0, false, 8, 1},
		{"paletted 8-bit", 8, 3, 0, false, 1, 1},
		{"grey+alpha 16-bit", 16, 4, 0, false, 8, 1},
		{"RGBA 8-bit", 8, 6, 0, false, 4, 1},
		{"RGBA 16-bit", 16, 6, 0, false, 8, 1},
		{"RGBA 16-bit interlaced", 16, 6, 1, false, 8, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Estimate(craftedPNG(t, w, h, tc.depth, tc.ctype, tc.il, tc.trns), opts)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(w*h) * tc.bpp * tc.passes
			if c.DecodeBytes < want || c.DecodeBytes > want+64<<10 {
				t.Fatalf("DecodeBytes %d, want %d (+ row buffers)", c.DecodeBytes, want)
			}
			if c.Bytes() <= c.DecodeBytes {
				t.Fatalf("Bytes %d does not add the encoder's output", c.Bytes())
			}
		})
	}
}

// TestHostilePNGRefusedByBytes replays the attack's image: 6300×6300 is
// under a 40 MP pixel limit, but at 16-bit RGBA it decodes to 8 bytes a
// pixel, 317 MB, and the byte budget refuses it from its header.
func TestHostilePNGRefusedByBytes(t *testing.T) {
	b := hostilePNG(t)
	if len(b) > 64<<10 {
		t.Fatalf("crafted file is %d bytes", len(b))
	}
	o := Options{MaxPixels: 40_000_000, MaxSide: 2048, MaxMemory: 256 << 20}
	c, err := Check(b, o)
	if !errors.Is(err, ErrTooMuchMemory) {
		t.Fatalf("Check: %v, want ErrTooMuchMemory", err)
	}
	if c.DecodeBytes < 6300*6300*8 {
		t.Fatalf("DecodeBytes %d under 6300*6300*8", c.DecodeBytes)
	}
	if _, err := Process(context.Background(), b, o); !errors.Is(err, ErrTooMuchMemory) {
		t.Fatalf("Process: %v, want ErrTooMuchMemory", err)
	}
	// The same dimensions at 8-bit grey fit: the budget is in bytes.
	if _, err := Check(craftedPNG(t, 6300, 6300, 8, 0, 0, false), o); err != nil {
		t.Fatalf("8-bit grey 6300x6300: %v", err)
	}
}

func TestEstimateBoundsDimensions(t *testing.T) {
	o := Options{MaxPixels: 1 << 62, MaxSide: 2048}
	for _, d := range [][2]uint32{{1<<24 + 1, 1}, {1, 1<<24 + 1}, {1<<31 - 1, 1<<31 - 1}} {
		_, err := Estimate(craftedPNG(t, d[0], d[1], 16, 6, 0, false), o)
		if !errors.Is(err, ErrTooManyPixels) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%dx%d: %v, want a refusal", d[0], d[1], err)
		}
	}
	c, err := Estimate(craftedPNG(t, 1<<24, 1<<24, 16, 6, 1, false), o)
	if err != nil {
		t.Fatal(err)
	}
	if c.Bytes() <= 0 || c.DecodeBytes < 1<<48*16 {
		t.Fatalf("2^24 x 2^24 at 16 bytes: %d, overflowed", c.DecodeBytes)
	}
}

// sof2 turns a baseline JPEG into one whose frame header says progressive
// (the decoder's coefficient buffers come from that marker alone).
func sof2(t *testing.T, b []byte) []byte {
	out := append([]byte{}, b...)
	i := bytes.Index(out, []byte{0xFF, 0xC0})
	if i < 0 {
		t.Fatal("no SOF0")
	}
	out[i+1] = 0xC2
	return out
}

func TestEstimateJPEG(t *testing.T) {
	const w, h = 640, 480
	color420 := encodeJPEG(t, twoTone(w, h)) // image/jpeg writes 4:2:0
	grey := encodeJPEG(t, image.NewGray(image.Rect(0, 0, w, h)))
	c, err := Estimate(color420, opts)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(w * h * 3 / 2); c.DecodeBytes < want || c.DecodeBytes > want*11/10 {
		t.Fatalf("4:2:0 DecodeBytes %d, want about %d", c.DecodeBytes, want)
	}
	p, err := Estimate(sof2(t, color420), opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.DecodeBytes != 5*c.DecodeBytes {
		t.Fatalf("progressive %d, want 5x baseline %d", p.DecodeBytes, c.DecodeBytes)
	}
	g, err := Estimate(grey, opts)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(w * h); g.DecodeBytes != want {
		t.Fatalf("grey DecodeBytes %d, want %d", g.DecodeBytes, want)
	}
}

func TestEstimateGIFAndWebP(t *testing.T) {
	var b bytes.Buffer
	if err := gif.Encode(&b, image.NewPaletted(image.Rect(0, 0, 300, 200), palette.Plan9), nil); err != nil {
		t.Fatal(err)
	}
	c, err := Estimate(b.Bytes(), opts)
	if err != nil || c.DecodeBytes != 300*200 {
		t.Fatalf("GIF: %d %v, want %d", c.DecodeBytes, err, 300*200)
	}
	// The lossless 2×2 WebP of FuzzImageHeader's seeds: 12 bytes a pixel.
	wp := []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00/\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")
	c, err = Estimate(wp, opts)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(c.Width*c.Height) * 12; c.DecodeBytes != want {
		t.Fatalf("WebP lossless: %d, want %d", c.DecodeBytes, want)
	}
	if got := webpDecodeBytes(color.YCbCrModel, 100, 100); got != 112*112*3/2 {
		t.Fatalf("WebP lossy 100x100: %d", got)
	}
}

// allocated is what f allocates on the heap in total (a bound on its peak).
func allocated(f func()) int64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return int64(b.TotalAlloc - a.TotalAlloc)
}

// TestEstimateCoversProcess decodes and re-encodes real images of each
// kind and checks the estimate is not below what Process really allocated
// (every allocation summed, so at least its peak).
func TestEstimateCoversProcess(t *testing.T) {
	rgba64 := image.NewNRGBA64(image.Rect(0, 0, 900, 700))
	for i := range rgba64.Pix {
		rgba64.Pix[i] = byte(i * 7)
	}
	gray := image.NewGray(image.Rect(0, 0, 900, 700))
	for i := range gray.Pix {
		gray.Pix[i] = byte(i * 13)
	}
	var gb bytes.Buffer
	_ = gif.Encode(&gb, image.NewPaletted(image.Rect(0, 0, 900, 700), palette.Plan9), nil)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"PNG 16-bit RGBA", encodePNG(t, rgba64)},
		{"PNG 8-bit grey", encodePNG(t, gray)},
		{"JPEG 4:2:0", encodeJPEG(t, twoTone(900, 700))},
		{"JPEG grey", encodeJPEG(t, gray)},
		{"GIF", gb.Bytes()},
	} {
		for _, side := range []int{2048, 256} {
			o := Options{MaxPixels: 1 << 30, MaxSide: side, JPEGQuality: 80}
			c, err := Estimate(tc.b, o)
			if err != nil {
				t.Fatal(err)
			}
			var perr error
			got := allocated(func() { _, perr = Process(context.Background(), tc.b, o) })
			if perr != nil {
				t.Fatal(perr)
			}
			t.Logf("%s, side %d: allocated %d, estimate %d", tc.name, side, got, c.Bytes())
			if got > c.Bytes() {
				t.Errorf("%s, side %d: Process allocated %d, estimate %d", tc.name, side, got, c.Bytes())
			}
		}
	}
}

// TestResizeAverages: the area resampler keeps flat colours and averages.
func TestResizeAverages(t *testing.T) {
	src := image.NewNRGBA(image.Rect(0, 0, 301, 97))
	for y := 0; y < 97; y++ {
		for x := 0; x < 301; x++ {
			v := uint8(0)
			if x%2 == 0 {
				v = 200
			}
			src.SetNRGBA(x, y, color.NRGBA{v, 50, 250, 255})
		}
	}
	img, err := resize(context.Background(), src, 50)
	if err != nil {
		t.Fatal(err)
	}
	out := img.(*image.RGBA)
	if b := out.Bounds(); b.Dx() != 50 || b.Dy() != 16 {
		t.Fatalf("size %v", b)
	}
	for y := 0; y < 16; y++ {
		for x := 0; x < 50; x++ {
			c := out.RGBAAt(x, y)
			if c.G != 50 || c.B != 250 || c.A != 255 || c.R < 95 || c.R > 105 {
				t.Fatalf("(%d,%d) = %v, want G 50 B 250 A 255 R ~100", x, y, c)
			}
		}
	}
}
