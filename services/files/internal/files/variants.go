package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/services/files/internal/imaging"
)

// Image variants: renditions of a stored image at another size or in
// another format (thumbnails), made on their first request and stored
// beside the image under a key made of the image's id and the variant's
// canonical name (imaging.Variant.Name: numbers and a format, never the
// request's text). A variant never changes once stored; it is removed
// with its image.

// VariantRequest is what a client asks of an image.
type VariantRequest struct {
	Width, Height int         // the box; 0 keeps the ratio on that side (not both)
	Fit           imaging.Fit // "": cover
	// Format is "jpeg", "png", "webp", "auto" (WebP when AcceptsWebP, else
	// the image's own) or "" (the image's own).
	Format      string
	AcceptsWebP bool
	Quality     int // 1-100; 0: the service's JPEG quality
}

// VariantConfig bounds the variants a client can have made.
type VariantConfig struct {
	// MaxSide bounds each side of a variant (besides the image's own).
	MaxSide int
	// Sizes, when not empty, is every box allowed, as asked (0 for a side
	// left out): PocketBase's thumbs allow-list.
	Sizes []image.Point
	// PerImage bounds the variants stored of one image (a counter on its
	// record); 0 turns variants off.
	PerImage int64
	// MetaCache bounds the variants described in memory (no lookup of the
	// object store for a variant already served by this process).
	MetaCache int
}

// BadVariantError is a variant request outside the rules: Field names the
// query parameter.
type BadVariantError struct {
	Field, Msg string
}

func (e *BadVariantError) Error() string { return e.Field + ": " + e.Msg }

// ErrTooManyVariants means the image has all the variants it may have
// (VariantConfig.PerImage); those already made are still served.
var ErrTooManyVariants = errors.New("the image has as many variants as it may have")

// variantsPrefix holds every variant: variants/<yyyy>/<mm>/<image id>/<name>.
const variantsPrefix = "variants/"

// variantDir is the "folder" of an image's variants.
func variantDir(f *File) string {
	t := f.CreatedAt.UTC()
	return fmt.Sprintf("%s%04d/%02d/%s/", variantsPrefix, t.Year(), int(t.Month()), f.ID)
}

// variantName reports whether s has the shape of imaging.Variant.Name.
func variantName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// variants is the memory of variants this process stored or found, by
// key, so a variant served again needs no request to the object store.
// An entry is only used after its image's record was found (Image), so a
// deleted image's variants are never served from it.
type variants struct {
	mu  sync.Mutex
	max int
	m   map[string]File
}

func (v *variants) get(key string) (File, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f, ok := v.m[key]
	return f, ok
}

func (v *variants) put(f File) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.m) >= v.max {
		clear(v.m) // rare: described again from the object store
	}
	v.m[f.Key] = f
}

func (v *variants) forget(dir string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k := range v.m {
		if strings.HasPrefix(k, dir) {
			delete(v.m, k)
		}
	}
}

// plan checks r against the image f and the limits and returns the
// variant it asks for.
func (s *Service) plan(f *File, r VariantRequest) (imaging.Variant, error) {
	vc := s.cfg.Variants
	bad := func(field, msg string, a ...any) error {
		return &BadVariantError{Field: field, Msg: fmt.Sprintf(msg, a...)}
	}
	if r.Width == 0 && r.Height == 0 {
		return imaging.Variant{}, bad("w", "w or h is required")
	}
	if r.Width < 0 || r.Width > min(f.Width, vc.MaxSide) {
		return imaging.Variant{}, bad("w", "must be from 1 to %d", min(f.Width, vc.MaxSide))
	}
	if r.Height < 0 || r.Height > min(f.Height, vc.MaxSide) {
		return imaging.Variant{}, bad("h", "must be from 1 to %d", min(f.Height, vc.MaxSide))
	}
	if len(vc.Sizes) > 0 {
		ok := false
		for _, p := range vc.Sizes {
			ok = ok || p == image.Pt(r.Width, r.Height)
		}
		if !ok {
			field := "w"
			if r.Width == 0 {
				field = "h"
			}
			return imaging.Variant{}, bad(field, "%dx%d is not one of the sizes allowed", r.Width, r.Height)
		}
	}
	fit := r.Fit
	switch fit {
	case "":
		fit = imaging.Cover
	case imaging.Cover, imaging.Contain, imaging.Fill:
	default:
		return imaging.Variant{}, bad("fit", "must be cover, contain or fill")
	}
	own := imaging.JPEG
	if f.Type == "image/png" {
		own = imaging.PNG
	}
	var format imaging.Format
	switch r.Format {
	case "":
		format = own
	case "auto":
		format = own
		if r.AcceptsWebP {
			format = imaging.WebP
		}
	case "jpeg", "png", "webp":
		format = imaging.Format(r.Format)
	default:
		return imaging.Variant{}, bad("format", "must be jpeg, png, webp or auto")
	}
	q := r.Quality
	switch {
	case q == 0:
		q = s.cfg.Image.JPEGQuality
	case q < 1 || q > 100:
		return imaging.Variant{}, bad("q", "must be from 1 to 100")
	}
	return imaging.Plan(f.Width, f.Height, r.Width, r.Height, fit, format, q), nil
}

// Variant returns the variant r asks of the public image id, made and
// stored on its first request: concurrent first requests in this process
// wait for one render, and across replicas the first one stored wins (the
// others serve it). The returned File describes the variant's object (ID
// is the image's). Errors: ErrNotFound (no such image), *BadVariantError,
// ErrTooManyVariants, and those of image work (ErrBusy, ErrImageTimeout...).
func (s *Service) Variant(ctx context.Context, id string, r VariantRequest) (*File, error) {
	f, err := s.Image(ctx, id)
	if err != nil {
		return nil, err
	}
	if s.cfg.Variants.PerImage <= 0 {
		return nil, &BadVariantError{Field: "w", Msg: "image variants are turned off"}
	}
	v, err := s.plan(f, r)
	if err != nil {
		return nil, err
	}
	key := variantDir(f) + v.Name()
	if got, ok := s.variants.get(key); ok {
		return &got, nil
	}
	// The render goes on for the others when the first caller hangs up;
	// its work is bounded by the image limits.
	ch := s.flights.DoChan(key, func() (any, error) {
		return s.makeVariant(context.WithoutCancel(ctx), f, v, key)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		got := res.Val.(File)
		return &got, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// makeVariant finds the variant in the object store, or renders and
// stores it, counted against the image's variants.
func (s *Service) makeVariant(ctx context.Context, f *File, v imaging.Variant, key string) (File, error) {
	vf := File{ID: f.ID, Kind: KindImage, Owner: f.Owner, Type: v.ContentType(), Key: key,
		Width: v.Width, Height: v.Height, CreatedAt: f.CreatedAt}
	found := func() (File, error) {
		st, err := s.objects.Stat(ctx, key)
		if err != nil {
			return File{}, err
		}
		vf.Size, vf.Stored, vf.SHA256 = st.Size, st.Size, st.SHA256
		s.variants.put(vf)
		return vf, nil
	}
	if got, err := found(); err == nil || !errors.Is(err, ErrNotFound) {
		return got, err
	}
	ok, err := s.store.TakeVariant(ctx, f.ID, s.cfg.Variants.PerImage)
	if err != nil {
		return File{}, err
	}
	if !ok {
		return File{}, ErrTooManyVariants
	}
	kept := false
	defer func() {
		if !kept {
			s.giveBackVariant(ctx, f.ID)
		}
	}()
	out, err := s.renderVariant(ctx, f, v)
	if err != nil {
		return File{}, err
	}
	sum := sha256.Sum256(out.Data)
	vf.SHA256 = hex.EncodeToString(sum[:])
	vf.Size, vf.Stored = int64(len(out.Data)), int64(len(out.Data))
	switch err := s.objects.PutNew(ctx, key, out.Data, vf.Type, vf.SHA256); {
	case errors.Is(err, ErrConflict):
		return found() // another replica stored it first: theirs is served, our count given back
	case err != nil:
		return File{}, err
	}
	kept = true
	s.renders.Add(1)
	s.variants.put(vf)
	return vf, nil
}

// giveBackVariant returns a variant count taken for a render that stored
// nothing, on a context of its own.
func (s *Service) giveBackVariant(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.store.GiveBackVariant(ctx, id); err != nil {
		s.log.Publish(ctx, LogEntry{Type: "error", Body: "giving back a variant count of " + id + " failed (one variant fewer may be made of it): " + err.Error()})
	}
}

// readImage reads a stored image whole: the bytes its record counts (at
// most the longest side the service stores, re-encoded).
func (s *Service) readImage(ctx context.Context, f *File) ([]byte, error) {
	obj, err := s.objects.Get(ctx, f.Key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer obj.Body.Close()
	if obj.Size != f.Stored {
		return nil, fmt.Errorf("%w: stored image %s has %d bytes, its record says %d", ErrBadImage, f.Key, obj.Size, f.Stored)
	}
	b := make([]byte, obj.Size)
	if _, err := io.ReadFull(obj.Body, b); err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrUnavailable, f.Key, err)
	}
	return b, nil
}

// renderVariant renders v from the stored image f under the limits of
// image work (processImage's): its cost, bounded from the record, checked
// against the per-image budget, then a slot and that memory taken before
// the stored image is read, then the deadline. The image's header is
// checked as any upload's (scans, pixels, memory) before it is decoded.
func (s *Service) renderVariant(ctx context.Context, f *File, v imaging.Variant) (imaging.Result, error) {
	weight := imaging.VariantBound(f.Width, f.Height, f.Stored, v)
	if weight > s.cfg.Image.MaxMemory {
		return imaging.Result{}, fmt.Errorf("%w: the variant needs up to %d bytes, over %d", ErrImageTooMuchMemory, weight, s.cfg.Image.MaxMemory)
	}
	var out imaging.Result
	err := s.withImageBudget(ctx, weight, func(ctx context.Context) error {
		src, err := s.readImage(ctx, f)
		if err != nil {
			return err
		}
		cost, err := imaging.VariantCost(src, s.cfg.Image, v)
		if err != nil {
			return err
		}
		if c := cost.Bytes() + int64(len(src)); c > weight {
			return fmt.Errorf("%w: the stored image %s needs %d bytes, over the %d its record allows", ErrBadImage, f.Key, c, weight)
		}
		out, err = imaging.Render(ctx, src, s.cfg.Image, v)
		return err
	})
	if err != nil {
		return imaging.Result{}, imageError(err)
	}
	return out, nil
}

// VariantRenders is how many variants this process rendered and stored.
func (s *Service) VariantRenders() int64 { return s.renders.Load() }

// removeVariants removes every stored variant of image f; the sweeper
// removes any left (their image has no record).
func (s *Service) removeVariants(ctx context.Context, f *File) error {
	if f.Kind != KindImage {
		return nil
	}
	dir := variantDir(f)
	s.variants.forget(dir)
	for info, err := range s.objects.List(ctx, dir) {
		if err != nil {
			return err
		}
		if err := s.objects.Remove(ctx, info.Key); err != nil {
			return err
		}
	}
	return nil
}

// VariantsPerImage is the bound of one image's variants in force.
func (s *Service) VariantsPerImage() int64 { return s.cfg.Variants.PerImage }
