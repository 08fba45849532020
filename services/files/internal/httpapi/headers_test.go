package httpapi

import (
	"mime"
	"strings"
	"testing"
	"time"
)

func TestContentDisposition(t *testing.T) {
	for _, tc := range []struct{ name, in, fallback, ext string }{
		{"ascii", "report.pdf", "report.pdf", "report.pdf"},
		{"space", "a b.txt", "a b.txt", "a%20b.txt"},
		{"quoteAndPercent", `x"y%z\w`, "x_y_z_w", "x%22y%25z%5Cw"},
		{"unicode", "résumé.pdf", "r_sum_.pdf", "r%C3%A9sum%C3%A9.pdf"},
		{"arabic", "تقرير", "_____", "%D8%AA%D9%82%D8%B1%D9%8A%D8%B1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := contentDisposition(tc.in)
			want := `attachment; filename="` + tc.fallback + `"; filename*=UTF-8''` + tc.ext
			if got != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			for i := 0; i < len(got); i++ {
				if got[i] < 0x20 || got[i] >= 0x7f {
					t.Fatalf("non-ASCII byte in header: %q", got)
				}
			}
			// A standard parser recovers the exact name.
			_, params, err := mime.ParseMediaType(got)
			if err != nil || params["filename"] != tc.in {
				t.Fatalf("parsed back %q, %v", params["filename"], err)
			}
		})
	}
}

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		h              string
		size           int64
		s, e           int64
		ok, satisfying bool
	}{
		{"bytes=0-9", 100, 0, 9, true, true},
		{"bytes=90-", 100, 90, 99, true, true},
		{"bytes=90-200", 100, 90, 99, true, true},
		{"bytes=-10", 100, 90, 99, true, true},
		{"bytes=-200", 100, 0, 99, true, true},
		{"bytes=100-", 100, 0, 0, true, false},
		{"bytes=-0", 100, 0, 0, true, false},
		{"bytes=5-1", 100, 0, 0, false, false},
		{"bytes=0-1,5-6", 100, 0, 0, false, false},
		{"items=0-1", 100, 0, 0, false, false},
		{"bytes=x-1", 100, 0, 0, false, false},
	} {
		s, e, ok, sat := parseRange(tc.h, tc.size)
		if ok != tc.ok || sat != tc.satisfying || (ok && sat && (s != tc.s || e != tc.e)) {
			t.Errorf("parseRange(%q, %d) = %d %d %v %v", tc.h, tc.size, s, e, ok, sat)
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	for h, want := range map[string]bool{
		"":                     false,
		"gzip":                 true,
		"gzip, deflate, br":    true,
		"br;q=1.0, gzip;q=0.5": true,
		"gzip;q=0":             false,
		"identity":             false,
		"*":                    true,
		"*, gzip;q=0":          false,
		"deflate, X-GZIP":      true,
	} {
		if got := acceptsGzip(h); got != want {
			t.Errorf("acceptsGzip(%q) = %v", h, got)
		}
	}
}

func TestValidators(t *testing.T) {
	etag := `"abc"`
	for list, want := range map[string]bool{`"abc"`: true, `W/"abc"`: true, `"x", "abc"`: true, "*": true, `"abcd"`: false} {
		if etagListMatch(list, etag) != want {
			t.Errorf("etagListMatch(%q)", list)
		}
	}
	mod := time.Date(2026, 1, 2, 3, 4, 5, 600e6, time.UTC)
	if !ifRange("", etag, mod) || !ifRange(etag, etag, mod) || ifRange(`W/"abc"`, etag, mod) || ifRange(`"x"`, etag, mod) {
		t.Error("ifRange etag")
	}
	if !ifRange(mod.Format("Mon, 02 Jan 2006 15:04:05 GMT"), etag, mod) || ifRange(strings.Replace(mod.Format("Mon, 02 Jan 2006 15:04:05 GMT"), "05 GMT", "06 GMT", 1), etag, mod) {
		t.Error("ifRange date")
	}
}
