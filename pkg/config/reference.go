package config

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Reference renders the table as the Markdown table of the configuration
// reference: the variable a user sets (with its prefix), the other names
// that supply it, the default and the description.
func Reference(prefix string, t Table) string {
	var b strings.Builder
	b.WriteString("| Variable | Kind | Default | What it does |\n|---|---|---|---|\n")
	for _, s := range t {
		names := s.Names(strings.ToUpper(prefix))
		cell := "`" + names[0] + "`"
		if len(names) > 1 {
			cell += " (also " + codeList(names[1:]) + ")"
		}
		def := "`" + s.Default + "`"
		switch {
		case s.DefaultDoc != "":
			def = s.DefaultDoc
		case s.Default == "":
			def = "empty"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell, s.Kind, def, s.Doc)
	}
	return b.String()
}

func codeList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "`" + n + "`"
	}
	return strings.Join(q, ", ")
}

// The generated part of a document sits between these two lines, with the
// section's name in place of %s.
const (
	beginMark = "<!-- generated: settings %s; edit the table in code, then run `go run ./scripts/configdoc` -->\n"
	endMark   = "<!-- end of generated settings %s -->\n"
)

// SyncReference compares the generated section name of the Markdown file
// at path with content. With write set it rewrites the section instead;
// without, a difference is an error that says how to regenerate.
func SyncReference(path, name, content string, write bool) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := []byte(fmt.Sprintf(beginMark, name)), []byte(fmt.Sprintf(endMark, name))
	i := bytes.Index(doc, begin)
	j := bytes.Index(doc, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no generated section %q (the lines %q and %q)", path, name, strings.TrimSpace(string(begin)), strings.TrimSpace(string(end)))
	}
	start := i + len(begin)
	if string(doc[start:j]) == content {
		return nil
	}
	if !write {
		return fmt.Errorf("%s: the settings of %q differ from the table in code; run `go run ./scripts/configdoc` to regenerate", path, name)
	}
	out := append(append(append([]byte{}, doc[:start]...), content...), doc[j:]...)
	return os.WriteFile(path, out, 0o644)
}

// WriteReferenceEnv names the environment variable that makes the
// reference tests rewrite the document instead of comparing
// (scripts/configdoc sets it).
const WriteReferenceEnv = "ACME_WRITE_CONFIG_DOC"

// WriteReference reports whether the reference tests should rewrite.
func WriteReference() bool { return os.Getenv(WriteReferenceEnv) == "1" }
