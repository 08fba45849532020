package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
)

// contentDisposition offers name for saving (RFC 6266): an ASCII fallback
// in filename= for old clients (anything else, and quotes, backslashes and
// percent signs, become "_") and the exact UTF-8 name percent-encoded in
// filename*= (RFC 5987) for the rest. The name was cleaned at upload; the
// encoding makes the header safe whatever it holds.
func contentDisposition(name string) string {
	var ascii, ext strings.Builder
	for _, r := range name {
		if r >= 0x20 && r < 0x7f && r != '"' && r != '\\' && r != '%' {
			ascii.WriteRune(r)
		} else {
			ascii.WriteByte('_')
		}
	}
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(name); i++ {
		b := name[i]
		if isAttrChar(b) {
			ext.WriteByte(b)
		} else {
			ext.WriteByte('%')
			ext.WriteByte(hex[b>>4])
			ext.WriteByte(hex[b&15])
		}
	}
	return `attachment; filename="` + ascii.String() + `"; filename*=UTF-8''` + ext.String()
}

// isAttrChar is RFC 5987's attr-char.
func isAttrChar(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("!#$&+-.^_`|~", b) >= 0
}

// acceptsGzip reports whether an Accept-Encoding value allows gzip (a q of
// 0 refuses it; "*" accepts it unless gzip is refused by name).
func acceptsGzip(h string) bool {
	star := false
	for _, part := range strings.Split(h, ",") {
		coding, q := parseQ(part)
		switch coding {
		case "gzip", "x-gzip":
			return q > 0
		case "*":
			star = q > 0
		}
	}
	return star
}

func parseQ(part string) (string, float64) {
	fields := strings.Split(part, ";")
	coding := strings.ToLower(strings.TrimSpace(fields[0]))
	q := 1.0
	for _, p := range fields[1:] {
		p = strings.TrimSpace(p)
		if v, ok := strings.CutPrefix(strings.ToLower(p), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
	}
	return coding, q
}

// notModified evaluates If-None-Match (weak comparison, "*" matches) and,
// only when it is absent, If-Modified-Since.
func notModified(c *fiber.Ctx, etag string, modified time.Time) bool {
	if inm := c.Get(fiber.HeaderIfNoneMatch); inm != "" {
		return etagListMatch(inm, etag)
	}
	if ims := c.Get(fiber.HeaderIfModifiedSince); ims != "" {
		t, err := http.ParseTime(ims)
		return err == nil && !modified.Truncate(time.Second).After(t)
	}
	return false
}

func etagListMatch(list, etag string) bool {
	want := strings.TrimPrefix(etag, "W/")
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == want {
			return true
		}
	}
	return false
}

// ifRange reports whether a Range header may be honoured: no If-Range, or
// one that matches the strong ETag or the modification date exactly.
func ifRange(v, etag string, modified time.Time) bool {
	if v == "" {
		return true
	}
	if strings.HasPrefix(v, `"`) {
		return v == etag
	}
	t, err := http.ParseTime(v)
	return err == nil && t.Equal(modified.Truncate(time.Second))
}

// parseRange reads a single "bytes=" range against size. ok is false for a
// header to ignore (malformed, another unit, several ranges: the whole body
// is sent); satisfiable is false when the range lies outside the content.
func parseRange(h string, size int64) (start, end int64, ok, satisfiable bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false, false
	}
	first, last, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false, false
	}
	first, last = strings.TrimSpace(first), strings.TrimSpace(last)
	if first == "" { // suffix: the last N bytes
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, false, false
		}
		if n == 0 || size == 0 {
			return 0, 0, true, false
		}
		if n > size {
			n = size
		}
		return size - n, size - 1, true, true
	}
	s, err := strconv.ParseInt(first, 10, 64)
	if err != nil || s < 0 {
		return 0, 0, false, false
	}
	e := size - 1
	if last != "" {
		if e, err = strconv.ParseInt(last, 10, 64); err != nil || e < s {
			return 0, 0, false, false
		}
		if e > size-1 {
			e = size - 1
		}
	}
	if s >= size {
		return 0, 0, true, false
	}
	return s, e, true, true
}
