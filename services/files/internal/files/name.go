package files

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes bounds a cleaned file name (most file systems allow 255).
const MaxNameBytes = 255

// DefaultName replaces a name that cleans to nothing.
const DefaultName = "file"

// CleanName turns a client-supplied file name into one safe to store and to
// offer back in a Content-Disposition header: the last path element only
// (both / and \ separate), no control or bidirectional-override characters,
// no characters Windows forbids, no leading or trailing dots or spaces,
// valid UTF-8, at most MaxNameBytes bytes (the extension kept when it can be).
// The result is only ever metadata: object keys never derive from it.
func CleanName(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	for _, r := range name {
		switch {
		case r == utf8.RuneError:
			continue // invalid UTF-8
		case unicode.IsControl(r), isBidiControl(r), unicode.Is(unicode.Cf, r):
			continue // C0/C1 controls, direction overrides, other invisible format characters
		case strings.ContainsRune(`<>:"|?*`, r):
			b.WriteRune('_')
		case unicode.IsSpace(r):
			b.WriteRune(' ')
		default:
			b.WriteRune(r)
		}
	}
	name = strings.Trim(b.String(), " .")
	name = truncateName(name, MaxNameBytes)
	name = strings.Trim(name, " .")
	if name == "" {
		return DefaultName
	}
	return name
}

func isBidiControl(r rune) bool {
	switch {
	case r == 0x061C, r == 0x200E, r == 0x200F:
		return true
	case r >= 0x202A && r <= 0x202E:
		return true
	case r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// truncateName cuts name to max bytes on a rune boundary, keeping a short
// extension (up to 16 bytes) when there is one.
func truncateName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	ext := ""
	if i := strings.LastIndexByte(name, '.'); i > 0 && len(name)-i <= 16 {
		ext = name[i:]
		name = name[:i]
	}
	limit := max - len(ext)
	for limit > 0 && !utf8.RuneStart(name[limit]) {
		limit--
	}
	return name[:limit] + ext
}
