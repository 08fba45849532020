package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// The OpenAPI contract check. Every HTTP client the suite uses against the
// gateway goes through apiCheck, which validates each exchange against the
// document the gateway serves (gateway/internal/openapi/openapi.yaml) with
// kin-openapi's openapi3filter:
//
//   - every response: the operation exists in the document, its status code is
//     declared for that operation (HEAD and 304 included, which ValidateResponse
//     itself skips), its Content-Type is one the document lists, its declared
//     headers are present and well formed, and a JSON body matches the schema;
//   - requests only when the answer is a success (1xx-3xx): the server accepted
//     the request, so it must conform to the document (parameters, security,
//     JSON body). Tests deliberately send bad input and expect 4xx; those
//     requests are not validated, their responses are. Multipart bodies are
//     streamed (up to 32 MiB) and never buffered: only their content type is
//     checked.
//
// A mismatch fails the test with the request that caused it. After the run
// TestMain lists the operations of the document no test exercised; when the
// whole suite ran (no -run), any such operation fails the run.

// openapiPath is the document, relative to this package's directory.
var openapiPath = filepath.Join("..", "..", "gateway", "internal", "openapi", "openapi.yaml")

var api struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error

	mu   sync.Mutex
	seen map[string]map[int]bool // "GET /log/{type}/{page}" → statuses seen
}

func loadAPI() (*openapi3.T, routers.Router, error) {
	api.once.Do(func() {
		raw, err := os.ReadFile(openapiPath)
		if err != nil {
			api.err = err
			return
		}
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(raw)
		if err != nil {
			api.err = fmt.Errorf("openapi: load: %w", err)
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			api.err = fmt.Errorf("openapi: invalid document: %w", err)
			return
		}
		// Server-sent events (GET /log/tail) are never read whole: the
		// stream is validated by status, content type and headers only
		// (the body seen by the decoder is empty).
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.FileBodyDecoder)
		// The log export (NDJSON, possibly gzipped) is checked the same
		// way; its tests parse the lines themselves.
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder("application/x-protobuf", openapi3filter.FileBodyDecoder)
		// Match any host: every test's gateway listens on its own port.
		doc.Servers = nil
		router, err := gorillamux.NewRouter(doc)
		if err != nil {
			api.err = fmt.Errorf("openapi: router: %w", err)
			return
		}
		api.doc, api.router = doc, router
		api.seen = map[string]map[int]bool{}
	})
	return api.doc, api.router, api.err
}

// apiCheck is an http.RoundTripper that validates every exchange with the
// gateway (base) against the OpenAPI document.
type apiCheck struct {
	t    *testing.T
	base *url.URL
	next http.RoundTripper
}

// checked wraps next for requests to the gateway at base.
func checked(t *testing.T, base string, next http.RoundTripper) http.RoundTripper {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	if next == nil {
		next = http.DefaultTransport
	}
	return &apiCheck{t: t, base: u, next: next}
}

func (a *apiCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != a.base.Host {
		return a.next.RoundTrip(req)
	}
	_, router, err := loadAPI()
	if err != nil {
		a.t.Errorf("%v", err)
		return a.next.RoundTrip(req)
	}
	what := req.Method + " " + req.URL.RequestURI()
	route, params, ferr := router.FindRoute(req)
	if ferr != nil {
		a.t.Errorf("openapi: %s: not in the document: %v", what, ferr)
		return a.next.RoundTrip(req)
	}
	// A copy of a JSON request body, for validating the request later.
	var reqBody []byte
	// (A compressed body, such as an OTLP export's, is checked as a
	// streamed one: by media type only.)
	if req.Body != nil && req.GetBody != nil && isJSON(req.Header.Get("Content-Type")) && req.Header.Get("Content-Encoding") == "" {
		if rc, err := req.GetBody(); err == nil {
			reqBody, _ = io.ReadAll(rc)
			rc.Close()
		}
	}

	resp, err := a.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	key := req.Method + " " + route.Path
	api.mu.Lock()
	if api.seen[key] == nil {
		api.seen[key] = map[int]bool{}
	}
	api.seen[key][resp.StatusCode] = true
	api.mu.Unlock()

	// Only JSON and YAML bodies are read (and put back) for validation;
	// file bytes stream through untouched.
	var respBody []byte
	ct := resp.Header.Get("Content-Type")
	if isJSON(ct) || strings.HasPrefix(ct, "application/yaml") {
		respBody, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(respBody))
		if err != nil {
			return resp, nil // the test reading the body sees the error
		}
	}
	if err := validateExchange(req, reqBody, route, params, resp, respBody); err != nil {
		a.t.Errorf("openapi: %s → %d: %v", what, resp.StatusCode, err)
	}
	return resp, nil
}

func validateExchange(req *http.Request, reqBody []byte, route *routers.Route, params map[string]string, resp *http.Response, respBody []byte) error {
	ctx := context.Background()
	if route.Operation.Responses.Status(resp.StatusCode) == nil && route.Operation.Responses.Default() == nil {
		return fmt.Errorf("status %d is not declared for %s %s", resp.StatusCode, req.Method, route.Path)
	}
	// A copy of the request with the buffered body: the original's body
	// has been sent.
	vreq := req.Clone(ctx)
	vreq.Body, vreq.GetBody = http.NoBody, nil
	if reqBody != nil {
		vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
		vreq.ContentLength = int64(len(reqBody))
	}
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true,
		MultiError:            true,
		AuthenticationFunc:    credentialPresent,
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                opts,
	}
	out.SetBodyBytes(respBody)
	var errs []error
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		errs = append(errs, fmt.Errorf("response: %w", err))
	}
	if resp.StatusCode < 400 {
		ropts := *opts
		if reqBody == nil && req.Body != nil && req.Body != http.NoBody {
			// A streamed (multipart) body: only its media type is checked.
			ropts.ExcludeRequestBody = true
			if rb := route.Operation.RequestBody; rb == nil || rb.Value.Content.Get(req.Header.Get("Content-Type")) == nil {
				errs = append(errs, fmt.Errorf("request: content type %q is not declared", req.Header.Get("Content-Type")))
			}
		}
		in.Options = &ropts
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			errs = append(errs, fmt.Errorf("request (answered %d): %w", resp.StatusCode, err))
		}
	}
	return errors.Join(errs...)
}

// credentialPresent checks that a request the server accepted carried the
// credential of a security scheme the operation lists: the gateway checks
// its value, the contract only says where it goes.
func credentialPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s, r := in.SecurityScheme, in.RequestValidationInput.Request
	switch {
	case s.Type == "apiKey" && s.In == "cookie":
		if _, err := r.Cookie(s.Name); err == nil {
			return nil
		}
	case s.Type == "apiKey" && s.In == "header":
		if r.Header.Get(s.Name) != "" {
			return nil
		}
	case s.Type == "http" && s.Scheme == "bearer":
		if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			return nil
		}
		return errors.New("no Authorization: Bearer header")
	default:
		return fmt.Errorf("security scheme %s (%s in %s) not supported by the check", in.SecuritySchemeName, s.Type, s.In)
	}
	return fmt.Errorf("no %s %s", s.In, s.Name)
}

func isJSON(ct string) bool {
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// reportAPICoverage lists the document's operations no test exercised.
// When the whole suite ran and passed, any such operation fails the run.
func reportAPICoverage(code int) int {
	doc, _, err := loadAPI()
	if err != nil || api.seen == nil {
		return code
	}
	var all, missing []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			op := method + " " + path
			all = append(all, op)
			api.mu.Lock()
			if len(api.seen[op]) == 0 {
				missing = append(missing, op)
			}
			api.mu.Unlock()
		}
	}
	slices.Sort(missing)
	if len(api.seen) == 0 {
		return code // no test talked to a gateway
	}
	fmt.Printf("openapi: %d of %d operations exercised\n", len(all)-len(missing), len(all))
	for _, op := range missing {
		fmt.Printf("openapi: not exercised: %s\n", op)
	}
	if f := flag.Lookup("test.run"); code == 0 && len(missing) > 0 && f != nil && f.Value.String() == "" {
		fmt.Println("openapi: FAIL: every operation of the document must be exercised by the suite")
		return 1
	}
	return code
}
