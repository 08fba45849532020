package httpapi

import (
	"mime"
	"testing"
	"unicode/utf8"
)

// FuzzParseRange: any Range header against any size yields either "ignore",
// "unsatisfiable", or a range inside the content.
func FuzzParseRange(f *testing.F) {
	for _, h := range []string{"bytes=0-9", "bytes=-5", "bytes=5-", "bytes=9-0", "bytes=0-0,2-3", "items=0-1", "bytes=-0",
		"bytes=99999999999999999999-", "bytes= 1 - 2 ", "bytes=-9223372036854775808"} {
		f.Add(h, int64(10))
	}
	f.Add("bytes=0-", int64(0))
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -(size + 1)
		}
		start, end, ok, sat := parseRange(h, size)
		if !ok || !sat {
			return
		}
		if start < 0 || end < start || end >= size {
			t.Fatalf("parseRange(%q, %d) = %d-%d", h, size, start, end)
		}
	})
}

// FuzzContentDisposition: any stored name gives an ASCII-only header that a
// standard parser reads back as exactly that name.
func FuzzContentDisposition(f *testing.F) {
	for _, s := range []string{"report.pdf", `x"y%z\w`, "résumé.pdf", "تقرير", "a b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !utf8.ValidString(name) {
			return // names are cleaned to valid UTF-8 before they are stored
		}
		h := contentDisposition(name)
		for i := 0; i < len(h); i++ {
			if h[i] < 0x20 || h[i] >= 0x7f {
				t.Fatalf("non-ASCII byte in %q", h)
			}
		}
		_, params, err := mime.ParseMediaType(h)
		if err != nil || params["filename"] != name {
			t.Fatalf("%q parsed back as %q (%v)", name, params["filename"], err)
		}
	})
}

// FuzzAcceptsGzip: never panics; "identity"-only or empty headers never
// select gzip.
func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "gzip;q=0", "*;q=0.5", "br, gzip;q=0.1", "identity", "", "gzip;q=nan", "gzip;q=1e999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got := acceptsGzip(h)
		if (h == "" || h == "identity") && got {
			t.Fatalf("acceptsGzip(%q) = true", h)
		}
	})
}
