package imaging

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
)

// ErrTooMuchMemory means decoding and re-encoding the image would take more
// memory than one image may use (Options.MaxMemory).
var ErrTooMuchMemory = errors.New("image needs too much memory to process")

// maxDim bounds each header dimension before any arithmetic: every format
// the package reads stays below it (JPEG and GIF 65535, WebP 2^24, PNG
// 2^31 by the spec but refused here), so width*height*bytes stays far from
// int64 overflow (2^24 * 2^24 * 64 < 2^63).
const maxDim = 1 << 24

// bandRows is how many source rows the resizer converts at a time.
const bandRows = 16

// fixedOverhead covers what does not grow with the image: decoder and
// encoder tables, zlib/flate state, row buffers of the PNG codec.
const fixedOverhead = 2 << 20

// Cost is what processing an image takes, from its header alone.
type Cost struct {
	Format Format
	Width  int
	Height int
	// DecodeBytes is what the decoder allocates for the source: the pixel
	// buffer at the decoded pixel format (bit depth and channels) plus the
	// decoder's own full-size buffers (progressive JPEG coefficients,
	// interlaced PNG passes, WebP lossless ARGB words).
	DecodeBytes int64
	// ProcessBytes is what resizing, orienting and encoding allocate on top.
	ProcessBytes int64
	// Scans is a JPEG's scans (0 for the other formats) and Passes their
	// work in walks over the whole image's blocks: image/jpeg walks every
	// block of a scan's components once per scan, whatever the scan holds,
	// so decoding takes Passes times the image's blocks, which the pixel
	// and memory limits bound (Check refuses Passes over Options.MaxScans).
	Scans  int
	Passes float64
}

// Bytes is the whole cost.
func (c Cost) Bytes() int64 { return addSat(c.DecodeBytes, c.ProcessBytes) }

// Estimate reads only the header and returns what processing b takes in
// memory. It fails with ErrNotImage, ErrCorrupt or ErrTooManyPixels (the
// dimensions over o.MaxPixels); ErrTooMuchMemory is for the caller to
// decide against Bytes (Check does, with o.MaxMemory).
func Estimate(b []byte, o Options) (Cost, error) {
	f, cfg, err := header(b, o)
	if err != nil {
		return Cost{}, err
	}
	w, h := int64(cfg.Width), int64(cfg.Height)
	var dec int64
	var info jpegInfo
	switch f {
	case PNG:
		dec, err = pngDecodeBytes(b, w, h)
	case JPEG:
		dec, info, err = jpegDecodeBytes(b, w, h)
	case GIF:
		dec = w * h // one *image.Paletted frame, bounded by the screen
	case WebP:
		dec = webpDecodeBytes(cfg.ColorModel, w, h)
	}
	if err != nil {
		return Cost{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	c := Cost{Format: f, Width: cfg.Width, Height: cfg.Height, DecodeBytes: dec,
		Scans: info.scans, Passes: info.passes()}
	c.ProcessBytes = processBytes(w, h, dec/(w*h)+1, o.MaxSide, Orientation(f, b) > 1)
	return c, nil
}

// processBytes is what Process allocates after decoding a w×h image of
// about bpp bytes a pixel.
func processBytes(w, h, bpp int64, maxSide int, oriented bool) int64 {
	ow, oh := w, h
	n := int64(fixedOverhead)
	if nw, nh, ok := target(int(w), int(h), maxSide); ok {
		ow, oh = int64(nw), int64(nh)
		n += ow * oh * 4      // the resized *image.RGBA
		n += w * bandRows * 4 // the converted band of source rows
		n += ow * 4 * 4 * 3   // float32 row accumulators
		n += (w + h) * 4 * 8  // column and row weights
		bpp = 4
	}
	if oriented {
		n += 2 * ow * oh * 4 // toRGBA copy and the turned image
		bpp = 4
	}
	// The encoded output grows in a bytes.Buffer that doubles: at worst
	// twice the raw pixels (PNG of noise is a little larger than raw).
	n += 2 * ow * oh * bpp
	return n
}

// header sniffs the format and reads the dimensions, bounded.
func header(b []byte, o Options) (Format, image.Config, error) {
	f, ok := Sniff(b)
	if !ok {
		return "", image.Config{}, ErrNotImage
	}
	cfg, err := decodeConfig(f, b)
	if err != nil {
		return f, cfg, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return f, cfg, fmt.Errorf("%w: %dx%d", ErrCorrupt, cfg.Width, cfg.Height)
	}
	if cfg.Width > maxDim || cfg.Height > maxDim || int64(cfg.Width)*int64(cfg.Height) > o.MaxPixels {
		return f, cfg, fmt.Errorf("%w: %dx%d is over %d pixels", ErrTooManyPixels, cfg.Width, cfg.Height, o.MaxPixels)
	}
	return f, cfg, nil
}

// pngDecodeBytes follows image/png: the decoded type by colour type and bit
// depth (a tRNS chunk turns grey and truecolour into NRGBA/NRGBA64), plus
// the pass images of an interlaced file, plus two rows of filter state.
func pngDecodeBytes(b []byte, w, h int64) (int64, error) {
	if len(b) < 33 || string(b[12:16]) != "IHDR" {
		return 0, errors.New("png: no IHDR")
	}
	depth, ctype, interlace := b[24], b[25], b[28]
	trns := pngHasChunk(b, "tRNS")
	var bpp, rowBits int64
	switch ctype {
	case 0: // grey
		bpp, rowBits = 1, int64(depth)
		if depth == 16 {
			bpp = 2
		}
		if trns {
			bpp *= 4
		}
	case 2: // truecolour
		bpp, rowBits = 4, 3*int64(depth)
		if depth == 16 {
			bpp = 8
		}
	case 3: // paletted
		bpp, rowBits = 1, int64(depth)
	case 4: // grey + alpha
		bpp, rowBits = 4, 2*int64(depth)
		if depth == 16 {
			bpp = 8
		}
	case 6: // truecolour + alpha
		bpp, rowBits = 4, 4*int64(depth)
		if depth == 16 {
			bpp = 8
		}
	default:
		return 0, fmt.Errorf("png: colour type %d", ctype)
	}
	if depth == 0 || depth > 16 {
		return 0, fmt.Errorf("png: bit depth %d", depth)
	}
	n := w * h * bpp
	if interlace == 1 {
		n *= 2 // the seven pass images, then the final one
	}
	n += 2 * (w*rowBits/8 + 2) // current and previous filtered rows
	return n, nil
}

// pngHasChunk reports whether a chunk of typ comes before the image data.
func pngHasChunk(b []byte, typ string) bool {
	i := 8
	for i+8 <= len(b) {
		n := int64(binary.BigEndian.Uint32(b[i : i+4]))
		t := string(b[i+4 : i+8])
		if t == typ {
			return true
		}
		if t == "IDAT" || n > int64(len(b)-i-12) {
			return false
		}
		i += 12 + int(n)
	}
	return false
}

// jpegDecodeBytes follows image/jpeg: one byte per sample of each
// component plane (subsampled planes smaller, rounded up to whole MCUs),
// 64 int32 coefficients per block of a progressive file, and the RGBA or
// CMYK image some colour transforms convert into. It also returns what
// the walk over the markers found.
func jpegDecodeBytes(b []byte, w, h int64) (int64, jpegInfo, error) {
	info, err := jpegHeader(b)
	if err != nil {
		return 0, info, err
	}
	hmax, vmax := int64(1), int64(1)
	for _, c := range info.comps {
		hmax, vmax = max(hmax, int64(c.h)), max(vmax, int64(c.v))
	}
	mcuW, mcuH := (w+8*hmax-1)/(8*hmax), (h+8*vmax-1)/(8*vmax)
	var samples int64
	for _, c := range info.comps {
		samples += mcuW * int64(c.h) * 8 * mcuH * int64(c.v) * 8
	}
	n := samples
	if info.progressive {
		n += samples * 4 // []block, 64 int32 per 64 samples
	}
	switch len(info.comps) {
	case 3:
		if info.rgb {
			n += w * h * 4 // converted to *image.RGBA
		}
	case 4:
		n += w * h * 4 // converted to *image.CMYK
	}
	return n, info, nil
}

type jpegComp struct{ id, h, v byte }

type jpegInfo struct {
	comps       []jpegComp
	progressive bool
	rgb         bool
	scans       int // start-of-scan markers to the end of the image
	// scanBlocks is the blocks per MCU the scans walk, summed over the
	// scans: image/jpeg walks every MCU in each scan and, in it, the h×v
	// blocks of each of the scan's components; mcuBlocks is that of a scan
	// of every component. scanBlocks/mcuBlocks is the scans' work in
	// walks over the whole image.
	scanBlocks, mcuBlocks int64
}

// passes is the scans' work in walks over the whole image: a scan of
// every component counts 1, a scan of one of three equal components 1/3.
func (j jpegInfo) passes() float64 {
	if j.mcuBlocks == 0 {
		return 0
	}
	return float64(j.scanBlocks) / float64(j.mcuBlocks)
}

// jpegHeader walks every marker of the file: the frame header and the
// tables before the first scan, then each scan's header, stepping over its
// entropy-coded data, to the end of the image. It weighs the scans because
// image/jpeg walks every block of a scan's components whatever the scan's
// data holds (a refinement scan of end-of-block runs is a few dozen bytes
// for 620,000 blocks), so the scans, not the bytes, are a decode's work.
// Every length is checked against the data (this parser faces the
// network); a segment cut short after the first scan ends the walk, as it
// ends the decoder's.
func jpegHeader(b []byte) (jpegInfo, error) {
	var s jpegScan
	for i := 2; i+4 <= len(b); {
		m, skip := jpegMarker(b, i)
		if skip > 0 {
			i += skip
			continue
		}
		if m == 0xD9 { // end of image
			break
		}
		n := int(binary.BigEndian.Uint16(b[i+2 : i+4]))
		if n < 2 || i+2+n > len(b) {
			if s.info.scans > 0 {
				break
			}
			return s.info, errors.New("jpeg: truncated segment")
		}
		seg := b[i+4 : i+2+n]
		i += 2 + n
		if m == 0xDA { // start of scan
			s.scan(seg)
			i = entropyEnd(b, i)
			continue
		}
		if err := s.segment(m, seg); err != nil {
			return s.info, err
		}
	}
	return s.finish()
}

// entropyEnd is where the entropy-coded data starting at b[i] ends: the
// first marker that is neither a stuffed 0xFF (FF 00), a restart marker
// (FF D0-D7) inside the data, nor a fill byte (FF FF), or len(b). These
// are the markers image/jpeg stops at between scans.
func entropyEnd(b []byte, i int) int {
	for i+1 < len(b) {
		k := bytes.IndexByte(b[i:len(b)-1], 0xFF)
		if k < 0 {
			break
		}
		i += k
		if m := b[i+1]; m != 0x00 && m != 0xFF && (m < 0xD0 || m > 0xD7) {
			return i
		}
		i++
	}
	return len(b)
}

// jpegMarker reads the marker at b[i] (i+1 < len(b)), or says how many
// bytes to step over: extraneous bytes (skipped, as image/jpeg does), fill
// bytes, and markers without a segment.
func jpegMarker(b []byte, i int) (m byte, skip int) {
	if b[i] != 0xFF {
		return 0, 1
	}
	m = b[i+1]
	switch {
	case m == 0xFF:
		return m, 1
	case m == 0xD8 || m >= 0xD0 && m <= 0xD7 || m == 0x01:
		return m, 2
	}
	return m, 0
}

// jpegScan is what the markers read so far said.
type jpegScan struct {
	info           jpegInfo
	sof            bool // a frame header was read
	jfif           bool
	adobe          bool
	adobeTransform byte
}

// segment reads one marker segment (seg: its data after the length).
func (s *jpegScan) segment(m byte, seg []byte) error {
	switch {
	case m == 0xE0 && bytes.HasPrefix(seg, []byte("JFIF\x00")):
		s.jfif = true
	case m == 0xEE && len(seg) >= 12 && bytes.HasPrefix(seg, []byte("Adobe")):
		s.adobe, s.adobeTransform = true, seg[11]
	case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC:
		return s.frame(m, seg)
	}
	return nil
}

// frame reads a start-of-frame segment: the components and their sampling.
func (s *jpegScan) frame(m byte, seg []byte) error {
	if s.sof {
		return errors.New("jpeg: more than one frame")
	}
	s.sof = true
	s.info.progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE
	if len(seg) < 6 {
		return errors.New("jpeg: short frame header")
	}
	nc := int(seg[5])
	if nc < 1 || nc > 4 || len(seg) < 6+3*nc {
		return errors.New("jpeg: bad component count")
	}
	for k := 0; k < nc; k++ {
		c := seg[6+3*k : 9+3*k]
		hf, vf := c[1]>>4, c[1]&0x0F
		if hf < 1 || hf > 4 || vf < 1 || vf > 4 {
			return errors.New("jpeg: bad sampling factor")
		}
		s.info.comps = append(s.info.comps, jpegComp{id: c[0], h: hf, v: vf})
		s.info.mcuBlocks += int64(hf) * int64(vf)
	}
	return nil
}

// scan reads a start-of-scan header: the components the scan walks.
// A selector naming no component of the frame weighs nothing (image/jpeg
// stops there).
func (s *jpegScan) scan(seg []byte) {
	s.info.scans++
	if len(seg) < 1 {
		return
	}
	ns := int(seg[0])
	for k := 0; k < ns && 1+2*k < len(seg); k++ {
		for _, c := range s.info.comps {
			if c.id == seg[1+2*k] {
				s.info.scanBlocks += int64(c.h) * int64(c.v)
				break
			}
		}
	}
}

// finish tells what the walk found: whether three components are RGB
// rather than YCbCr follows image/jpeg (JFIF, then Adobe's transform, then
// the component ids).
func (s *jpegScan) finish() (jpegInfo, error) {
	if !s.sof {
		return s.info, errors.New("jpeg: no frame header")
	}
	if len(s.info.comps) == 3 {
		switch {
		case s.jfif:
		case s.adobe:
			s.info.rgb = s.adobeTransform == 0
		default:
			c := s.info.comps
			s.info.rgb = c[0].id == 'R' && c[1].id == 'G' && c[2].id == 'B'
		}
	}
	return s.info, nil
}

// webpDecodeBytes follows golang.org/x/image/webp: lossy is YCbCr 4:2:0
// (rounded up to macroblocks); lossless decodes into one uint32 a pixel
// (and one more for a colour-indexing transform) before the NRGBA image;
// lossy with alpha adds the alpha plane, itself decoded losslessly.
func webpDecodeBytes(m color.Model, w, h int64) int64 {
	mbw, mbh := (w+15)/16*16, (h+15)/16*16
	yuv := mbw*mbh + 2*(mbw/2)*(mbh/2)
	switch m {
	case color.NRGBAModel: // VP8L
		return w * h * (4 + 4 + 4)
	case color.NYCbCrAModel:
		return yuv + w*h*(1+4+4+4)
	default:
		return yuv
	}
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
