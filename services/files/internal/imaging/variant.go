package imaging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"image/png"

	"github.com/gen2brain/webp"
)

// Fit says how a variant fills the box its width and height make.
type Fit string

// Fits.
const (
	// Cover fills the box, cropping the middle of the image to its ratio.
	Cover Fit = "cover"
	// Contain fits the image inside the box, keeping its ratio: the
	// variant may be smaller than the box on one side (no padding).
	Contain Fit = "contain"
	// Fill stretches the image to the box.
	Fill Fit = "fill"
)

// Output formats of a variant (Format's JPEG, PNG and WebP).

// Variant is a rendition of a stored image: an exact output size, the
// part of the source it shows and how it is encoded. Plan makes one from a
// request; equal Variants render equal bytes, and Name says which it is.
type Variant struct {
	Width, Height int             // output size, each at most the source's
	Crop          image.Rectangle // part of the source shown (the whole image unless cover cropped it)
	Format        Format          // JPEG, PNG or WebP
	Quality       int             // JPEG and WebP quality 1-100; 0 for PNG
}

// Name is the variant's canonical name, made only of numbers and the
// format: "<w>x<h>[c]-q<q>.<format>" ("c" when cropped, no q for PNG).
// Two requests with the same Name get the same bytes.
func (v Variant) Name() string {
	c := ""
	if v.Crop.Min != (image.Point{}) {
		c = "c"
	}
	if v.Format == PNG {
		return fmt.Sprintf("%dx%d%s.png", v.Width, v.Height, c)
	}
	return fmt.Sprintf("%dx%d%s-q%d.%s", v.Width, v.Height, c, v.Quality, v.Format)
}

// ContentType is the variant's MIME type.
func (v Variant) ContentType() string { return "image/" + string(v.Format) }

// Plan turns a request for a w×h box (0: keep the ratio on that side; not
// both) with fit over a sw×sh source into the variant it makes. w and h
// must be within the source's sides (checked by the caller).
func Plan(sw, sh, w, h int, fit Fit, f Format, quality int) Variant {
	v := Variant{Crop: image.Rect(0, 0, sw, sh), Format: f, Quality: quality}
	if f == PNG {
		v.Quality = 0
	}
	switch {
	case h == 0:
		h = atLeast1(int((int64(sh)*int64(w) + int64(sw)/2) / int64(sw)))
	case w == 0:
		w = atLeast1(int((int64(sw)*int64(h) + int64(sh)/2) / int64(sh)))
	case fit == Contain:
		// The largest size of the source's ratio inside the box.
		if int64(w)*int64(sh) <= int64(h)*int64(sw) {
			h = atLeast1(int((int64(sh)*int64(w) + int64(sw)/2) / int64(sw)))
		} else {
			w = atLeast1(int((int64(sw)*int64(h) + int64(sh)/2) / int64(sh)))
		}
	case fit == Cover:
		// The middle of the source at the box's ratio.
		cw, ch := sw, sh
		if int64(w)*int64(sh) > int64(h)*int64(sw) { // box wider than source
			ch = int((int64(sw)*int64(h) + int64(w)/2) / int64(w))
		} else {
			cw = int((int64(sh)*int64(w) + int64(h)/2) / int64(h))
		}
		cw, ch = max(min(cw, sw), w), max(min(ch, sh), h)
		x, y := (sw-cw)/2, (sh-ch)/2
		v.Crop = image.Rect(x, y, x+cw, y+ch)
	}
	v.Width, v.Height = min(w, sw), min(h, sh)
	if v.Crop.Dx() == sw && v.Crop.Dy() == sh {
		v.Crop = image.Rect(0, 0, sw, sh)
	}
	return v
}

// webpEncodeFixed is what the WebP encoder (libwebp compiled to
// WebAssembly, run by wazero) takes whatever the size: the compiled module
// and one instance's base memory. webpEncodePerPixel is what it takes per
// output pixel: the NRGBA copy, the input copied into the module's memory,
// libwebp's YUV planes and analysis buffers, and the memory's growth by
// copies (measured: 80 MiB allocated for 1024×682, 308 MiB for
// 2048×1365).
const (
	webpEncodeFixed    = 48 << 20
	webpEncodePerPixel = 112
)

// VariantCost is what rendering v from the stored image b takes, from b's
// header: decoding it, then what VariantBound counts after the decode.
func VariantCost(b []byte, o Options, v Variant) (Cost, error) {
	c, err := Check(b, o)
	if err != nil {
		return c, err
	}
	c.ProcessBytes = variantProcessBytes(v)
	return c, nil
}

// VariantBound bounds VariantCost for a stored image of w×h pixels
// (re-encoded by Process: 8-bit, so at most 4 bytes a decoded pixel) of
// size bytes, without reading it, so that its budget can be taken before
// the image is read: the file, its decode and what VariantCost counts
// after it.
func VariantBound(w, h int, size int64, v Variant) int64 {
	return size + int64(w)*int64(h)*4 + int64(fixedOverhead) + variantProcessBytes(v)
}

// variantProcessBytes is what a render allocates after the decode: the
// resized image, one band of source rows, the accumulators, the encoder's
// output (and for WebP the encoder's own memory).
func variantProcessBytes(v Variant) int64 {
	ow, oh := int64(v.Width), int64(v.Height)
	cw, ch := int64(v.Crop.Dx()), int64(v.Crop.Dy())
	n := int64(fixedOverhead)
	n += ow * oh * 4       // the resized *image.RGBA
	n += cw * bandRows * 4 // the converted band of source rows
	n += ow * 4 * 4 * 3    // float32 row accumulators
	n += (cw + ch) * 4 * 8 // column and row weights
	n += 2 * ow * oh * 4   // the encoded output, growing
	n += ow * oh * 4       // JPEG: laid on white; WebP: the NRGBA copy
	if v.Format == WebP {
		n += webpEncodeFixed + ow*oh*webpEncodePerPixel
	}
	return n
}

// ErrBadVariant means a variant cannot be made as asked (its size is
// outside the source's).
var ErrBadVariant = errors.New("variant outside the source image")

// Render decodes the stored image b, crops, resizes and encodes it as v.
// Like Process it stops at the next read, band or write once ctx is done
// (the WebP encoder runs to its end: it takes no context, and the
// variant's bounded size bounds its work).
func Render(ctx context.Context, b []byte, o Options, v Variant) (Result, error) {
	c, err := Check(b, o)
	if err != nil {
		return Result{}, err
	}
	if v.Width < 1 || v.Height < 1 || v.Width > v.Crop.Dx() || v.Height > v.Crop.Dy() ||
		!v.Crop.In(image.Rect(0, 0, c.Width, c.Height)) {
		return Result{}, fmt.Errorf("%w: %s of %dx%d", ErrBadVariant, v.Name(), c.Width, c.Height)
	}
	src, err := decode(ctx, c.Format, b)
	if ctx.Err() != nil {
		return Result{}, context.Cause(ctx)
	}
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if sb := src.Bounds(); sb.Dx() != c.Width || sb.Dy() != c.Height {
		return Result{}, fmt.Errorf("%w: decoded size differs from the header", ErrCorrupt)
	}
	if v.Crop != src.Bounds().Sub(src.Bounds().Min) {
		src = subImage(src, v.Crop.Add(src.Bounds().Min))
	}
	img, err := resizeTo(ctx, src, v.Width, v.Height)
	if err != nil {
		return Result{}, err
	}

	var buf bytes.Buffer
	w := &ctxWriter{ctx: ctx, w: &buf}
	switch v.Format {
	case PNG:
		err = (&png.Encoder{CompressionLevel: png.DefaultCompression}).Encode(w, img)
	case WebP:
		err = webp.Encode(w, img, webp.Options{Quality: v.Quality, Method: 4})
	default:
		err = jpeg.Encode(w, onWhite(img), &jpeg.Options{Quality: v.Quality})
	}
	if ctx.Err() != nil {
		return Result{}, context.Cause(ctx)
	}
	if err != nil {
		return Result{}, err
	}
	return Result{Data: buf.Bytes(), Type: v.ContentType(), Width: v.Width, Height: v.Height}, nil
}

// subImage is the part r of img.
func subImage(img image.Image, r image.Rectangle) image.Image {
	if s, ok := img.(interface {
		SubImage(image.Rectangle) image.Image
	}); ok {
		return s.SubImage(r)
	}
	dst := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	draw.Draw(dst, dst.Bounds(), img, r.Min, draw.Src)
	return dst
}

// onWhite lays an image with transparent pixels on white for JPEG, which
// has no alpha (image/jpeg would keep the premultiplied colour: black).
func onWhite(img image.Image) image.Image {
	if opaque(img) {
		return img
	}
	b := img.Bounds()
	dst := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(dst, dst.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	draw.Draw(dst, dst.Bounds(), img, b.Min, draw.Over)
	return dst
}
