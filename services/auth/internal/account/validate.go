package account

import (
	"net/mail"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/acme/platform/services/auth/internal/password"
)

// Field limits.
const (
	maxEmail    = 254
	maxName     = 200
	maxSector   = 200
	maxEDV      = 100
	maxURL      = 2048
	maxUA       = 512
	maxIP       = 64
	maxPageSize = 100
)

// NormalizeEmail is the case-insensitive form e-mails are compared in.
func NormalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// forbiddenRune reports the characters no stored text may hold: every
// control character (Unicode category Cc: U+0000-U+001F, U+007F-U+009F,
// so also tab and newlines), the bidirectional embeddings and overrides
// (U+202A-U+202E) and isolates (U+2066-U+2069), which reorder what follows
// them on screen, the line and paragraph separators (U+2028, U+2029),
// which break lines like a newline, and two invisible characters with no
// use in a name or a label: the zero-width space (U+200B) and the
// zero-width no-break space / byte order mark (U+FEFF). The joiners U+200C
// and U+200D stay allowed (scripts and emoji sequences need them), and so
// do the direction marks U+200E, U+200F and U+061C, which change no other
// character's order beyond their own neighbourhood.
func forbiddenRune(r rune) bool {
	switch {
	case unicode.Is(unicode.Cc, r):
		return true
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029, r == 0x200B, r == 0xFEFF:
		return true
	}
	return false
}

// checkChars is the one check every free-text field auth stores goes
// through (names, sector, EDV, e-mail addresses, URLs, API key and passkey
// names): a string holding a character forbiddenRune refuses is a
// ValidationError naming field, code invalid_characters. It looks at the
// string as sent, before any trimming, so a trailing newline is refused
// too. Invalid UTF-8 is left to the caller's own check.
func checkChars(field, s string) error {
	for _, r := range s {
		if forbiddenRune(r) {
			return invalid(field, "invalid_characters", field+" contains control or bidirectional-override characters")
		}
	}
	return nil
}

func validateEmail(field, s string) (string, error) {
	if err := checkChars(field, s); err != nil {
		return "", err
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return "", invalid(field, "invalid_email", field+" must not be empty")
	}
	if len(s) > maxEmail {
		return "", invalid(field, "invalid_email", field+" is too long")
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" || !strings.Contains(s[strings.LastIndexByte(s, '@')+1:], ".") {
		return "", invalid(field, "invalid_email", field+" must be a plain e-mail address such as name@example.com")
	}
	return s, nil
}

func validateText(field, s string, max int, required bool) (string, error) {
	if !utf8.ValidString(s) {
		return "", invalid(field, "invalid_value", field+" must be valid UTF-8")
	}
	if err := checkChars(field, s); err != nil {
		return "", err
	}
	s = strings.TrimSpace(s)
	if required && s == "" {
		return "", invalid(field, "invalid_value", field+" must not be empty")
	}
	if utf8.RuneCountInString(s) > max {
		return "", invalid(field, "invalid_value", field+" is too long")
	}
	return s, nil
}

// validateURL accepts absolute http(s) URLs; "" clears the field.
func validateURL(field, s string) (string, error) {
	if err := checkChars(field, s); err != nil {
		return "", err
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	u, err := url.Parse(s)
	if err != nil || len(s) > maxURL || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", invalid(field, "invalid_url", field+" must be an absolute http or https URL")
	}
	return s, nil
}

func validatePassword(field, pw string) error {
	if len(pw) < password.MinLength || len(pw) > password.MaxLength {
		return invalid(field, "invalid_password", field+" must be 8 to 1024 bytes long")
	}
	return nil
}

func validateRole(field, r string) error {
	if r != RoleUser && r != RoleAdmin {
		return invalid(field, "invalid_role", field+` must be "user" or "admin"`)
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) && len(s) > 0 {
		s = s[:len(s)-1]
	}
	return s
}
