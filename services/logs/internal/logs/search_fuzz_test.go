package logs

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseSearch: q= parses, whatever its bytes, into 1..MaxSearchTerms
// non-empty terms from at most MaxSearchLen bytes of valid UTF-8, or one of
// the parser's errors; never a panic. Every term occurs in q itself, so an
// accepted q matches the text it was typed as.
func FuzzParseSearch(f *testing.F) {
	for _, s := range []string{"timeout", `"disk full" x`, `"open`, `""`, " \t", strings.Repeat("a ", 17),
		strings.Repeat("x", 257), "\xff", `a"b"c`, "ÀÉ ß", "\u212aelvin", `"" a`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		s, err := ParseSearch(q)
		if err != nil {
			switch err {
			case ErrSearchEmpty, ErrSearchTooLong, ErrSearchQuote, ErrSearchTerms, ErrSearchEncoding:
				return
			}
			t.Fatalf("ParseSearch(%q): unexpected error %v", q, err)
		}
		if len(q) > MaxSearchLen || !utf8.ValidString(q) || len(s.terms) < 1 || len(s.terms) > MaxSearchTerms {
			t.Fatalf("ParseSearch(%q) accepted %d terms", q, len(s.terms))
		}
		for _, tm := range s.terms {
			if tm.lower == "" || strings.TrimSpace(tm.lower) != tm.lower || tm.ascii != isASCII(tm.lower) {
				t.Fatalf("ParseSearch(%q): term %+v", q, tm)
			}
		}
		if !s.Match(q) {
			t.Fatalf("ParseSearch(%q) does not match q itself", q)
		}
	})
}
