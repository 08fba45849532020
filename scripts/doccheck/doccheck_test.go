package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocumentLinks checks README.md and docs/: every relative link and
// every #anchor must resolve. A failure names each broken link.
func TestDocumentLinks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	docs, err := Documents(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 2 || docs[0] != "README.md" {
		t.Fatalf("documents found: %v", docs)
	}
	problems, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("broken link %s", p)
	}
	t.Logf("%d documents checked", len(docs))
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Configuration (`GATEWAY_*`)":            "configuration-gateway_",
		"The `_id` index patch":                  "the-_id-index-patch",
		"Services' own errors":                   "services-own-errors",
		"The live tail (`GET /log/tail`)":        "the-live-tail-get-logtail",
		"GET /log/dead?page=&limit=":             "get-logdeadpagelimit",
		"curl (through the gateway, `make run`)": "curl-through-the-gateway-make-run",
		"Scaling, tested":                        "scaling-tested",
		"POST /upload/file — session required":   "post-uploadfile--session-required",
		"A [linked](other.md) **bold** heading":  "a-linked-bold-heading",
		"Größe und Übersicht":                    "größe-und-übersicht",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnchorsNumberRepeatsAndSkipCode(t *testing.T) {
	a := Anchors("# Tests\n\n## Tests\n\n```sh\n# not a heading\n```\n\n### Tests\n<a name=\"Custom\"></a>\n")
	for _, want := range []string{"tests", "tests-1", "tests-2", "custom"} {
		if !a[want] {
			t.Errorf("anchor %q missing from %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a comment in a code block was taken for a heading")
	}
}

// TestCheckFindsBrokenLinks builds a small tree with one good link of each
// kind and one broken link of each kind, and expects exactly the broken ones.
func TestCheckFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", strings.Join([]string{
		"# Title",
		"## A section",
		"[ok](docs/guide.md) [ok](docs/guide.md#settings-x_y) [ok](#a-section) [ok](docs/) [ok](https://example.com/x#y)",
		"[ok](docs/guide.md#settings-1) ![ok](docs/img/a.png) `[not a link](missing.md)`",
		"[bad1](docs/missing.md) [bad2](docs/guide.md#nope) [bad3](#nope)",
		"```",
		"[not a link](missing-in-code.md)",
		"```",
		"[ref]: docs/gone.md",
	}, "\n"))
	write("docs/guide.md", "# Guide\n\n## Settings (`X_Y`)\n\n## Settings\n\n## Settings\n\n[bad4](../../outside.md) [ok](../README.md#title) [bad5](design/x.md)\n")
	write("docs/img/a.png", "png")
	problems, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.File+" "+p.Target)
	}
	want := []string{
		"README.md docs/missing.md",
		"README.md docs/guide.md#nope",
		"README.md #nope",
		"README.md docs/gone.md",
		"docs/guide.md ../../outside.md",
		"docs/guide.md design/x.md",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
