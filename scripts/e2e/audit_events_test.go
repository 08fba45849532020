package e2e

import (
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/testkit/errortable"
)

// TestAuditEventsFilterable: the Audit page's event filter offers every
// event type auth records (the Event* constants of its account package),
// and nothing else.
func TestAuditEventsFilterable(t *testing.T) {
	files := errortable.Sources(t, filepath.Join("..", "..", "services", "auth", "internal", "account"))
	if len(files) == 0 {
		t.Fatal("no account sources")
	}
	var recorded []string
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Event") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						recorded = append(recorded, v)
					}
				}
			}
		}
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "gateway", "internal", "console", "assets", "audit.js"))
	if err != nil {
		t.Fatal(err)
	}
	list := regexp.MustCompile(`(?s)const events = \[(.*?)\];`).FindSubmatch(src)
	if list == nil {
		t.Fatal("audit.js: no `const events = [...]`")
	}
	var offered []string
	for _, m := range regexp.MustCompile(`'([^']*)'`).FindAllSubmatch(list[1], -1) {
		if len(m[1]) > 0 {
			offered = append(offered, string(m[1]))
		}
	}
	slices.Sort(recorded)
	slices.Sort(offered)
	for _, e := range recorded {
		if !slices.Contains(offered, e) {
			t.Errorf("the Audit page cannot filter by %s", e)
		}
	}
	for _, e := range offered {
		if !slices.Contains(recorded, e) {
			t.Errorf("the Audit page offers %s, which auth never records", e)
		}
	}
	for _, want := range []string{"signin.email.requested", "identity.linked"} {
		if !slices.Contains(offered, want) {
			t.Errorf("%s is not offered", want)
		}
	}
}
