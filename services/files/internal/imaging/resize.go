package imaging

import (
	"context"
	"image"
	"image/draw"
)

// target is the size img is scaled to so its longest side is at most max
// (never up); ok is false when it already fits.
func target(w, h, max int) (nw, nh int, ok bool) {
	if max <= 0 || (w <= max && h <= max) {
		return w, h, false
	}
	nw, nh = max, max
	if w >= h {
		nh = int((int64(h)*int64(max) + int64(w)/2) / int64(w))
	} else {
		nw = int((int64(w)*int64(max) + int64(h)/2) / int64(h))
	}
	return atLeast1(nw), atLeast1(nh), true
}

// resize scales img so its longest side is at most max (never up). It
// stops with context.Cause(ctx) between two bands once ctx is done.
//
// It averages the source pixels each output pixel covers (area
// resampling: no aliasing however large the reduction) and streams the
// source through a band of bandRows rows converted to RGBA, so what it
// allocates is the output, one band and a few rows of accumulators: a
// kernel scaler's intermediate image (32 bytes per output column and
// source row) would cost more than the decoded source itself.
func resize(ctx context.Context, img image.Image, max int) (image.Image, error) {
	b := img.Bounds()
	nw, nh, ok := target(b.Dx(), b.Dy(), max)
	if !ok {
		return img, nil
	}
	return resizeTo(ctx, img, nw, nh)
}

// resizeTo scales img to exactly nw×nh, each at most img's side (never
// up), as resize does; img itself when it is that size already.
func resizeTo(ctx context.Context, img image.Image, nw, nh int) (image.Image, error) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if nw == w && nh == h {
		return img, nil
	}
	dst := image.NewRGBA(image.Rect(0, 0, nw, nh))
	cols := spans(w, nw)
	rows := spans(h, nh)
	band := image.NewRGBA(image.Rect(0, 0, w, bandRows))
	hrow := make([]float32, 4*nw)  // one source row, scaled horizontally
	acc := make([]float32, 2*4*nw) // output rows cur and cur+1
	sumW := [2]float32{}           // vertical weight gathered by each
	cur := 0                       // output row acc[0:4*nw] holds
	flush := func() {
		out := dst.Pix[cur*dst.Stride : cur*dst.Stride+4*nw]
		a := acc[:4*nw]
		norm := sumW[0]
		for x := 0; x < nw; x++ {
			cw := cols.total[x] * norm
			for k := 0; k < 4; k++ {
				v := a[4*x+k]/cw + 0.5
				if v > 255 {
					v = 255
				}
				out[4*x+k] = uint8(v)
			}
		}
		copy(acc[:4*nw], acc[4*nw:])
		clear(acc[4*nw:])
		sumW[0], sumW[1] = sumW[1], 0
		cur++
	}
	for y0 := 0; y0 < h; y0 += bandRows {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		n := min(bandRows, h-y0)
		draw.Draw(band, image.Rect(0, 0, w, n), img, image.Pt(b.Min.X, b.Min.Y+y0), draw.Src)
		for r := 0; r < n; r++ {
			sy := y0 + r
			clear(hrow)
			row := band.Pix[r*band.Stride : r*band.Stride+4*w]
			for sx := 0; sx < w; sx++ {
				p := row[4*sx : 4*sx+4]
				c := cols.at[sx]
				o := 4 * c.i
				hrow[o] += c.w0 * float32(p[0])
				hrow[o+1] += c.w0 * float32(p[1])
				hrow[o+2] += c.w0 * float32(p[2])
				hrow[o+3] += c.w0 * float32(p[3])
				if c.w1 > 0 {
					hrow[o+4] += c.w1 * float32(p[0])
					hrow[o+5] += c.w1 * float32(p[1])
					hrow[o+6] += c.w1 * float32(p[2])
					hrow[o+7] += c.w1 * float32(p[3])
				}
			}
			s := rows.at[sy]
			for s.i > cur {
				flush()
			}
			for k, v := range hrow {
				acc[k] += s.w0 * v
			}
			sumW[0] += s.w0
			if s.w1 > 0 {
				for k, v := range hrow {
					acc[4*nw+k] += s.w1 * v
				}
				sumW[1] += s.w1
			}
		}
	}
	for cur < nh {
		flush()
	}
	return dst, nil
}

// span says which output pixels (i and i+1) a source pixel falls on, and
// with which weights (the length of the overlap, in output pixels).
type span struct {
	i      int
	w0, w1 float32
}

type spanTable struct {
	at    []span    // by source pixel
	total []float32 // weight gathered by each output pixel
}

// spans maps n source pixels onto m <= n output pixels: output pixel j
// covers source [j*n/m, (j+1)*n/m), so a source pixel overlaps at most two.
func spans(n, m int) spanTable {
	t := spanTable{at: make([]span, n), total: make([]float32, m+1)}
	scale := float64(m) / float64(n) // output pixels per source pixel, <= 1
	for s := 0; s < n; s++ {
		a, b := float64(s)*scale, float64(s+1)*scale
		i := int(a)
		if i >= m {
			i = m - 1
		}
		end := float64(i + 1)
		sp := span{i: i}
		if b <= end || i == m-1 {
			sp.w0 = float32(b - a)
		} else {
			sp.w0, sp.w1 = float32(end-a), float32(b-end)
		}
		t.at[s] = sp
		t.total[i] += sp.w0
		t.total[i+1] += sp.w1
	}
	t.total = t.total[:m]
	return t
}
