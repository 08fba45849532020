// Package doccheck checks the repository's Markdown documents: every relative
// link must name a file or directory that exists, and every #anchor must name
// a heading of the target document, slugged as GitHub does.
package doccheck

import (
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Problem is one broken link.
type Problem struct {
	File   string // relative to the root
	Line   int
	Target string
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

// Documents lists the checked files, relative to root: README.md and every
// .md file under docs/, then the services' and the gateway's README.md.
func Documents(root string) ([]string, error) {
	var out []string
	if _, err := os.Stat(filepath.Join(root, "README.md")); err == nil {
		out = append(out, "README.md")
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	more, _ := filepath.Glob(filepath.Join(root, "services", "*", "README.md"))
	if _, err := os.Stat(filepath.Join(root, "gateway", "README.md")); err == nil {
		more = append(more, filepath.Join(root, "gateway", "README.md"))
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		out = append(out, filepath.ToSlash(rel))
	}
	sort.Strings(out[min(1, len(out)):])
	return out, nil
}

// Check checks every document under root and returns the broken links.
func Check(root string) ([]Problem, error) {
	docs, err := Documents(root)
	if err != nil {
		return nil, err
	}
	anchors := map[string]map[string]bool{} // absolute path → slugs
	anchorsOf := func(abs string) (map[string]bool, error) {
		if a, ok := anchors[abs]; ok {
			return a, nil
		}
		b, err := os.ReadFile(abs)
		if err != nil {
			return nil, err
		}
		a := Anchors(string(b))
		anchors[abs] = a
		return a, nil
	}
	var problems []Problem
	for _, doc := range docs {
		abs := filepath.Join(root, filepath.FromSlash(doc))
		b, err := os.ReadFile(abs)
		if err != nil {
			return nil, err
		}
		for _, l := range Links(string(b)) {
			bad := func(reason string) {
				problems = append(problems, Problem{File: doc, Line: l.Line, Target: l.Target, Reason: reason})
			}
			if external(l.Target) {
				continue
			}
			path, anchor, _ := strings.Cut(l.Target, "#")
			target := abs
			if path != "" {
				if strings.HasPrefix(path, "/") {
					bad("absolute path: use a path relative to the document")
					continue
				}
				target = filepath.Join(filepath.Dir(abs), filepath.FromSlash(unescape(path)))
				if rel, err := filepath.Rel(root, target); err != nil || strings.HasPrefix(rel, "..") {
					bad("points outside the repository")
					continue
				}
				st, err := os.Stat(target)
				if err != nil {
					bad("no such file or directory")
					continue
				}
				if st.IsDir() {
					if anchor != "" {
						bad("anchor on a directory")
					}
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue // line anchors of source files are not checked
			}
			a, err := anchorsOf(target)
			if err != nil {
				return nil, err
			}
			if !a[strings.ToLower(unescape(anchor))] {
				bad("no heading with anchor #" + anchor)
			}
		}
	}
	return problems, nil
}

func external(t string) bool {
	if strings.HasPrefix(t, "//") {
		return true
	}
	if i := strings.Index(t, ":"); i > 0 {
		scheme := t[:i]
		for _, r := range scheme {
			if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '+' || r == '-' || r == '.') {
				return false
			}
		}
		return true // http:, https:, mailto:, ...
	}
	return false
}

// unescape decodes the %XX escapes of a link target.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// Link is one link of a document.
type Link struct {
	Line   int
	Target string
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	htmlHref   = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*(?:href|src)="([^"]+)"`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// proseLines yields the lines of a Markdown document (index from 0) that
// are outside fenced code blocks (``` or ~~~).
func proseLines(doc string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		fence := ""
		for i, line := range strings.Split(doc, "\n") {
			trim := strings.TrimLeft(line, " ")
			if fence != "" {
				if strings.HasPrefix(trim, fence) {
					fence = ""
				}
				continue
			}
			if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
				fence = trim[:3]
				continue
			}
			if !yield(i, line) {
				return
			}
		}
	}
}

// Links returns the link targets of a Markdown document, outside fenced code
// blocks and code spans: inline links and images, reference definitions and
// HTML href/src attributes.
func Links(doc string) []Link {
	var out []Link
	for i, line := range proseLines(doc) {
		text := codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
			out = append(out, Link{Line: i + 1, Target: strings.Trim(m[1], "<>")})
		}
		if m := refDef.FindStringSubmatch(text); m != nil {
			out = append(out, Link{Line: i + 1, Target: strings.Trim(m[1], "<>")})
		}
		for _, m := range htmlHref.FindAllStringSubmatch(text, -1) {
			out = append(out, Link{Line: i + 1, Target: m[1]})
		}
	}
	return out
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`(?i)<a\s[^>]*(?:name|id)="([^"]+)"`)
	mdLink     = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// Anchors returns the anchors GitHub makes for a document's headings (ATX
// headings outside code blocks, numbered -1, -2, ... when repeated), plus
// the names of HTML anchors.
func Anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(doc) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[strings.ToLower(m[1])] = true
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := Slug(m[2])
		if n, ok := seen[s]; ok {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n+1)
		} else {
			seen[s] = 0
		}
		out[s] = true
	}
	return out
}

// Slug is GitHub's anchor for a heading's text: the rendered text (links
// replaced by their text, code spans by their content, emphasis markers
// dropped) in lower case, every character that is not a letter, a digit,
// a space, '-' or '_' removed, spaces replaced by '-'.
func Slug(heading string) string {
	text := mdLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
