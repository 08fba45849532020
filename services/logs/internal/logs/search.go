package logs

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Search limits.
const (
	MaxSearchLen   = 256 // bytes of q
	MaxSearchTerms = 16
)

// Search is a parsed q=: every term must occur, case-insensitively, in the
// record's message (logBody) or its metricsId. A term is a word (a run of
// non-blank characters) or a quoted phrase ("disk full"), matched as a
// substring, so "time" also finds "timeout".
type Search struct {
	terms []term
}

type term struct {
	lower string // lower-cased
	ascii bool   // lower has only ASCII bytes: matched without allocating
}

// Errors of ParseSearch (the HTTP layer maps them to 400 invalid_query).
var (
	ErrSearchEmpty    = errors.New("q has no word to search for")
	ErrSearchTooLong  = errors.New("q is too long")
	ErrSearchQuote    = errors.New("q has an unterminated quote")
	ErrSearchTerms    = errors.New("q has too many words")
	ErrSearchEncoding = errors.New("q must be valid UTF-8")
)

// ParseSearch parses q: words separated by blanks and phrases in double
// quotes.
func ParseSearch(q string) (*Search, error) {
	if len(q) > MaxSearchLen {
		return nil, ErrSearchTooLong
	}
	if !utf8.ValidString(q) {
		return nil, ErrSearchEncoding
	}
	var s Search
	add := func(t string) {
		if t = strings.TrimSpace(t); t != "" {
			l := strings.ToLower(t)
			s.terms = append(s.terms, term{lower: l, ascii: isASCII(l)})
		}
	}
	rest := q
	for rest != "" {
		rest = strings.TrimLeft(rest, " \t\r\n")
		if rest == "" {
			break
		}
		if rest[0] == '"' {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return nil, ErrSearchQuote
			}
			add(rest[1 : 1+end])
			rest = rest[2+end:]
			continue
		}
		end := strings.IndexAny(rest, " \t\r\n\"")
		if end < 0 {
			end = len(rest)
		}
		add(rest[:end])
		rest = rest[end:]
	}
	if len(s.terms) == 0 {
		return nil, ErrSearchEmpty
	}
	if len(s.terms) > MaxSearchTerms {
		return nil, ErrSearchTerms
	}
	return &s, nil
}

// Match reports whether every term occurs in one of fields.
func (s *Search) Match(fields ...string) bool {
	for _, t := range s.terms {
		found := false
		for _, f := range fields {
			if t.in(f) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// in reports whether t occurs in f, ignoring case. U+0130 (İ) and U+212A
// (the Kelvin sign) are the only non-ASCII characters Unicode lower-cases
// to ASCII letters (i, k): a field holding one is lower-cased whole, so that
// an ASCII term matches it as it matches the field's lower-cased text
// (FuzzParseSearch checks that every q matches itself).
func (t term) in(f string) bool {
	if !t.ascii || strings.Contains(f, "\u0130") || strings.Contains(f, "\u212a") {
		return strings.Contains(strings.ToLower(f), t.lower)
	}
	return containsFoldASCII(f, t.lower)
}

// containsFoldASCII reports whether lower (ASCII, lower case) occurs in s
// with ASCII letters of s in either case. A multi-byte character of s never
// equals an ASCII byte, so non-ASCII text is simply skipped over.
func containsFoldASCII(s, lower string) bool {
	n := len(lower)
	if n == 0 {
		return true
	}
	c0 := lower[0]
	u0 := c0
	if 'a' <= c0 && c0 <= 'z' {
		u0 = c0 - 'a' + 'A'
	}
	for i := 0; i+n <= len(s); i++ {
		if b := s[i]; b != c0 && b != u0 {
			continue
		}
		j := 1
		for ; j < n; j++ {
			b := s[i+j]
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			if b != lower[j] {
				break
			}
		}
		if j == n {
			return true
		}
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
