package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/acme/platform/gateway/internal/proxy"
	"github.com/getkin/kin-openapi/openapi3"
)

func load(t *testing.T, data []byte) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return doc
}

// The document is OpenAPI 3.1, loads, resolves every $ref and validates
// (kin-openapi validates 3.1 documents with JSON Schema 2020-12 semantics).
func TestDocumentValidates(t *testing.T) {
	doc := load(t, YAML())
	if !doc.IsOpenAPI31OrLater() || !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableMultiError(), openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	ids := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" || ids[op.OperationID] {
				t.Errorf("%s %s: missing or duplicate operationId %q", method, path, op.OperationID)
			}
			ids[op.OperationID] = true
			if op.Responses.Len() == 0 {
				t.Errorf("%s %s: no responses", method, path)
			}
		}
	}
}

// The JSON form is the same document.
func TestJSONIsTheSameDocument(t *testing.T) {
	js, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(js) {
		t.Fatal("JSON() is not valid JSON")
	}
	a, _ := json.Marshal(load(t, YAML()))
	b, _ := json.Marshal(load(t, js))
	if !bytes.Equal(a, b) {
		t.Fatal("the YAML and JSON forms load to different documents")
	}
	// Key order is kept: the JSON starts as the YAML does.
	if !bytes.HasPrefix(js, []byte("{\n  \"openapi\": \"3.1.0\",\n  \"info\"")) {
		t.Fatalf("JSON does not keep the YAML's key order: %.60q", js)
	}
}

func TestToJSONScalars(t *testing.T) {
	got, err := toJSON([]byte("a: 1\nb: 1.5\nc: true\nd: null\ne: '1'\nf: 2026-05-01\ng: [x, ~]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, got)
	if want := `{"a":1,"b":1.5,"c":true,"d":null,"e":"1","f":"2026-05-01","g":["x",null]}`; compact.String() != want {
		t.Fatalf("got %s, want %s", compact.String(), want)
	}
	for _, bad := range []string{"a: 1\na: 2\n", "a: .inf\n", "? [x]\n: 1\n"} {
		if _, err := toJSON([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Every path of the document reaches a gateway route (or is served by the
// gateway itself), and every gateway route is documented.
func TestDocumentCoversTheRouteTable(t *testing.T) {
	doc := load(t, YAML())
	local := map[string]bool{"/healthz": true, "/readyz": true, "/openapi.yaml": true, "/openapi.json": true}
	param := regexp.MustCompile(`\{[^}]+\}`)
	used := map[string]bool{}
	for _, path := range doc.Paths.InMatchingOrder() {
		if local[path] {
			continue
		}
		concrete := param.ReplaceAllString(path, "x")
		found := false
		for _, r := range proxy.Routes {
			if concrete == r.Prefix || (!r.Exact && strings.HasPrefix(concrete, r.Prefix+"/")) {
				used[r.Prefix], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("%s is documented but no gateway route serves it", path)
		}
	}
	for _, r := range proxy.Routes {
		if !used[r.Prefix] {
			t.Errorf("gateway route %s is not documented", r.Prefix)
		}
	}
}

func TestServe(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	js, _ := JSON()
	for _, c := range []struct {
		path, ctype string
		body        []byte
	}{{"/openapi.yaml", "application/yaml", YAML()}, {"/openapi.json", "application/json", js}} {
		resp, err := http.Get(srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		etag := resp.Header.Get("ETag")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.ctype || !bytes.Equal(got, c.body) ||
			resp.Header.Get("Cache-Control") != CacheControl || !strings.HasPrefix(etag, `"`) {
			t.Fatalf("%s: %d %v (%d bytes)", c.path, resp.StatusCode, resp.Header, len(got))
		}
		for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
			req, _ := http.NewRequest("GET", srv.URL+c.path, nil)
			req.Header.Set("If-None-Match", inm)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 304 || resp.Header.Get("ETag") != etag {
				t.Fatalf("%s If-None-Match %s: %d", c.path, inm, resp.StatusCode)
			}
		}
		req, _ := http.NewRequest("GET", srv.URL+c.path, nil)
		req.Header.Set("If-None-Match", `"stale"`)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s with a stale ETag: %d", c.path, resp.StatusCode)
		}
	}
	if yamlTag, jsonTag := etagOf(t, srv.URL+"/openapi.yaml"), etagOf(t, srv.URL+"/openapi.json"); yamlTag == jsonTag {
		t.Fatal("the two representations share an ETag")
	}
}

func etagOf(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Head(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.Header.Get("ETag")
}
