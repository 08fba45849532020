package app

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/acme/platform/gateway/internal/openapi"
)

// The gateway serves the API document itself, without a session, and
// answers revalidations with 304; other methods fall through to the proxy.
func TestServesOpenAPIDocument(t *testing.T) {
	g := startGateway(t, nil)
	resp, err := http.Get(g.url + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || !bytes.Equal(body, openapi.YAML()) || etag == "" {
		t.Fatalf("GET /openapi.yaml: %d %v", resp.StatusCode, resp.Header)
	}
	req, _ := http.NewRequest("GET", g.url+"/openapi.yaml", nil)
	req.Header.Set("If-None-Match", etag)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 304 {
		t.Fatalf("revalidation: %d", resp.StatusCode)
	}
	if status, body := do(t, "GET", g.url+"/openapi.json", "", "", nil); status != 200 || body["openapi"] != "3.1.0" {
		t.Fatalf("GET /openapi.json: %d", status)
	}
	if status, body := do(t, "POST", g.url+"/openapi.json", "", "{}", nil); status != 404 || body["code"] != "not_found" {
		t.Fatalf("POST /openapi.json: %d %v", status, body)
	}
}
