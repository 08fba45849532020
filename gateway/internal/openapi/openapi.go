// Package openapi holds the public API's OpenAPI 3.1 document (openapi.yaml,
// embedded) and serves it from the gateway as YAML and as JSON, public and
// cacheable with an ETag.
package openapi

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"

	"github.com/acme/platform/gateway/internal/apierror"
	"go.yaml.in/yaml/v3"
)

//go:embed openapi.yaml
var yamlDoc []byte

// YAML returns the document as written.
func YAML() []byte { return yamlDoc }

// JSON returns the document converted to indented JSON, keys in the order
// they are written in the YAML.
var JSON = sync.OnceValues(func() ([]byte, error) { return toJSON(yamlDoc) })

// CacheControl is sent with both representations: shared caches may keep
// the document for five minutes, then revalidate it with the ETag.
const CacheControl = "public, max-age=300"

// Register mounts GET (and HEAD) /openapi.yaml and /openapi.json on mux.
func Register(mux *http.ServeMux) {
	mux.Handle("GET /openapi.yaml", document(func() ([]byte, error) { return yamlDoc, nil }, "application/yaml"))
	mux.Handle("GET /openapi.json", document(JSON, "application/json"))
}

func document(body func() ([]byte, error), contentType string) http.Handler {
	var (
		once sync.Once
		doc  []byte
		etag string
		err  error
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			if doc, err = body(); err == nil {
				sum := sha256.Sum256(doc)
				etag = `"` + hex.EncodeToString(sum[:16]) + `"`
			}
		})
		if err != nil {
			apierror.Write(w, apierror.DocumentUnrenderable)
			return
		}
		h := w.Header()
		h.Set("ETag", etag)
		h.Set("Cache-Control", CacheControl)
		if etagMatches(r.Header.Get("If-None-Match"), etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Type", contentType)
		h.Set("Content-Length", fmt.Sprint(len(doc)))
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(doc)
		}
	})
}

// etagMatches applies If-None-Match's weak comparison (RFC 9110, 13.1.2).
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

// toJSON converts a YAML document to JSON, keeping the order of mapping
// keys (a round trip through map[string]any would sort them).
func toJSON(src []byte) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeJSON(&buf, &root); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, buf.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func writeJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return errors.New("openapi: expected one YAML document")
		}
		return writeJSON(buf, n.Content[0])
	case yaml.AliasNode:
		return writeJSON(buf, n.Alias)
	case yaml.MappingNode:
		buf.WriteByte('{')
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return fmt.Errorf("openapi: line %d: only plain scalar mapping keys are supported", k.Line)
			}
			if seen[k.Value] {
				return fmt.Errorf("openapi: line %d: duplicate key %q", k.Line, k.Value)
			}
			seen[k.Value] = true
			if i > 0 {
				buf.WriteByte(',')
			}
			key, _ := json.Marshal(k.Value)
			buf.Write(key)
			buf.WriteByte(':')
			if err := writeJSON(buf, v); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, c); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		switch n.ShortTag() {
		case "!!null":
			v = nil
		case "!!bool", "!!int", "!!float":
			if err := n.Decode(&v); err != nil {
				return fmt.Errorf("openapi: line %d: %w", n.Line, err)
			}
			if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
				return fmt.Errorf("openapi: line %d: %s has no JSON form", n.Line, n.Value)
			}
		default: // strings, and timestamps kept as written
			v = n.Value
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		buf.Write(b)
	default:
		return fmt.Errorf("openapi: line %d: unsupported YAML node", n.Line)
	}
	return nil
}
