package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/gateway/internal/upstream"
	"github.com/acme/platform/pkg/identity"
)

// Session ids the fake auth knows (43 base64url characters, like real ones).
var (
	fuzzUserSID  = strings.Repeat("u", 43)
	fuzzAdminSID = strings.Repeat("A", 43)
)

// fakeUpstreams answers as auth's /ms/me would for the two known sessions
// and as any service otherwise: it reads the whole body and echoes 200. A
// request that reaches it must carry exactly one identity token for the
// route's service and no client-supplied forwarding headers.
type fakeUpstreams struct{}

func (f *fakeUpstreams) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return nil, err // the proxy's body limit tripped
		}
	}
	resp := func(status int, body string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}
	}
	if r.URL.Path == "/readyz" && r.Header.Get(identity.Header) == "" {
		return resp(200, `{"status":"ok"}`), nil // the balancer's probe
	}
	if r.URL.Path == "/ms/me" && r.Header.Get("X-Service-Credential") == "cred" && r.Header.Get(identity.Header) == "" {
		// The resolver's own call (no identity token).
		return resp(401, `{"code":"invalid_session"}`), nil
	}
	if len(r.Header.Values(identity.Header)) != 1 {
		return resp(599, `{"code":"token_count"}`), nil
	}
	return resp(200, `{"ok":true}`), nil
}

type resolverTransport struct{}

func (resolverTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var b struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.NewDecoder(r.Body).Decode(&b)
	answer := func(status int, body string) (*http.Response, error) {
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
	switch b.SessionID {
	case fuzzUserSID:
		return answer(200, `{"user":{"id":"u1","roleName":"user"},"session":{"id":"s1"}}`)
	case fuzzAdminSID:
		return answer(200, `{"user":{"id":"a1","roleName":"admin"},"session":{"id":"s2"}}`)
	}
	return answer(401, `{"code":"invalid_session"}`)
}

func fuzzHandler(t testing.TB) *Handler {
	_, priv, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]*upstream.Group{}
	for i, s := range []string{"auth", "files", "logs"} {
		// An address of its own each (never dialled: the fake transport
		// answers), probed through the same fake.
		g, err := upstream.New(s, []string{fmt.Sprintf("http://192.0.2.%d", i+1)}, upstream.Options{Transport: &fakeUpstreams{}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		groups[s] = g
	}
	resolver := sessions.NewResolver(groups["auth"], "cred", &http.Client{Transport: resolverTransport{}}, time.Second)
	return New(Config{
		Upstreams: groups, Resolver: resolver, Signer: identity.NewSigner(priv, 30*time.Second),
		AllowedOrigins: []string{"https://app.example"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		TokenTTL:   30 * time.Second,
		BodyLimits: map[string]int64{"auth": 1 << 10, "logs": 1 << 10, "files": 1 << 10, "upload": 4 << 10, "image": 2 << 10},
	})
}

// FuzzGateway sends arbitrary method, path, cookie, headers and body through
// the gateway's request path (with in-memory upstreams): it never panics,
// never answers 5xx (every upstream is up), always answers errors as JSON,
// and never lets a request reach a protected route without a session.
func FuzzGateway(f *testing.F) {
	seeds := []struct {
		method, path, cookie, ct, origin, extra string
		body                                    []byte
	}{
		{"GET", "/me", "sessionId=" + fuzzUserSID, "", "", "", nil},
		{"GET", "/me", "", "application/json", "", "", []byte(`{"sessionId":"` + fuzzUserSID + `"}`)},
		{"GET", "/me", "sessionId=" + fuzzUserSID, "application/json", "", "", []byte(`{"sessionId":"x"}`)},
		{"GET", "/me", "", "application/json", "", "", []byte(`{"sessionId":""}`)},
		{"GET", "/me", "", "text/plain", "", "", []byte(`x`)},
		{"POST", "/signin", "", "application/json", "https://evil.example", "", []byte(`{}`)},
		{"POST", "/log", "sessionId=" + fuzzAdminSID, "application/json", "https://app.example", "", bytes.Repeat([]byte("x"), 2000)},
		{"GET", "/log/error/1", "sessionId=" + fuzzUserSID, "", "", "", nil},
		{"GET", "/users", "sessionId=garbage;sessionId=" + fuzzAdminSID, "", "", "X-Acme-Identity: forged", nil},
		{"OPTIONS", "/files", "", "", "https://app.example", "", nil},
		{"GET", "/ms/me", "", "application/json", "", "X-Service-Credential: cred", []byte(`{"sessionId":"x"}`)},
		{"GET", "/images/../../etc/passwd", "", "", "", "", nil},
		{"POST", "/upload/file", "sessionId=" + fuzzUserSID, "multipart/form-data; boundary=x", "", "", []byte("--x--")},
		{"GET", "/%2e%2e/me", "", "", "", "X-Forwarded-For: 1.2.3.4", nil},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.cookie, s.ct, s.origin, s.extra, s.body)
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, method, path, cookie, ct, origin, extra string, body []byte) {
		if !validMethod(method) || !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \t\r\n?#\x00") {
			return // not a request line net/http would parse
		}
		req, err := http.NewRequest(method, "http://gw.test"+path, bytes.NewReader(body))
		if err != nil {
			return
		}
		for k, v := range map[string]string{"Cookie": cookie, "Content-Type": ct, "Origin": origin} {
			if v != "" && validHeader(v) {
				req.Header.Set(k, v)
			}
		}
		if k, v, ok := strings.Cut(extra, ": "); ok && validToken(k) && validHeader(v) {
			req.Header.Add(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		status := rec.Code
		if status >= 500 {
			t.Fatalf("%s %s: status %d %s", method, path, status, rec.Body.String())
		}
		if status >= 400 && !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Fatalf("%s %s: %d without a JSON body", method, path, status)
		}
		if status == 200 && method != http.MethodOptions {
			route, ok := match(req.URL.Path)
			if !ok {
				t.Fatalf("%s: 200 for an unknown route", path)
			}
			if (route.Access == Session || route.Access == Admin) && !strings.Contains(cookie+string(body), fuzzUserSID) &&
				!strings.Contains(cookie+string(body), fuzzAdminSID) {
				t.Fatalf("%s %s: 200 without a session", method, path)
			}
			if route.Access == Admin && !strings.Contains(cookie, fuzzAdminSID) {
				t.Fatalf("%s %s: 200 without an admin session", method, path)
			}
		}
	})
}

func validMethod(m string) bool { return m != "" && validToken(m) && m != "CONNECT" }

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func validHeader(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// FuzzMatch checks the route table: a path matches at most the entry whose
// prefix it equals or extends at a slash, and never an exact route's
// sub-path.
func FuzzMatch(f *testing.F) {
	for _, p := range []string{"/me", "/mee", "/ms/me/x", "/log", "/logs", "/", "", "/images/x/y"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		r, ok := match(path)
		if !ok {
			return
		}
		if path != r.Prefix && (r.Exact || !strings.HasPrefix(path, r.Prefix+"/")) {
			t.Fatalf("%q matched %+v", path, r)
		}
	})
}
