package imaging

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// jpegBits writes entropy-coded bits, MSB first, stuffing a 0x00 after
// every 0xFF byte.
type jpegBits struct {
	out  *bytes.Buffer
	acc  byte
	nacc uint
}

func (w *jpegBits) put(v uint32, n uint) {
	for i := int(n) - 1; i >= 0; i-- {
		w.acc = w.acc<<1 | byte(v>>uint(i)&1)
		if w.nacc++; w.nacc == 8 {
			w.out.WriteByte(w.acc)
			if w.acc == 0xFF {
				w.out.WriteByte(0x00)
			}
			w.acc, w.nacc = 0, 0
		}
	}
}

// pad ends a scan's data with 1 bits to a byte boundary.
func (w *jpegBits) pad() {
	for w.nacc != 0 {
		w.put(1, 1)
	}
}

func jpegSegment(out *bytes.Buffer, marker byte, data []byte) {
	out.Write([]byte{0xFF, marker})
	_ = binary.Write(out, binary.BigEndian, uint16(len(data)+2))
	out.Write(data)
}

// hostileJPEG is issue 43's attack: a grayscale side×side progressive JPEG
// whose DC scan is followed by refinement scans of the AC band (Ah=1)
// holding only end-of-block runs of 32767 blocks (EOB14): a few dozen bytes
// a scan, yet image/jpeg walks every block in each. With baseline the
// frame is sequential (SOF0) and every scan codes each block in two bits
// (DC difference 0, end of block): image/jpeg decodes each scan again over
// the same blocks.
func hostileJPEG(side, scans int, baseline bool) []byte {
	var out bytes.Buffer
	out.Write([]byte{0xFF, 0xD8})
	q := make([]byte, 65) // table 0, 8-bit: all ones
	for i := 1; i < len(q); i++ {
		q[i] = 1
	}
	jpegSegment(&out, 0xDB, q)
	sof := byte(0xC2)
	if baseline {
		sof = 0xC0
	}
	jpegSegment(&out, sof, []byte{8, byte(side >> 8), byte(side), byte(side >> 8), byte(side), 1, 1, 0x11, 0})
	// DC table 0: one 1-bit code, category 0; AC table 0: one 1-bit code,
	// EOB14 (progressive) or EOB (baseline).
	eob := byte(0xE0)
	if baseline {
		eob = 0x00
	}
	dht := append([]byte{0x00, 1}, make([]byte, 15)...)
	dht = append(dht, 0x00, 0x10, 1)
	dht = append(dht, make([]byte, 15)...)
	jpegSegment(&out, 0xC4, append(dht, eob))
	blocks := ((side + 7) / 8) * ((side + 7) / 8)
	w := &jpegBits{out: &out}
	if baseline {
		for range 1 + scans {
			jpegSegment(&out, 0xDA, []byte{1, 1, 0x00, 0, 63, 0})
			for range blocks {
				w.put(0, 2)
			}
			w.pad()
		}
		out.Write([]byte{0xFF, 0xD9})
		return out.Bytes()
	}
	jpegSegment(&out, 0xDA, []byte{1, 1, 0x00, 0, 0, 0}) // DC first scan
	for range blocks {
		w.put(0, 1) // difference 0
	}
	w.pad()
	for range scans {
		jpegSegment(&out, 0xDA, []byte{1, 1, 0x00, 1, 63, 0x10}) // AC 1-63, Ah=1 Al=0
		for left := blocks; left > 0; {
			run := min(left, 1<<15-1)
			w.put(0, 1)                  // EOB14
			w.put(uint32(run-1<<14), 14) // run = 2^14 + these bits
			left -= run
		}
		w.pad()
	}
	out.Write([]byte{0xFF, 0xD9})
	return out.Bytes()
}

// The attack decodes (so image/jpeg takes it as a valid image), and the
// walk over its markers sees every scan.
func TestHostileJPEGIsAValidImage(t *testing.T) {
	b := hostileJPEG(64, 400, false)
	img, err := decode(context.Background(), JPEG, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, 64, 64) {
		t.Fatalf("bounds %v", got)
	}
	c, err := Estimate(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	if c.Scans != 401 || c.Passes != 401 {
		t.Fatalf("scans %d, passes %.2f, want 401 and 401", c.Scans, c.Passes)
	}
	if _, err := decode(context.Background(), JPEG, hostileJPEG(64, 400, true)); err != nil {
		t.Fatalf("baseline of empty scans: %v", err)
	}
}

// What real encoders write is admitted, with room to spare: libjpeg's
// progressive scripts (cjpeg -progressive, ImageMagick -interlace Plane or
// JPEG, jpegtran -progressive) walk the blocks at most 6 times (a grey
// image's 6 full scans; 18 scans of one of four CMYK components), and Go's
// encoder writes one baseline scan. testdata/progressive/README.md says how
// the files were made.
func TestJPEGScansOfRealEncoders(t *testing.T) {
	o := opts
	o.MaxScans = 16 // FILES_IMAGE_MAX_SCANS's default
	want := map[string]struct {
		scans  int
		passes float64
	}{
		"cjpeg-baseline.jpg":            {1, 1},
		"cjpeg-progressive-420.jpg":     {10, 2 + 4*4.0/6 + 4*1.0/6}, // 2 DC scans, Y's 4 AC scans, 2 each for Cb and Cr
		"cjpeg-progressive-444.jpg":     {10, 2 + 8.0/3},
		"cjpeg-progressive-gray.jpg":    {6, 6},
		"cjpeg-progressive-rgb.jpg":     {14, 6},
		"magick-plane-420.jpg":          {10, 2 + 4*4.0/6 + 4*1.0/6},
		"magick-plane-cmyk.jpg":         {18, 6},
		"jpegtran-progressive-cmyk.jpg": {18, 6},
	}
	files, _ := filepath.Glob("testdata/progressive/*.jpg")
	if len(files) != len(want) {
		t.Fatalf("%d files in testdata/progressive, want %d", len(files), len(want))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		w := want[filepath.Base(f)]
		c, err := Check(b, o)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if c.Scans != w.scans || c.Passes < w.passes-1e-9 || c.Passes > w.passes+1e-9 || c.Passes > 6 {
			t.Errorf("%s: %d scans, %.3f passes, want %d and %.3f", f, c.Scans, c.Passes, w.scans, w.passes)
		}
		if _, err := Process(context.Background(), b, o); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, img := range []image.Image{twoTone(300, 200), image.NewGray(image.Rect(0, 0, 300, 200))} {
		c, err := Check(encodeJPEG(t, img), o)
		if err != nil || c.Scans != 1 || c.Passes != 1 {
			t.Errorf("Go's encoder: %d scans, %.2f passes, %v; want 1, 1", c.Scans, c.Passes, err)
		}
	}
}

// The attack is refused from its markers, whatever its size, before any
// decoding; so is a sequential file of many scans.
func TestHostileJPEGRefusedByScans(t *testing.T) {
	o := opts
	o.MaxScans = 16
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"6300x6300 progressive, 400 refinements", hostileJPEG(6300, 400, false)},
		{"64x64 progressive, 400 refinements", hostileJPEG(64, 400, false)},
		{"progressive, 16 refinements", hostileJPEG(64, 16, false)},
		{"baseline, 400 empty scans", hostileJPEG(64, 400, true)},
	} {
		start := time.Now()
		_, err := Check(tc.b, o)
		if !errors.Is(err, ErrTooComplex) {
			t.Errorf("%s: %v, want ErrTooComplex", tc.name, err)
		}
		if _, err := Process(context.Background(), tc.b, o); !errors.Is(err, ErrTooComplex) {
			t.Errorf("%s: Process: %v, want ErrTooComplex", tc.name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refused after %v", tc.name, d)
		}
	}
	// At the bound: the DC scan and 15 refinements are 16 walks.
	if c, err := Check(hostileJPEG(64, 15, false), o); err != nil || c.Passes != 16 {
		t.Errorf("16 walks: %.2f passes, %v; want admitted", c.Passes, err)
	}
}

// The walk is not fooled by the bytes of entropy-coded data that look
// like markers (a stuffed FF 00, restart markers, fill bytes), nor does it
// count a scan marker inside a segment it steps over (an EXIF thumbnail).
func TestJPEGScanWalkSkipsWhatIsNotAScan(t *testing.T) {
	base := hostileJPEG(16, 2, false) // 3 scans
	sos := bytes.LastIndex(base, []byte{0xFF, 0xDA})
	end := len(base) - 2
	junk := []byte{0x12, 0xFF, 0x00, 0xFF, 0xD3, 0x34, 0xFF, 0xFF, 0xD5, 0x00}
	withJunk := append(append(append([]byte{}, base[:end]...), junk...), base[end:]...)
	thumb := append([]byte{}, base[:2]...)
	jpegThumb := new(bytes.Buffer)
	jpegSegment(jpegThumb, 0xE1, append([]byte("Exif\x00\x00"), hostileJPEG(8, 40, false)...))
	thumb = append(append(thumb, jpegThumb.Bytes()...), base[2:]...)
	for name, b := range map[string][]byte{"plain": base, "junk in the data": withJunk, "thumbnail": thumb} {
		info, err := jpegHeader(b)
		if err != nil || info.scans != 3 {
			t.Errorf("%s: %d scans, %v; want 3", name, info.scans, err)
		}
	}
	if sos < 0 {
		t.Fatal("no scan")
	}
	// A file cut inside its last scan header still counts the scans before.
	if info, err := jpegHeader(base[:sos+3]); err != nil || info.scans != 2 {
		t.Errorf("cut: %d scans, %v; want 2", info.scans, err)
	}
}
