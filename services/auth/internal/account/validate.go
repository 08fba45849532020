package account

import (
	"net/mail"
	"net/url"
	"strings"
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

func validateEmail(field, s string) (string, error) {
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
	s = strings.TrimSpace(s)
	if !utf8.ValidString(s) {
		return "", invalid(field, "invalid_value", field+" must be valid UTF-8")
	}
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
