package httpapi

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/otlpingest"
)

// Every exported error of the logs package and of the OTLP decoder (an
// Err* variable or a type with an Error method) has a row in errorMap: a
// new error without one fails here instead of reaching clients as a 500.
func TestErrorMapCoversDomainErrors(t *testing.T) {
	for _, pkg := range []string{"logs", "otlpingest"} {
		inTable := namesInTable(t, "errors.go", "errorMap", pkg)
		for _, name := range exportedErrors(t, "../"+pkg) {
			if !inTable[name] {
				t.Errorf("%s.%s has no row in errorMap (errors.go)", pkg, name)
			}
		}
	}
}

// No row is shadowed by an earlier one: each row answers its own error,
// also when wrapped.
func TestErrorMapRowsAnswerTheirOwnErrors(t *testing.T) {
	for i, row := range errorMap {
		err := fmt.Errorf("wrapped: %w", row.sample)
		if _, ok := row.answer(errScope{}, err); !ok {
			t.Errorf("row %d does not match its own error %v", i, row.sample)
		}
		for j := range i {
			if _, ok := errorMap[j].answer(errScope{}, err); ok {
				t.Errorf("row %d (%v) is shadowed by row %d", i, row.sample, j)
			}
		}
	}
}

// What fail answers, with what the scope names.
func TestFail(t *testing.T) {
	write := errScope{unknownApp: 400, sentType: "bogus"}
	unknown := &logs.UnknownAppError{Name: "NOPE", Known: []logs.App{{ID: "1", Name: "LOGGING"}}}
	for _, tc := range []struct {
		name   string
		err    error
		scope  errScope
		status int
		code   string
		field  string
		body   string // fmt.Sprint of the spec's own body, if any
	}{
		{"unknownAppRead404", unknown, errScope{}, 404, "unknown_app", "", `map[error:unknown application "NOPE" knowApps:[{1 LOGGING}] sentAppName:NOPE]`},
		{"unknownAppWrite400", unknown, write, 400, "unknown_app", "", `map[error:unknown application "NOPE" knowApps:[{1 LOGGING}] sentAppName:NOPE]`},
		{"invalidType400", &logs.InvalidError{Field: "type", Code: "invalid_type", Msg: "m"}, write, 400, "invalid_type", "type", `map[error:type must be one of log, error, db knownTypes:[log error db] sentType:bogus]`},
		{"invalidBody400", &logs.InvalidError{Field: "logBody", Code: "too_long", Msg: "m"}, write, 400, "too_long", "logBody", ""},
		{"cursor404", fmt.Errorf("x: %w", logs.ErrNotFound), errScope{}, 404, "cursor_not_found", "before", ""},
		{"query400", logs.ErrSearchQuote, errScope{}, 400, "invalid_query", "q", ""},
		{"otlp400", fmt.Errorf("%w: JSON", otlpingest.ErrBadRequest), errScope{}, 400, "invalid_otlp", "body", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var we *web.Error
			if got := fail(tc.err, tc.scope); !errors.As(got, &we) {
				t.Fatalf("got %v, want a *web.Error", got)
			}
			body := ""
			if we.Body != nil {
				body = fmt.Sprint(map[string]any(we.Body))
			}
			if we.Status != tc.status || we.Code != tc.code || we.Field != tc.field || body != tc.body {
				t.Errorf("got %d %s %q %s, want %d %s %q %s", we.Status, we.Code, we.Field, body, tc.status, tc.code, tc.field, tc.body)
			}
		})
	}
	for _, err := range []error{logs.ErrDuplicate, logs.ErrWriterClosed, os.ErrDeadlineExceeded} {
		if got := fail(err, errScope{}); got != err {
			t.Errorf("%v: got %v, want it passed through to the error handler", err, got)
		}
	}
}

// exportedErrors lists the exported Err* variables and the exported types
// with an Error method declared in the non-test Go files of dir.
func exportedErrors(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if vs, ok := s.(*ast.ValueSpec); ok && d.Tok == token.VAR {
						for _, n := range vs.Names {
							if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
								names = append(names, n.Name)
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv != nil && d.Name.Name == "Error" && len(d.Recv.List) == 1 {
					if recv := receiverType(d.Recv.List[0].Type); ast.IsExported(recv) {
						names = append(names, recv)
					}
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("no exported errors found in %s", dir)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func receiverType(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// namesInTable lists the names of package pkg (pkg.Name) that the value of
// the package-level variable table in file mentions.
func namesInTable(t *testing.T, file, table, pkg string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	found := false
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if n.Name != table || i >= len(vs.Values) {
					continue
				}
				found = true
				ast.Inspect(vs.Values[i], func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == pkg {
							names[sel.Sel.Name] = true
						}
					}
					return true
				})
			}
		}
	}
	if !found {
		t.Fatalf("no variable %s in %s", table, file)
	}
	return names
}
