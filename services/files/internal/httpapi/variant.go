package httpapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/acme/platform/services/files/internal/imaging"
	"github.com/gofiber/fiber/v2"
)

// variant: GET /images/:id?w=&h=&fit=&format=&q= → a variant of the image,
// made on its first request, public and immutable like the image.
func (h *handler) variant(c *fiber.Ctx, id string) error {
	req, err := parseVariant(c.Request().URI().QueryArgs().VisitAll, c.Get(fiber.HeaderAccept))
	if err != nil {
		return err
	}
	// The record is read within the usual bound; a render waits for its
	// budget (FILES_IMAGE_WAIT) and runs within FILES_IMAGE_DECODE_TIMEOUT.
	f, err := h.svc.Variant(c.UserContext(), id, req)
	if err != nil {
		return fail(err, errScope{fileID: id, maxVariants: h.svc.VariantsPerImage(),
			maxPixels: h.svc.MaxPixels(), maxMemory: h.svc.ImageMaxMemory(), maxScans: int64(h.svc.ImageMaxScans())})
	}
	if req.Format == "auto" {
		c.Set(fiber.HeaderVary, fiber.HeaderAccept)
	}
	c.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
	c.Set(fiber.HeaderContentSecurityPolicy, "default-src 'none'")
	return h.serve(c, f, id)
}

// variantParams are the query parameters of a variant.
var variantParams = map[string]bool{"w": true, "h": true, "fit": true, "format": true, "q": true}

// parseVariant reads a variant's query: each parameter known and given
// once, sizes and quality as plain decimal numbers. Their bounds (which
// depend on the image) are the files package's to check.
func parseVariant(visit func(func(k, v []byte)), accept string) (files.VariantRequest, error) {
	var r files.VariantRequest
	var bad error
	seen := map[string]bool{}
	visit(func(k, v []byte) {
		if bad != nil {
			return
		}
		key := string(k)
		if key == "" {
			return // "?&w=1", "?=": nothing to name; ignored
		}
		if !variantParams[key] {
			if len(key) > 32 {
				key = key[:32]
			}
			bad = invalidParam(strings.ToValidUTF8(key, "?"), "is not a parameter of an image (w, h, fit, format, q)")
			return
		}
		if seen[key] {
			bad = invalidParam(key, "is given twice")
			return
		}
		seen[key] = true
		val := string(v)
		number := func(max int) int {
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > max || val[0] == '+' || val[0] == '0' {
				bad = invalidParam(key, "must be a whole number from 1 to "+strconv.Itoa(max))
			}
			return n
		}
		switch key {
		case "w":
			r.Width = number(maxVariantSide)
		case "h":
			r.Height = number(maxVariantSide)
		case "q":
			r.Quality = number(100)
		case "fit":
			r.Fit = imaging.Fit(val)
			if r.Fit != imaging.Cover && r.Fit != imaging.Contain && r.Fit != imaging.Fill {
				bad = invalidParam(key, "must be cover, contain or fill")
			}
		case "format":
			r.Format = val
			if val != "jpeg" && val != "png" && val != "webp" && val != "auto" {
				bad = invalidParam(key, "must be jpeg, png, webp or auto")
			}
		}
	})
	if bad != nil {
		return r, bad
	}
	if r.Width == 0 && r.Height == 0 {
		return r, invalidParam("w", "or h is required")
	}
	r.AcceptsWebP = acceptsWebP(accept)
	return r, nil
}

// maxVariantSide bounds w and h before any lookup; the image's sides and
// FILES_IMAGE_VARIANT_MAX_SIDE bound them further.
const maxVariantSide = 1 << 16

func invalidParam(field, msg string) *web.Error {
	return apiErr(http.StatusBadRequest, "invalid_parameter", field+" "+msg, "field", field)
}

// acceptsWebP reports whether an Accept header names image/webp with a
// quality above 0. Wildcards do not count: "*/*" is what clients that
// know no image format send.
func acceptsWebP(h string) bool {
	for _, part := range strings.Split(h, ",") {
		typ, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(typ), "image/webp") {
			continue
		}
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		return q > 0
	}
	return false
}
