package httpapi

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/imaging"
)

// FuzzVariantQuery feeds arbitrary query strings and Accept headers to the
// variant parser. It answers a request within the syntax (sides and
// quality in range, fit and format known, a side given) or a 400
// invalid_parameter naming a field of at most 32 bytes; never a panic.
func FuzzVariantQuery(f *testing.F) {
	for _, s := range []string{"w=100", "w=100&h=100&fit=cover&format=auto&q=80", "h=0", "w=1e3", "w=10&w=10",
		"w=99999999999999999999", "fit=contain", "w=1&x=1", "w=%00", "w=+5", "w=05", strings.Repeat("a", 100) + "=1"} {
		f.Add(s, "image/webp")
	}
	f.Add("w=5&format=auto", "image/webp;q=0, */*")
	f.Fuzz(func(t *testing.T, query, accept string) {
		vals, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		visit := func(fn func(k, v []byte)) {
			for k, vs := range vals {
				for _, v := range vs {
					fn([]byte(k), []byte(v))
				}
			}
		}
		r, err := parseVariant(visit, accept)
		if err != nil {
			var we *web.Error
			if !errors.As(err, &we) || we.Status != 400 || we.Code != "invalid_parameter" {
				t.Fatalf("%q: %v", query, err)
			}
			if f, _ := we.Body["field"].(string); f == "" || len(f) > 32 {
				t.Fatalf("%q: field %q", query, f)
			}
			return
		}
		if r.Width == 0 && r.Height == 0 || r.Width < 0 || r.Height < 0 || r.Width > maxVariantSide || r.Height > maxVariantSide ||
			r.Quality < 0 || r.Quality > 100 {
			t.Fatalf("%q accepted as %+v", query, r)
		}
		switch r.Fit {
		case "", imaging.Cover, imaging.Contain, imaging.Fill:
		default:
			t.Fatalf("%q: fit %q", query, r.Fit)
		}
		switch r.Format {
		case "", "jpeg", "png", "webp", "auto":
		default:
			t.Fatalf("%q: format %q", query, r.Format)
		}
	})
}

func TestAcceptsWebP(t *testing.T) {
	for h, want := range map[string]bool{
		"image/avif,image/webp,*/*": true, "image/webp;q=0": false, "IMAGE/WEBP; q=0.5": true,
		"*/*": false, "image/*": false, "": false, "text/html": false,
	} {
		if got := acceptsWebP(h); got != want {
			t.Errorf("acceptsWebP(%q) = %v, want %v", h, got, want)
		}
	}
}
