package imaging

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"testing"
)

var opts = Options{MaxPixels: 40_000_000, MaxSide: 2048, JPEGQuality: 85}

// twoTone is w×h, left half red, right half blue.
func twoTone(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.RGBA{255, 0, 0, 255}
			if x >= w/2 {
				c = color.RGBA{0, 0, 255, 255}
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

func encodeJPEG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodePNG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// exifTIFF is a minimal TIFF structure with one IFD0 entry: orientation.
func exifTIFF(big bool, o uint16) []byte {
	var bo binary.AppendByteOrder = binary.LittleEndian
	b := []byte("II*\x00")
	if big {
		bo = binary.BigEndian
		b = []byte("MM\x00*")
	}
	b = bo.AppendUint32(b, 8)
	b = bo.AppendUint16(b, 1)
	b = bo.AppendUint16(b, 0x0112)
	b = bo.AppendUint16(b, 3)
	b = bo.AppendUint32(b, 1)
	b = bo.AppendUint16(b, o)
	b = append(b, 0, 0, 0, 0, 0, 0)
	return b
}

func withJPEGExif(jpg, tiff []byte) []byte {
	seg := append([]byte("Exif\x00\x00"), tiff...)
	n := len(seg) + 2
	out := []byte{0xFF, 0xD8, 0xFF, 0xE1, byte(n >> 8), byte(n)}
	out = append(out, seg...)
	return append(out, jpg[2:]...)
}

func pngChunk(typ string, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	b = append(b, typ...)
	b = append(b, data...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(typ), data...)))
}

// withPNGExif inserts an eXIf chunk right after IHDR.
func withPNGExif(p, tiff []byte) []byte {
	ihdrEnd := 8 + 12 + 13
	out := append([]byte{}, p[:ihdrEnd]...)
	out = append(out, pngChunk("eXIf", tiff)...)
	return append(out, p[ihdrEnd:]...)
}

func decodeResult(t *testing.T, r Result) image.Image {
	t.Helper()
	img, _, err := image.Decode(bytes.NewReader(r.Data))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != r.Width || b.Dy() != r.Height {
		t.Fatalf("result says %dx%d, image is %v", r.Width, r.Height, b)
	}
	return img
}

func isRed(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return r > 0xc000 && g < 0x4000 && b < 0x4000
}

func isBlue(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return b > 0xc000 && g < 0x4000 && r < 0x4000
}

func TestOrientationApplied(t *testing.T) {
	src := twoTone(40, 20)
	for _, tc := range []struct {
		name          string
		data          []byte
		w, h          int
		redAt, blueAt image.Point
	}{
		{"jpeg1", withJPEGExif(encodeJPEG(t, src), exifTIFF(true, 1)), 40, 20, image.Pt(5, 10), image.Pt(35, 10)},
		// 6: rotate 90° clockwise: the left (red) half ends on top.
		{"jpeg6", withJPEGExif(encodeJPEG(t, src), exifTIFF(true, 6)), 20, 40, image.Pt(10, 5), image.Pt(10, 35)},
		// 8: rotate 90° counter-clockwise: red ends at the bottom.
		{"jpeg8", withJPEGExif(encodeJPEG(t, src), exifTIFF(false, 8)), 20, 40, image.Pt(10, 35), image.Pt(10, 5)},
		// 3: rotate 180°: red ends on the right. PNG source stays PNG.
		{"png3", withPNGExif(encodePNG(t, src), exifTIFF(false, 3)), 40, 20, image.Pt(35, 10), image.Pt(5, 10)},
		// 2: mirror horizontally.
		{"png2", withPNGExif(encodePNG(t, src), exifTIFF(true, 2)), 40, 20, image.Pt(35, 10), image.Pt(5, 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Process(context.Background(), tc.data, opts)
			if err != nil {
				t.Fatal(err)
			}
			img := decodeResult(t, r)
			if r.Width != tc.w || r.Height != tc.h {
				t.Fatalf("got %dx%d, want %dx%d", r.Width, r.Height, tc.w, tc.h)
			}
			if !isRed(img.At(tc.redAt.X, tc.redAt.Y)) || !isBlue(img.At(tc.blueAt.X, tc.blueAt.Y)) {
				t.Fatalf("pixels not where the orientation puts them: %v at %v, %v at %v",
					img.At(tc.redAt.X, tc.redAt.Y), tc.redAt, img.At(tc.blueAt.X, tc.blueAt.Y), tc.blueAt)
			}
			if bytes.Contains(r.Data, []byte("Exif")) || bytes.Contains(r.Data, []byte("eXIf")) {
				t.Fatal("metadata survived re-encoding")
			}
		})
	}
}

func TestOutputFormat(t *testing.T) {
	opaqueImg := twoTone(8, 8)
	alpha := image.NewNRGBA(image.Rect(0, 0, 8, 8))
	alpha.SetNRGBA(1, 1, color.NRGBA{10, 20, 30, 128})
	pal := image.NewPaletted(image.Rect(0, 0, 8, 8), color.Palette{color.RGBA{0, 0, 0, 255}, color.RGBA{255, 255, 255, 255}})
	palT := image.NewPaletted(image.Rect(0, 0, 8, 8), color.Palette{color.RGBA{0, 0, 0, 0}, color.RGBA{255, 255, 255, 255}})
	gifOf := func(p *image.Paletted) []byte {
		var b bytes.Buffer
		if err := gif.Encode(&b, p, nil); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	webpOpaque, err := os.ReadFile("testdata/opaque.lossy.webp")
	if err != nil {
		t.Fatal(err)
	}
	webpAlpha, err := os.ReadFile("testdata/alpha.lossless.webp")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"jpegToJPEG", "image/jpeg", encodeJPEG(t, opaqueImg)},
		{"pngToPNG", "image/png", encodePNG(t, opaqueImg)},
		{"pngAlphaToPNG", "image/png", encodePNG(t, alpha)},
		{"gifToJPEG", "image/jpeg", gifOf(pal)},
		{"gifTransparentToPNG", "image/png", gifOf(palT)},
		{"webpToJPEG", "image/jpeg", webpOpaque},
		{"webpAlphaToPNG", "image/png", webpAlpha},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Process(context.Background(), tc.data, opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.Type != tc.want {
				t.Fatalf("type %s, want %s", r.Type, tc.want)
			}
			img := decodeResult(t, r)
			if tc.want == "image/png" && tc.name != "pngToPNG" {
				if o, ok := img.(interface{ Opaque() bool }); ok && o.Opaque() {
					t.Fatal("alpha lost")
				}
			}
		})
	}
}

func TestResizeLongestSide(t *testing.T) {
	r, err := Process(context.Background(), encodeJPEG(t, twoTone(3000, 1000)), Options{MaxPixels: 1 << 30, MaxSide: 600, JPEGQuality: 80})
	if err != nil {
		t.Fatal(err)
	}
	if r.Width != 600 || r.Height != 200 {
		t.Fatalf("got %dx%d, want 600x200", r.Width, r.Height)
	}
	img := decodeResult(t, r)
	if !isRed(img.At(100, 100)) || !isBlue(img.At(500, 100)) {
		t.Fatal("resized content wrong")
	}
	small, err := Process(context.Background(), encodeJPEG(t, twoTone(30, 10)), Options{MaxPixels: 1 << 30, MaxSide: 600, JPEGQuality: 80})
	if err != nil || small.Width != 30 || small.Height != 10 {
		t.Fatalf("small images must not be enlarged: %dx%d %v", small.Width, small.Height, err)
	}
}

// bombPNG is a valid PNG header claiming w×h with no pixel data.
func bombPNG(w, h uint32) []byte {
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 6, 0, 0, 0)
	b := []byte("\x89PNG\r\n\x1a\n")
	b = append(b, pngChunk("IHDR", ihdr)...)
	b = append(b, pngChunk("IDAT", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})...)
	return append(b, pngChunk("IEND", nil)...)
}

func TestRefusals(t *testing.T) {
	if _, err := Process(context.Background(), bombPNG(100000, 100000), opts); !errors.Is(err, ErrTooManyPixels) {
		t.Fatalf("bomb: %v, want ErrTooManyPixels", err)
	}
	if _, err := Process(context.Background(), []byte("hello, I am text"), opts); !errors.Is(err, ErrNotImage) {
		t.Fatalf("text: %v, want ErrNotImage", err)
	}
	if _, err := Process(context.Background(), []byte("\x89PNG\r\n\x1a\ngarbage"), opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt: %v, want ErrCorrupt", err)
	}
	if _, err := Process(context.Background(), bombPNG(10, 10), opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("no pixel data: %v, want ErrCorrupt", err)
	}
}

func TestOrientationParsers(t *testing.T) {
	jpg := encodeJPEG(t, twoTone(4, 4))
	for _, tc := range []struct {
		name string
		f    Format
		data []byte
		want int
	}{
		{"jpegNone", JPEG, jpg, 1},
		{"jpegBig6", JPEG, withJPEGExif(jpg, exifTIFF(true, 6)), 6},
		{"jpegLittle8", JPEG, withJPEGExif(jpg, exifTIFF(false, 8)), 8},
		{"jpegOutOfRange", JPEG, withJPEGExif(jpg, exifTIFF(false, 9)), 1},
		{"pngExif", PNG, withPNGExif(encodePNG(t, twoTone(4, 4)), exifTIFF(true, 5)), 5},
		{"truncated", JPEG, withJPEGExif(jpg, exifTIFF(true, 6))[:20], 1},
	} {
		if got := Orientation(tc.f, tc.data); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

// FuzzOrientation: the EXIF parsers face the network; they must never
// panic or loop, and always answer 1..8.
func FuzzOrientation(f *testing.F) {
	jpg := encodeJPEG(f, twoTone(4, 4))
	f.Add(withJPEGExif(jpg, exifTIFF(true, 6)))
	f.Add(withPNGExif(encodePNG(f, twoTone(4, 4)), exifTIFF(false, 3)))
	f.Add([]byte("RIFF\x00\x00\x00\x00WEBPEXIF\x0e\x00\x00\x00II*\x00\x08\x00\x00\x00\x01\x00"))
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, fm := range []Format{JPEG, PNG, WebP, GIF} {
			if o := Orientation(fm, b); o < 1 || o > 8 {
				t.Fatalf("orientation %d", o)
			}
		}
		if f, ok := Sniff(b); ok {
			_ = Orientation(f, b)
		}
	})
}

// FuzzImageHeader: header checks and re-encoding face arbitrary uploads.
// Check must never panic and only fail with the package's errors; an input
// it passes must either re-encode within the size rules or be refused as
// corrupt, never panic.
func FuzzImageHeader(f *testing.F) {
	f.Add(encodePNG(f, twoTone(4, 3)))
	f.Add(encodeJPEG(f, twoTone(5, 2)))
	f.Add(bombPNG(100000, 100000))
	f.Add([]byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;"))
	f.Add([]byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00/\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00"))
	f.Add(withJPEGExif(encodeJPEG(f, twoTone(4, 4)), exifTIFF(true, 8)))
	f.Add(craftedPNG(f, 40, 30, 16, 6, 1, true))
	f.Add(hostileJPEG(16, 20, false))
	f.Add(hostileJPEG(16, 4, true))
	o := Options{MaxPixels: 64 * 64, MaxSide: 16, JPEGQuality: 80, MaxScans: 16}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := Check(b, o)
		if err != nil {
			if !errors.Is(err, ErrNotImage) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooManyPixels) && !errors.Is(err, ErrTooMuchMemory) && !errors.Is(err, ErrTooComplex) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		r, err := Process(context.Background(), b, o)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("passed the header check, then: %v", err)
			}
			return
		}
		if r.Width < 1 || r.Height < 1 || r.Width > o.MaxSide || r.Height > o.MaxSide {
			t.Fatalf("output %dx%d outside 1..%d", r.Width, r.Height, o.MaxSide)
		}
		if r.Type != "image/png" && r.Type != "image/jpeg" {
			t.Fatalf("output type %q", r.Type)
		}
	})
}
