package files

import (
	"mime"
	"strings"
)

// compressibleTypes are sniffed types worth storing gzip-compressed. Formats
// that are already compressed (images, archives, media, PDF, WOFF) and
// unrecognised binary data (application/octet-stream) are stored as they
// are: gzip would cost CPU for little or no gain.
var compressibleTypes = map[string]bool{
	"application/json":              true,
	"application/xml":               true,
	"application/javascript":        true,
	"application/wasm":              true,
	"application/postscript":        true,
	"application/vnd.ms-fontobject": true,
	"image/bmp":                     true,
	"image/x-icon":                  true,
	"image/svg+xml":                 true,
	"font/ttf":                      true,
	"font/otf":                      true,
	"font/collection":               true,
}

// Compressible reports whether content of MIME type ct is stored gzip.
func Compressible(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return strings.HasPrefix(mt, "text/") || compressibleTypes[mt]
}
