package logs

import (
	"errors"
	"testing"
)

func TestParseSearch(t *testing.T) {
	for _, c := range []struct {
		q    string
		want []string
		err  error
	}{
		{"timeout", []string{"timeout"}, nil},
		{"  Disk   FULL ", []string{"disk", "full"}, nil},
		{`"connection reset" db`, []string{"connection reset", "db"}, nil},
		{`db"quoted phrase"`, []string{"db", "quoted phrase"}, nil},
		{"Ünïcode", []string{"ünïcode"}, nil},
		{"", nil, ErrSearchEmpty},
		{`""`, nil, ErrSearchEmpty},
		{`"open`, nil, ErrSearchQuote},
		{"a b c d e f g h i j k l m n o p q", nil, ErrSearchTerms},
		{string(make([]byte, MaxSearchLen+1)), nil, ErrSearchTooLong},
		{"\xff", nil, ErrSearchEncoding},
	} {
		s, err := ParseSearch(c.q)
		if !errors.Is(err, c.err) {
			t.Errorf("ParseSearch(%q): err %v, want %v", c.q, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		var got []string
		for _, tm := range s.terms {
			got = append(got, tm.lower)
		}
		if len(got) != len(c.want) {
			t.Errorf("ParseSearch(%q) = %q, want %q", c.q, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("ParseSearch(%q) = %q, want %q", c.q, got, c.want)
			}
		}
	}
}

func TestSearchMatch(t *testing.T) {
	for _, c := range []struct {
		q      string
		fields []string
		want   bool
	}{
		{"timeout", []string{"upstream TIMEOUT after 3s"}, true},
		{"TimeOut", []string{"read timeout"}, true},
		{"time", []string{"Timeout"}, true},
		{"timeout", []string{"time out"}, false},
		{`"disk full"`, []string{"the Disk Full alarm"}, true},
		{`"disk full"`, []string{"full disk"}, false},
		{"disk full", []string{"full disk"}, true},
		{"disk req-42", []string{"disk almost full", "req-42"}, true},
		{"disk req-43", []string{"disk almost full", "req-42"}, false},
		{"straße", []string{"STRASSE"}, false},
		{"ünïcode", []string{"ÜNÏCODE text"}, true},
		{"ab", []string{"\u00e9aB"}, true},
		{"x", []string{""}, false},
	} {
		s, err := ParseSearch(c.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Match(c.fields...); got != c.want {
			t.Errorf("%q in %q: %v, want %v", c.q, c.fields, got, c.want)
		}
	}
}
