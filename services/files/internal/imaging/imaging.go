// Package imaging re-encodes uploaded images for display: it recognises
// JPEG, PNG, GIF and WebP by their content, refuses decompression bombs
// from the header before decoding (the dimensions, and the bytes decoding
// and re-encoding take at the image's bit depth and channels: Estimate),
// applies the EXIF orientation, drops every piece of metadata, bounds the
// longest side and encodes JPEG (opaque images) or PNG (PNG sources and
// anything with transparency). The work of a decode is bounded too: a
// JPEG's scans are counted from its markers before decoding (MaxScans),
// and Process stops when its context ends, at the decoder's next read of
// the input, between bands of the resize and at the encoder's next write.
package imaging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"

	"golang.org/x/image/webp"
)

// Format is a recognised input format.
type Format string

// Input formats.
const (
	JPEG Format = "jpeg"
	PNG  Format = "png"
	GIF  Format = "gif"
	WebP Format = "webp"
)

// Errors.
var (
	ErrNotImage      = errors.New("not a JPEG, PNG, GIF or WebP image")
	ErrTooManyPixels = errors.New("image has too many pixels")
	ErrCorrupt       = errors.New("image data is corrupt")
	// ErrTooComplex means decoding would take more work than one image may:
	// a JPEG whose scans walk its blocks more than Options.MaxScans times.
	ErrTooComplex = errors.New("image needs too much work to decode")
)

// Options bound and tune re-encoding.
type Options struct {
	MaxPixels int64 // width*height allowed in the header
	// MaxMemory bounds the bytes decoding and re-encoding one image may
	// allocate, as Estimate counts them from the header; 0: no bound.
	MaxMemory int64
	// MaxScans bounds a JPEG's scans, counted as walks over the whole
	// image's blocks (Cost.Passes); 0: no bound.
	MaxScans    int
	MaxSide     int // longest side of the output
	JPEGQuality int // 1..100
}

// Result is a re-encoded image.
type Result struct {
	Data   []byte
	Type   string // image/jpeg or image/png
	Width  int
	Height int
}

// Sniff recognises the format from the magic bytes.
func Sniff(b []byte) (Format, bool) {
	switch {
	case len(b) >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF:
		return JPEG, true
	case len(b) >= 8 && string(b[:8]) == "\x89PNG\r\n\x1a\n":
		return PNG, true
	case len(b) >= 6 && (string(b[:6]) == "GIF87a" || string(b[:6]) == "GIF89a"):
		return GIF, true
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return WebP, true
	}
	return "", false
}

func decodeConfig(f Format, b []byte) (image.Config, error) {
	r := bytes.NewReader(b)
	switch f {
	case JPEG:
		return jpeg.DecodeConfig(r)
	case PNG:
		return png.DecodeConfig(r)
	case GIF:
		return gif.DecodeConfig(r)
	default:
		return webp.DecodeConfig(r)
	}
}

// decode decodes b, reading it through ctxReader so that the decode ends
// at its next read once ctx is done.
func decode(ctx context.Context, f Format, b []byte) (image.Image, error) {
	r := &ctxReader{ctx: ctx, r: bytes.NewReader(b)}
	switch f {
	case JPEG:
		return jpeg.Decode(r)
	case PNG:
		return png.Decode(r)
	case GIF:
		return gif.Decode(r) // first frame; animation is dropped
	default:
		return webp.Decode(r)
	}
}

// Check reads only the header: the format must be known, the declared
// dimensions within o.MaxPixels and the memory processing takes (Estimate)
// within o.MaxMemory and a JPEG's scans within o.MaxScans. It is what
// stands between a small upload and a huge allocation or a long decode.
func Check(b []byte, o Options) (Cost, error) {
	c, err := Estimate(b, o)
	if err != nil {
		return c, err
	}
	if o.MaxMemory > 0 && c.Bytes() > o.MaxMemory {
		return c, fmt.Errorf("%w: %dx%d needs %d bytes, over %d", ErrTooMuchMemory, c.Width, c.Height, c.Bytes(), o.MaxMemory)
	}
	if o.MaxScans > 0 && c.Passes > float64(o.MaxScans) {
		return c, fmt.Errorf("%w: %d scans walk the %dx%d image's blocks %.1f times, over %d", ErrTooComplex, c.Scans, c.Width, c.Height, c.Passes, o.MaxScans)
	}
	return c, nil
}

// Process re-encodes b. See the package comment for the rules. Once ctx is
// done it stops at the next read, band or write and returns
// context.Cause(ctx).
func Process(ctx context.Context, b []byte, o Options) (Result, error) {
	c, err := Check(b, o)
	if err != nil {
		return Result{}, err
	}
	f := c.Format
	orientation := Orientation(f, b)
	src, err := decode(ctx, f, b)
	if ctx.Err() != nil {
		return Result{}, context.Cause(ctx)
	}
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if sb := src.Bounds(); sb.Dx() > c.Width || sb.Dy() > c.Height {
		return Result{}, fmt.Errorf("%w: decoded size differs from the header", ErrCorrupt)
	}
	asPNG := f == PNG || !opaque(src)

	img, err := resize(ctx, src, o.MaxSide)
	if err != nil {
		return Result{}, err
	}
	if orientation > 1 {
		img = orient(toRGBA(img), orientation)
	}

	var buf bytes.Buffer
	w := &ctxWriter{ctx: ctx, w: &buf}
	res := Result{Width: img.Bounds().Dx(), Height: img.Bounds().Dy()}
	if asPNG {
		res.Type = "image/png"
		enc := png.Encoder{CompressionLevel: png.DefaultCompression}
		err = enc.Encode(w, img)
	} else {
		res.Type = "image/jpeg"
		q := o.JPEGQuality
		if q < 1 || q > 100 {
			q = 82
		}
		err = jpeg.Encode(w, img, &jpeg.Options{Quality: q})
	}
	if ctx.Err() != nil {
		return Result{}, context.Cause(ctx)
	}
	if err != nil {
		return Result{}, err
	}
	res.Data = buf.Bytes()
	return res, nil
}

// ctxReader ends a decode at its next read once ctx is done: the decoders
// take no context but read their input as they go, image/jpeg between the
// blocks of a scan. A read returns at most ctxReadChunk bytes, so the
// decoder comes back often: a refinement scan of end-of-block runs over
// 620,000 blocks is 40-60 bytes, and image/jpeg would otherwise read 4 KiB
// at once, dozens of such scans (seconds of work) between two checks.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

// ctxReadChunk bounds one read of a decoder: less than the smallest scan
// that walks a whole large image, so that at most one scan's work runs
// between two checks. Tens of thousands of extra reads for a 20 MiB file
// cost a few milliseconds.
const ctxReadChunk = 32

func (r *ctxReader) Read(p []byte) (int, error) {
	if r.ctx.Err() != nil {
		return 0, context.Cause(r.ctx)
	}
	if len(p) > ctxReadChunk {
		p = p[:ctxReadChunk]
	}
	return r.r.Read(p)
}

// ctxWriter ends an encode at its next write once ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (w *ctxWriter) Write(p []byte) (int, error) {
	if w.ctx.Err() != nil {
		return 0, context.Cause(w.ctx)
	}
	return w.w.Write(p)
}

// opaque reports whether every pixel is fully opaque.
func opaque(img image.Image) bool {
	if o, ok := img.(interface{ Opaque() bool }); ok {
		return o.Opaque()
	}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if _, _, _, a := img.At(x, y).RGBA(); a != 0xffff {
				return false
			}
		}
	}
	return true
}

func atLeast1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

func toRGBA(img image.Image) *image.RGBA {
	if r, ok := img.(*image.RGBA); ok && r.Bounds().Min == (image.Point{}) {
		return r
	}
	b := img.Bounds()
	dst := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(dst, dst.Bounds(), img, b.Min, draw.Src)
	return dst
}

// orient turns an image stored with EXIF orientation o (2..8) upright.
func orient(src *image.RGBA, o int) *image.RGBA {
	w, h := src.Bounds().Dx(), src.Bounds().Dy()
	dw, dh := w, h
	if o >= 5 {
		dw, dh = h, w
	}
	dst := image.NewRGBA(image.Rect(0, 0, dw, dh))
	for sy := 0; sy < h; sy++ {
		row := src.Pix[sy*src.Stride : sy*src.Stride+4*w]
		for sx := 0; sx < w; sx++ {
			var dx, dy int
			switch o {
			case 2:
				dx, dy = w-1-sx, sy
			case 3:
				dx, dy = w-1-sx, h-1-sy
			case 4:
				dx, dy = sx, h-1-sy
			case 5:
				dx, dy = sy, sx
			case 6:
				dx, dy = h-1-sy, sx
			case 7:
				dx, dy = h-1-sy, w-1-sx
			case 8:
				dx, dy = sy, w-1-sx
			default:
				dx, dy = sx, sy
			}
			i := dy*dst.Stride + 4*dx
			copy(dst.Pix[i:i+4], row[4*sx:4*sx+4])
		}
	}
	return dst
}
