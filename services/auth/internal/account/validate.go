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

// The text check. Every text auth stores goes through forbiddenRune: a
// field sent by a client is refused when it holds such a character
// (checkChars, checkDisplayChars: 400 invalid_characters naming the
// field), and text taken from request headers (a user agent) is stored
// with them removed (CleanText). What is refused:
//
//   - every control character (category Cc: U+0000-U+001F, U+007F-U+009F,
//     so also tab and newlines) and the line and paragraph separators
//     U+2028 and U+2029, which break lines like a newline;
//   - every format character (category Cf): the bidirectional embeddings,
//     overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder
//     what follows them on screen; the invisible ones (U+200B, U+2060-U+2064,
//     U+206A-U+206F, U+FEFF, U+00AD, U+180E, U+FFF9-U+FFFB, the tags
//     U+E0001 and U+E0020-U+E007F, ...), which make two different strings
//     look the same;
//   - characters of other categories that show as nothing: the combining
//     grapheme joiner U+034F (Mn) and the Hangul fillers U+115F, U+1160,
//     U+3164 and U+FFA0 (Lo).
//
// Display text (names, sector, API key and passkey names: checkDisplayChars)
// keeps five format characters that writing needs: the joiners U+200C
// (Persian, Indic scripts) and U+200D (emoji sequences), and the direction
// marks U+200E, U+200F and U+061C, which set the direction of neutral
// characters next to them without reordering the rest. Identifiers
// (e-mail addresses, the avatar URL, the EDV number) and cleaned header
// text keep none: an address that differs by an invisible character is
// another account that looks the same.

// forbiddenRune reports the characters no stored text may hold; display
// allows the joiners and direction marks display text needs.
func forbiddenRune(r rune, display bool) bool {
	switch {
	case r < 0x20 || (r >= 0x7F && r <= 0x9F): // Cc
		return true
	case r < 0xAD:
		return false // printable ASCII and Latin-1: the common case, quickly
	case r == 0x2028, r == 0x2029:
		return true
	case r == 0x034F, r == 0x115F, r == 0x1160, r == 0x180E, r == 0x3164, r == 0xFFA0:
		return true
	case unicode.Is(unicode.Cf, r):
		return !display || !displayFormat(r)
	}
	return false
}

// displayFormat reports the format characters display text keeps: the
// zero-width non-joiner and joiner, and the direction marks.
func displayFormat(r rune) bool {
	switch r {
	case 0x200C, 0x200D, 0x200E, 0x200F, 0x061C:
		return true
	}
	return false
}

func refusedChars(field string) error {
	return invalid(field, "invalid_characters", field+" contains invisible, control or bidirectional-override characters")
}

// checkChars is the check of identifiers (e-mail addresses, URLs, the EDV
// number): a string holding a character forbiddenRune refuses, format
// characters all included, is a ValidationError naming field, code
// invalid_characters. It looks at the string as sent, before any trimming,
// so a trailing newline is refused too. Invalid UTF-8 is left to the
// caller's own check.
func checkChars(field, s string) error {
	for _, r := range s {
		if forbiddenRune(r, false) {
			return refusedChars(field)
		}
	}
	return nil
}

// checkDisplayChars is checkChars for display text (names, labels): the
// joiners and direction marks are allowed.
func checkDisplayChars(field, s string) error {
	for _, r := range s {
		if forbiddenRune(r, true) {
			return refusedChars(field)
		}
	}
	return nil
}

// CleanText is s without the characters forbiddenRune refuses in
// identifiers, and without invalid UTF-8: how text from request headers
// (the user agent of a session and of the audit trail) is stored, since a
// header is not a field the client can be told to fix.
func CleanText(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || forbiddenRune(r, false) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || forbiddenRune(r, false) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
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

// Text kinds of validateText.
const (
	displayText = true  // names and labels: the joiners and direction marks are allowed
	codeText    = false // identifiers: no format character
)

func validateText(field, s string, max int, required, display bool) (string, error) {
	if !utf8.ValidString(s) {
		return "", invalid(field, "invalid_value", field+" must be valid UTF-8")
	}
	check := checkChars
	if display {
		check = checkDisplayChars
	}
	if err := check(field, s); err != nil {
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
