package apierror

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// kindNames parses this package's source for the constants of type Kind
// (the const block that declares them), in order, blanks excluded.
func kindNames(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "apierror.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		typed := false
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); ok {
				typed = id.Name == "Kind"
			}
			if !typed {
				continue
			}
			for _, n := range vs.Names {
				if n.Name != "_" && n.Name != "kinds" {
					names = append(names, n.Name)
				}
			}
		}
	}
	return names
}

var verb = regexp.MustCompile(`%[sdv]`)

// args fills a format's verbs.
func args(format string) []any {
	var out []any
	for _, v := range verb.FindAllString(format, -1) {
		if v == "%d" {
			out = append(out, 7)
		} else {
			out = append(out, "x")
		}
	}
	return out
}

var codeShape = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)

// Every condition declared has a complete row, and every row renders
// without a formatting fault.
func TestEveryKindIsInTheTable(t *testing.T) {
	names := kindNames(t)
	if len(names) != int(kinds)-1 {
		t.Fatalf("%d Kind constants in the source, %d before kinds: declare new ones before kinds", len(names), int(kinds)-1)
	}
	if len(table) != len(names) {
		t.Errorf("the table has %d rows for %d kinds", len(table), len(names))
	}
	for k := Kind(1); k < kinds; k++ {
		name := names[k-1]
		e, ok := table[k]
		if !ok {
			t.Errorf("%s has no row in the table", name)
			continue
		}
		if e.Status < 400 || e.Status > 599 || !codeShape.MatchString(e.Code) || e.Message == "" {
			t.Errorf("%s: incomplete row %+v", name, e)
		}
		if a, b := len(verb.FindAllString(e.Message, -1)), len(verb.FindAllString(e.Authenticate, -1)); e.Authenticate != "" && a != b {
			t.Errorf("%s: the message takes %d arguments, the header %d", name, a, b)
		}
		w := httptest.NewRecorder()
		Write(w, k, args(e.Message)...)
		if strings.Contains(w.Body.String(), "%!") || strings.Contains(w.Header().Get("WWW-Authenticate"), "%!") {
			t.Errorf("%s: formatting fault: %s", name, w.Body)
		}
		var body map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body) != 2 || body["code"] != e.Code || body["error"] == "" {
			t.Errorf("%s: body %s (%v)", name, w.Body, err)
		}
		if w.Code != e.Status || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q", name, w.Code, w.Header().Get("Content-Type"))
		}
		if got := w.Header().Get("Retry-After"); (got == "5") != (e.Status == http.StatusServiceUnavailable) {
			t.Errorf("%s: status %d with Retry-After %q", name, e.Status, got)
		}
	}
}

// Answers as clients see them (docs/gateway.md, docs/reliability.md).
func TestWrite(t *testing.T) {
	for _, c := range []struct {
		name   string
		write  func(http.ResponseWriter)
		status int
		body   string
		header map[string]string
	}{
		{"notFound404", func(w http.ResponseWriter) { Write(w, NoRoute) }, 404,
			`{"code":"not_found","error":"no such route"}`, map[string]string{"X-Content-Type-Options": "nosniff"}},
		{"unavailable503", func(w http.ResponseWriter) { Write(w, ServiceUnavailable, "files") }, 503,
			`{"code":"service_unavailable","error":"the files service is unavailable, try again shortly"}`, map[string]string{"Retry-After": "5"}},
		{"scope403", func(w http.ResponseWriter) { Write(w, KeyScopeMissing, "logs:read") }, 403,
			`{"code":"insufficient_scope","error":"this API key lacks the scope logs:read"}`,
			map[string]string{"WWW-Authenticate": `Bearer error="insufficient_scope", scope="logs:read"`}},
		{"key401", func(w http.ResponseWriter) { Write(w, KeyInvalid) }, 401,
			`{"code":"invalid_api_key","error":"the API key is unknown, expired or revoked"}`,
			map[string]string{"WWW-Authenticate": `Bearer error="invalid_token"`}},
		{"limit413", func(w http.ResponseWriter) { Write(w, BodyOverLimit, int64(1024)) }, 413,
			`{"code":"body_too_large","error":"request body over 1024 bytes"}`, nil},
		{"stalled408", func(w http.ResponseWriter) { Write(w, BodyStalled) }, 408,
			`{"code":"request_timeout","error":"the request body stopped arriving before it was complete"}`, map[string]string{"Connection": "close"}},
		{"headers431", func(w http.ResponseWriter) {
			WriteFields(w, HeadersTooLarge, map[string]any{"limit": 32768})
		}, 431, `{"code":"headers_too_large","error":"request headers too large","limit":32768}`, map[string]string{"Connection": "close"}},
		{"unknownKind500", func(w http.ResponseWriter) { Write(w, kinds, "x") }, 500,
			`{"code":"internal","error":"internal error"}`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			c.write(w)
			if w.Code != c.status || w.Body.String() != c.body+"\n" {
				t.Errorf("got %d %s, want %d %s", w.Code, w.Body, c.status, c.body)
			}
			for k, v := range c.header {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if c.header["Connection"] == "" && w.Header().Get("Connection") != "" {
				t.Errorf("Connection: %q", w.Header().Get("Connection"))
			}
		})
	}
}

// scan is what the gateway's sources (tests excepted) say about errors.
type scan struct {
	fset   *token.FileSet
	used   map[string]bool     // names selected from package apierror
	byHand map[string][]string // by file: error bodies written by hand
}

// scanGateway parses every Go file of the gateway module but tests,
// testdata and this package.
func scanGateway(t *testing.T) scan {
	t.Helper()
	root := filepath.Join("..", "..") // the gateway module
	s := scan{fset: token.NewFileSet(), used: map[string]bool{}, byHand: map[string][]string{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "apierror") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(s.fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool { s.inspect(filepath.ToSlash(rel), n); return true })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s scan) inspect(file string, n ast.Node) {
	switch n := n.(type) {
	case *ast.SelectorExpr:
		x, ok := n.X.(*ast.Ident)
		switch {
		case ok && x.Name == "apierror":
			s.used[n.Sel.Name] = true
		case ok && x.Name == "http" && n.Sel.Name == "Error":
			s.byHand[file] = append(s.byHand[file], s.fset.Position(n.Pos()).String()+": http.Error")
		}
	case *ast.BasicLit:
		// A map key "error", or a JSON text with one.
		if n.Kind == token.STRING && (n.Value == `"error"` || strings.Contains(n.Value, `"error":`) ||
			strings.Contains(n.Value, `\"error\":`)) {
			s.byHand[file] = append(s.byHand[file], s.fset.Position(n.Pos()).String()+": "+n.Value)
		}
	}
}

// No gateway code writes a JSON error body itself: every one goes through
// Write (so through the table), and every kind in the table is answered
// somewhere.
func TestErrorsAnsweredOnlyThroughTheTable(t *testing.T) {
	s := scanGateway(t)
	if !s.used["Write"] {
		t.Fatal("no call of apierror.Write found: is the walk looking at the gateway module?")
	}
	for _, hits := range s.byHand {
		for _, h := range hits {
			t.Errorf("an error body written by hand (use apierror.Write): %s", h)
		}
	}
	names := kindNames(t)
	if !slices.Contains(names, "NoRoute") {
		t.Fatalf("kindNames found %v", names)
	}
	for _, name := range names {
		if !s.used[name] {
			t.Errorf("apierror.%s is in the table but never answered", name)
		}
	}
}
