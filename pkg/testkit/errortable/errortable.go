// Package errortable helps the tests that hold a table to a package's
// declarations, first the services' error-map tests: it reads a
// package's source for the errors it exports and an error table's source
// for the names it maps, so a test can fail on an exported error without a
// row (services/*/internal/httpapi/errors_test.go).
package errortable

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Sources parses the non-test Go files of dir, for a test that reads what
// a package declares.
func Sources(t testing.TB, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	fset := token.NewFileSet()
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// ExportedErrors lists the exported Err* variables and the exported types
// with an Error method declared in the non-test Go files of dir.
func ExportedErrors(t testing.TB, dir string) []string {
	t.Helper()
	var names []string
	for _, f := range Sources(t, dir) {
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

// NamesInTable lists the names of package pkg (pkg.Name) that the value of
// the package-level variable table in file mentions.
func NamesInTable(t testing.TB, file, table, pkg string) map[string]bool {
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
