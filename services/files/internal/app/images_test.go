package app

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	_ "image/gif"
	"image/jpeg"
	"image/png"
	"net/http"
	"os"
	"strings"
	"testing"
)

func solid(w, h int, c color.Color) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, c)
		}
	}
	return img
}

func jpegBytes(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func pngBytes(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// withOrientation adds an EXIF APP1 segment with the orientation tag.
func withOrientation(jpg []byte, o uint16) []byte {
	tiff := []byte("MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01")
	tiff = binary.BigEndian.AppendUint16(tiff, o)
	tiff = append(tiff, 0, 0, 0, 0, 0, 0)
	seg := append([]byte("Exif\x00\x00"), tiff...)
	out := []byte{0xFF, 0xD8, 0xFF, 0xE1, byte((len(seg) + 2) >> 8), byte(len(seg) + 2)}
	return append(append(out, seg...), jpg[2:]...)
}

// pngClaiming is a PNG whose header claims w×h pixels and holds almost no data.
func pngClaiming(w, h uint32) []byte {
	chunk := func(typ string, data []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
		b = append(append(b, typ...), data...)
		return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, w), h)
	ihdr = append(ihdr, 8, 6, 0, 0, 0)
	b := append([]byte("\x89PNG\r\n\x1a\n"), chunk("IHDR", ihdr)...)
	b = append(b, chunk("IDAT", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})...)
	return append(b, chunk("IEND", nil)...)
}

func uploadImage(t *testing.T, h *harness, tok string, data []byte) map[string]any {
	t.Helper()
	r := h.upload("/upload/image", tok, fileField("pic", data))
	wantStatus(t, r, http.StatusCreated)
	m := r.json(t)
	if m["msg"] == nil {
		t.Fatal("no msg")
	}
	return m["image"].(map[string]any)
}

func TestImages(t *testing.T) {
	h := start(t, map[string]string{"FILES_IMAGE_MAX_SIDE": "100", "FILES_IMAGE_MAX_BYTES": "512KiB"}, hooks{})
	tok := h.user("alice")

	translucent := solid(10, 10, color.NRGBA{200, 0, 0, 255})
	translucent.SetNRGBA(0, 0, color.NRGBA{0, 0, 0, 0})
	webp, err := os.ReadFile("../imaging/testdata/opaque.lossy.webp")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, typ string
		data      []byte
		w, h      int
	}{
		{"upload201PNGAlphaKept", "image/png", pngBytes(t, translucent), 10, 10},
		{"upload201JPEGOrientation6", "image/jpeg", withOrientation(jpegBytes(t, solid(40, 20, color.White)), 6), 20, 40},
		{"upload201Resized", "image/jpeg", jpegBytes(t, solid(300, 100, color.White)), 100, 33},
		{"upload201WebPToJPEG", "image/jpeg", webp, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := uploadImage(t, h, tok, tc.data)
			id := img["id"].(string)
			if img["type"] != tc.typ || img["url"] != "https://files.example.test/images/"+id {
				t.Fatalf("image %v", img)
			}
			if tc.w > 0 && (img["width"] != float64(tc.w) || img["height"] != float64(tc.h)) {
				t.Fatalf("dimensions %vx%v, want %dx%d", img["width"], img["height"], tc.w, tc.h)
			}

			// Public: an anonymous caller (through the gateway) gets it.
			r := h.get("/images/"+id, h.anonymous(), nil)
			wantStatus(t, r, http.StatusOK)
			if r.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" ||
				r.Header.Get("X-Content-Type-Options") != "nosniff" ||
				r.Header.Get("Content-Type") != tc.typ ||
				r.ContentLength != int64(img["size"].(float64)) {
				t.Fatalf("headers %v", r.Header)
			}
			got, format, err := image.Decode(bytes.NewReader(r.body))
			if err != nil || "image/"+format != tc.typ {
				t.Fatalf("served bytes: %v %s", err, format)
			}
			if float64(got.Bounds().Dx()) != img["width"] || float64(got.Bounds().Dy()) != img["height"] {
				t.Fatalf("served %v, record %vx%v", got.Bounds(), img["width"], img["height"])
			}
			if bytes.Contains(r.body, []byte("Exif")) {
				t.Fatal("EXIF kept")
			}
			if tc.typ == "image/png" {
				if _, _, _, a := got.At(0, 0).RGBA(); a != 0 {
					t.Fatalf("transparent pixel has alpha %d", a)
				}
			}
			r = h.get("/images/"+id, h.anonymous(), map[string]string{"If-None-Match": r.Header.Get("ETag")})
			wantStatus(t, r, http.StatusNotModified)
		})
	}

	img := uploadImage(t, h, tok, pngBytes(t, solid(4, 4, color.Black)))
	id := img["id"].(string)
	t.Run("images401NoToken", func(t *testing.T) {
		wantError(t, h.get("/images/"+id, "", nil), http.StatusUnauthorized, "identity_required")
	})
	t.Run("download400ImageID", func(t *testing.T) {
		for _, who := range []string{tok, h.user("bob")} {
			m := wantError(t, h.get("/download/file/"+id, who, nil), http.StatusBadRequest, "image_not_downloadable")
			if m["sentId"] != id || m["err"] == nil {
				t.Fatalf("body %v", m)
			}
		}
	})
	t.Run("retrieve200ImageURL", func(t *testing.T) {
		m := h.get("/retrieve/file/"+id, tok, nil).json(t)
		if m["downloadUrl"] != img["url"] {
			t.Fatalf("downloadUrl %v", m["downloadUrl"])
		}
		wantStatus(t, h.get("/retrieve/file/"+id, h.user("bob"), nil), http.StatusNotFound)
	})
	t.Run("images404FileID", func(t *testing.T) {
		f := h.uploadFile(tok, "a.txt", text)
		m := wantError(t, h.get("/images/"+f["id"].(string), h.anonymous(), nil), http.StatusNotFound, "file_not_found")
		if m["sentId"] != f["id"] {
			t.Fatalf("body %v", m)
		}
	})
}

func TestImageRefusals(t *testing.T) {
	h := start(t, map[string]string{"FILES_IMAGE_MAX_BYTES": "64KiB", "FILES_IMAGE_MAX_PIXELS": "1000000"}, hooks{})
	tok := h.user("u")
	for _, tc := range []struct {
		name   string
		data   []byte
		status int
		code   string
	}{
		{"upload415TextFile", []byte("just some text, not an image\n"), http.StatusUnsupportedMediaType, "unsupported_image"},
		{"upload415PDF", []byte("%PDF-1.4\n%...."), http.StatusUnsupportedMediaType, "unsupported_image"},
		{"upload422PNGClaims100000x100000", pngClaiming(100000, 100000), http.StatusUnprocessableEntity, "image_too_many_pixels"},
		{"upload422OverConfiguredPixels", pngClaiming(1001, 1000), http.StatusUnprocessableEntity, "image_too_many_pixels"},
		{"upload422Corrupt", []byte("\x89PNG\r\n\x1a\n" + strings.Repeat("garbage", 20)), http.StatusUnprocessableEntity, "invalid_image"},
		{"upload413TooManyBytes", append(jpegBytes(t, solid(8, 8, color.White)), make([]byte, 70<<10)...), http.StatusRequestEntityTooLarge, "file_too_large"},
		{"upload400Empty", nil, http.StatusBadRequest, "empty_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, h.upload("/upload/image", tok, fileField("x.png", tc.data)), tc.status, tc.code)
			h.assertNothingStored(t)
		})
	}
}

func TestImageHead(t *testing.T) {
	h := start(t, nil, hooks{})
	img := uploadImage(t, h, h.user("u"), jpegBytes(t, solid(8, 8, color.White)))
	r := h.do(http.MethodHead, "/images/"+img["id"].(string), h.anonymous(), nil, nil)
	wantStatus(t, r, http.StatusOK)
	if r.ContentLength != int64(img["size"].(float64)) || len(r.body) != 0 {
		t.Fatalf("HEAD: length %d, body %d bytes", r.ContentLength, len(r.body))
	}
}
