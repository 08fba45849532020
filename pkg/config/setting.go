package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind is how a setting's text is parsed.
type Kind int

// The kinds of setting, each read by its own Reader method.
const (
	Text     Kind = iota // any string (Reader.String)
	Int                  // a decimal integer (Reader.Int)
	Size                 // a byte count, with an optional KiB, MiB or GiB suffix (Reader.Int64)
	Duration             // a Go duration: 500ms, 15m, 720h (Reader.Duration)
	Bool                 // true/false/1/0 (Reader.Bool)
	List                 // comma-separated, empty items dropped (Reader.List)
)

func (k Kind) String() string {
	switch k {
	case Int:
		return "integer"
	case Size:
		return "size"
	case Duration:
		return "duration"
	case Bool:
		return "boolean"
	case List:
		return "list"
	}
	return "text"
}

// Setting is the one definition of a setting: its key, how it is parsed,
// its default and what it does. A service's table of settings is what its
// loader reads through and what docs/configuration.md is generated from.
type Setting struct {
	// Key is the name without the service's prefix: "SESSION_TTL" is read
	// as AUTH_SESSION_TTL by auth.
	Key  string
	Kind Kind
	// Default is the value used when no variable is set, written as a
	// user would write it ("15m", "64KiB"); empty for none.
	Default string
	// DefaultDoc replaces Default in the reference when the default is
	// computed on the machine that runs (the number of CPUs) or taken from
	// another setting.
	DefaultDoc string
	// Doc is one line: what the setting does.
	Doc string
	// Shared settings are also read without the prefix (MONGO_URL after
	// AUTH_MONGO_URL), so a value every service needs is set once. Only
	// settings that really are the same for several processes are shared.
	Shared bool
	// File accepts KEY_FILE naming a file that holds the value (compose
	// secrets under /run/secrets); values read from files are masked when
	// the configuration is logged.
	File bool
	// Secret values are masked when the configuration is logged.
	Secret bool
}

// Names returns every variable that supplies the setting, in the order they
// are looked up: PREFIX_KEY, PREFIX_KEY_FILE, KEY, KEY_FILE (as applicable).
func (s Setting) Names(prefix string) []string {
	var bases []string
	if prefix != "" {
		bases = append(bases, prefix+"_"+s.Key)
	}
	if s.Shared || prefix == "" {
		bases = append(bases, s.Key)
	}
	var out []string
	for _, b := range bases {
		out = append(out, b)
		if s.File {
			out = append(out, b+FileSuffix)
		}
	}
	return out
}

// check parses the default by the setting's kind.
func (s Setting) check() error {
	if s.Key == "" || strings.ToUpper(s.Key) != s.Key || strings.HasSuffix(s.Key, FileSuffix) {
		return fmt.Errorf("setting %q: the key must be upper case and not end in %s", s.Key, FileSuffix)
	}
	if strings.TrimSpace(s.Doc) == "" || strings.Contains(s.Doc, "\n") {
		return fmt.Errorf("setting %s: needs a one-line description", s.Key)
	}
	if s.Default == "" {
		return nil
	}
	var err error
	switch s.Kind {
	case Int:
		_, err = strconv.Atoi(s.Default)
	case Size:
		_, err = ParseSize(s.Default)
	case Duration:
		_, err = time.ParseDuration(s.Default)
	case Bool:
		_, err = strconv.ParseBool(s.Default)
	}
	if err != nil {
		return fmt.Errorf("setting %s: default %q is not a %s", s.Key, s.Default, s.Kind)
	}
	return nil
}

// Table is a list of settings; tables are joined with Join.
type Table []Setting

// Join concatenates tables.
func Join(tables ...Table) Table {
	var out Table
	for _, t := range tables {
		out = append(out, t...)
	}
	return out
}

// Pick returns the settings of t named by keys, in that order; it panics on
// an unknown key (a programming error every test of the loader finds).
func (t Table) Pick(keys ...string) Table {
	out := make(Table, 0, len(keys))
	for _, k := range keys {
		s, ok := t.lookup(k)
		if !ok {
			panic("config: no setting " + k)
		}
		out = append(out, s)
	}
	return out
}

func (t Table) lookup(key string) (Setting, bool) {
	for _, s := range t {
		if s.Key == key {
			return s, true
		}
	}
	return Setting{}, false
}

// Check reports a setting without a description, a default its kind does
// not parse and a key defined twice.
func (t Table) Check() error {
	seen := map[string]bool{}
	var problems []string
	for _, s := range t {
		if seen[s.Key] {
			problems = append(problems, "setting "+s.Key+" is defined twice")
		}
		seen[s.Key] = true
		if err := s.check(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("config table: %s", strings.Join(problems, "; "))
	}
	return nil
}
