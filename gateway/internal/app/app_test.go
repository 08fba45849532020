package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/nats-io/nats.go"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const (
	userCookie  = "uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu" // 43 chars
	adminCookie = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	credential  = "test-credential"
)

// fakeAuth answers /ms/me for two known sessions and echoes what reached it.
type fakeAuth struct {
	calls   atomic.Int64
	revoked sync.Map // session ids that now answer 401
	extra   sync.Map // more valid session ids → user id
}

func (f *fakeAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/ms/me" {
		f.calls.Add(1)
		if r.Header.Get("X-Service-Credential") != credential {
			w.WriteHeader(401)
			io.WriteString(w, `{"code":"invalid_service_credential"}`)
			return
		}
		var b struct{ SessionID string }
		_ = json.NewDecoder(r.Body).Decode(&b)
		if _, gone := f.revoked.Load(b.SessionID); gone {
			w.WriteHeader(401)
			io.WriteString(w, `{"code":"invalid_session"}`)
			return
		}
		if uid, ok := f.extra.Load(b.SessionID); ok {
			io.WriteString(w, `{"message":"ok","user":{"id":"`+uid.(string)+`","roleName":"user"},"session":{"id":"x"}}`)
			return
		}
		switch b.SessionID {
		case userCookie:
			io.WriteString(w, `{"message":"ok","user":{"id":"u1","roleName":"user"},"session":{"id":"s1"}}`)
		case adminCookie:
			io.WriteString(w, `{"message":"ok","user":{"id":"a1","roleName":"admin"},"session":{"id":"s2"}}`)
		default:
			w.WriteHeader(401)
			io.WriteString(w, `{"code":"invalid_session"}`)
		}
		return
	}
	echo(w, r)
}

// echo reports the identity header and body a service received, and
// echoes the request id as the services do.
func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"identity": r.Header.Get(identity.Header),
		"xff":      r.Header.Get("X-Forwarded-For"),
		"path":     r.URL.Path,
		"bodyLen":  len(body),
		"rid":      r.Header.Get("X-Request-Id"),
	})
}

type gw struct {
	url    string
	auth   *fakeAuth
	verify func(aud string) *identity.Verifier
	env    testkit.Env
}

func startGateway(t *testing.T, extra map[string]string) *gw {
	t.Helper()
	s := testkit.Get(t, testkit.NATS)
	id := testkit.NewIdentity(t)
	fa := &fakeAuth{}
	auth := httptest.NewServer(fa)
	files := httptest.NewServer(http.HandlerFunc(echo))
	logs := httptest.NewServer(http.HandlerFunc(echo))
	t.Cleanup(func() { auth.Close(); files.Close(); logs.Close() })
	env := testkit.Env{
		"GATEWAY_ADDR":                 "127.0.0.1:0",
		"GATEWAY_AUTH_URL":             auth.URL,
		"GATEWAY_FILES_URL":            files.URL,
		"GATEWAY_TUS_URL":              files.URL,
		"GATEWAY_LOGS_URL":             logs.URL,
		"GATEWAY_IDENTITY_PRIVATE_KEY": id.PrivatePEM,
		"SERVICE_CREDENTIAL":           credential,
		"GATEWAY_SESSION_CACHE_TTL":    "1m",
		"NATS_URL":                     s.NATSURL,
		"NATS_SUBJECT_PREFIX":          s.SubjectPrefix(t),
		"GATEWAY_ALLOWED_ORIGINS":      "https://app.example.com",
		"GATEWAY_METRICS_ADDR":         "127.0.0.1:0", // never a fixed port in tests
	}
	for k, v := range extra {
		env[k] = v
	}
	svc := apptest.Start(t, Run, env.Getenv, apptest.Options{IgnoreRunError: true})
	pub, _ := identity.ParsePublicKey(id.PublicPEM)
	return &gw{url: svc.URL, auth: fa, env: env,
		verify: func(aud string) *identity.Verifier { return identity.NewVerifier(pub, aud) }}
}

// do sends body (JSON when not empty) with the session cookie, if any, and
// decodes the JSON answer.
func do(t *testing.T, method, url, cookie, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	c := apptest.NewClient(t, url)
	c.HTTP = http.DefaultClient
	if cookie != "" {
		c = c.With("Cookie", (&http.Cookie{Name: "sessionId", Value: cookie}).String())
	}
	var b any
	if body != "" {
		b = body
	}
	var m map[string]any
	r := c.Do(method, "", b, hdr)
	r.JSON(t, &m)
	return r.Status, m
}

func TestProtectedRoutes(t *testing.T) {
	g := startGateway(t, nil)
	cases := []struct {
		name, method, path, cookie string
		want                       int
		code                       string
	}{
		{"me401NoCookie", "GET", "/me", "", 401, "unauthenticated"},
		{"me401Malformed", "GET", "/me", "short", 401, "invalid_session"},
		{"me401Unknown", "GET", "/me", strings.Repeat("z", 43), 401, "invalid_session"},
		{"upload401", "POST", "/upload/file", "", 401, "unauthenticated"},
		{"log403User", "GET", "/log/log/1", userCookie, 403, "forbidden"},
		{"users403User", "GET", "/users", userCookie, 403, "forbidden"},
		{"usage401", "GET", "/me/usage", "", 401, "unauthenticated"},
		{"adminUsage403User", "PUT", "/usage/u1", userCookie, 403, "forbidden"},
		{"route404", "GET", "/nope", "", 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := do(t, c.method, g.url+c.path, c.cookie, "", nil)
			if status != c.want || body["code"] != c.code {
				t.Fatalf("got %d %v, want %d %s", status, body, c.want, c.code)
			}
		})
	}
}

func TestForwardsSignedIdentityAndStripsForgedOne(t *testing.T) {
	g := startGateway(t, nil)
	forged := "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiIsInJvbGUiOiJhZG1pbiJ9."
	status, body := do(t, "GET", g.url+"/log/log/1", adminCookie, "", map[string]string{
		identity.Header: forged, "X-Forwarded-For": "6.6.6.6",
	})
	if status != 200 {
		t.Fatalf("status %d %v", status, body)
	}
	tok, _ := body["identity"].(string)
	if tok == forged {
		t.Fatal("client's identity header reached the service")
	}
	c, err := g.verify("logs").Verify(tok)
	if err != nil {
		t.Fatalf("service could not verify the gateway token: %v", err)
	}
	if c.UserID() != "a1" || c.Role != "admin" || c.SessionID != "s2" || c.ClientIP != "127.0.0.1" {
		t.Fatalf("claims %+v", c)
	}
	if body["xff"] != "127.0.0.1" {
		t.Fatalf("client-sent X-Forwarded-For kept: %v", body["xff"])
	}
	if _, err := g.verify("files").Verify(tok); err == nil {
		t.Fatal("token for logs verifies for files")
	}

	// A forged identity with no session is still anonymous: 401 at the gateway.
	status, body = do(t, "GET", g.url+"/log/log/1", "", "", map[string]string{identity.Header: forged})
	if status != 401 {
		t.Fatalf("forged header without session: %d %v", status, body)
	}
	// Public routes get an anonymous token.
	status, body = do(t, "POST", g.url+"/signin", "", `{"email":"a@b.c","password":"x"}`, nil)
	if status != 200 {
		t.Fatalf("signin forward: %d", status)
	}
	c, err = g.verify("auth").Verify(body["identity"].(string))
	if err != nil || c.Authenticated() {
		t.Fatalf("anonymous token: %+v %v", c, err)
	}
}

func TestSessionCacheAndRevocationOverNATS(t *testing.T) {
	g := startGateway(t, nil)
	for i := 0; i < 3; i++ {
		if status, _ := do(t, "GET", g.url+"/files", userCookie, "", nil); status != 200 {
			t.Fatalf("status %d", status)
		}
	}
	if n := g.auth.calls.Load(); n != 1 {
		t.Fatalf("auth asked %d times, want 1 (cache)", n)
	}
	// auth ends the session and announces it; the cached entry must go at once.
	g.auth.revoked.Store(userCookie, true)
	s := testkit.Get(t, testkit.NATS)
	hash := sha256hex(userCookie)
	msg, _ := json.Marshal(map[string]any{"sessions": []string{hash}})
	if err := s.NATS.Publish(g.env["NATS_SUBJECT_PREFIX"]+".auth.revoked", msg); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 2*time.Second, func() error {
		if status, _ := do(t, "GET", g.url+"/files", userCookie, "", nil); status != 401 {
			return fmt.Errorf("revoked session still accepted: %d", status)
		}
		return nil
	})
	// Revoking by user id works too.
	if status, _ := do(t, "GET", g.url+"/log/log/1", adminCookie, "", nil); status != 200 {
		t.Fatal("admin")
	}
	g.auth.revoked.Store(adminCookie, true)
	msg, _ = json.Marshal(map[string]any{"users": []string{"a1"}})
	_ = s.NATS.Publish(g.env["NATS_SUBJECT_PREFIX"]+".auth.revoked", msg)
	apptest.Eventually(t, 2*time.Second, func() error {
		if status, _ := do(t, "GET", g.url+"/log/log/1", adminCookie, "", nil); status != 401 {
			return fmt.Errorf("user revocation ignored: %d", status)
		}
		return nil
	})
}

// A revocation that auth published and flushed before a request was sent is
// applied before that request is served from the cache: no waiting, for
// many sessions in a row (what lets a sign-out through one gateway replica
// be refused by another at once). The sessions are cached first, so a
// stale cache would answer 200.
func TestRevocationAppliedBeforeTheNextRequest(t *testing.T) {
	g := startGateway(t, nil)
	s := testkit.Get(t, testkit.NATS)
	nc, err := nats.Connect(s.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const n = 200
	cookies := make([]string, n)
	for i := range cookies {
		cookies[i] = fmt.Sprintf("%043d", i)
		g.auth.extra.Store(cookies[i], fmt.Sprintf("u%d", i))
		if status, _ := do(t, "GET", g.url+"/files", cookies[i], "", nil); status != 200 {
			t.Fatalf("session %d: %d", i, status)
		}
	}
	before := g.auth.calls.Load()
	for i, c := range cookies { // still cached: no call to auth
		if status, _ := do(t, "GET", g.url+"/files", c, "", nil); status != 200 {
			t.Fatalf("session %d: %d", i, status)
		}
	}
	if calls := g.auth.calls.Load() - before; calls != 0 {
		t.Fatalf("%d calls to auth for cached sessions", calls)
	}
	for i, c := range cookies {
		g.auth.revoked.Store(c, true)
		// As auth does: publish, flush, then answer the sign-out.
		var msg []byte
		if i%2 == 0 {
			msg, _ = json.Marshal(map[string]any{"sessions": []string{sha256hex(c)}})
		} else {
			msg, _ = json.Marshal(map[string]any{"users": []string{fmt.Sprintf("u%d", i)}})
		}
		if err := nc.Publish(g.env["NATS_SUBJECT_PREFIX"]+".auth.revoked", msg); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if status, _ := do(t, "GET", g.url+"/files", c, "", nil); status != 401 {
			t.Fatalf("session %d revoked and flushed, next request: %d, want 401", i, status)
		}
	}
}

// With NATS unreachable the gateway cannot know it has every revocation, so
// it asks auth for every request instead of trusting its cache.
func TestCacheNotTrustedWithoutNATS(t *testing.T) {
	g := startGateway(t, map[string]string{"NATS_URL": "nats://127.0.0.1:1"})
	for range 3 {
		if status, _ := do(t, "GET", g.url+"/files", userCookie, "", nil); status != 200 {
			t.Fatalf("status %d", status)
		}
	}
	if n := g.auth.calls.Load(); n != 3 {
		t.Fatalf("auth asked %d times for 3 requests without NATS, want 3", n)
	}
	g.auth.revoked.Store(userCookie, true)
	if status, _ := do(t, "GET", g.url+"/files", userCookie, "", nil); status != 401 {
		t.Fatalf("revoked session with NATS away: %d, want 401", status)
	}
}

func TestSignoutEvictsLocally(t *testing.T) {
	g := startGateway(t, nil)
	if status, _ := do(t, "GET", g.url+"/me", userCookie, "", nil); status != 200 {
		t.Fatal("me")
	}
	g.auth.revoked.Store(userCookie, true)
	if status, _ := do(t, "DELETE", g.url+"/signout", userCookie, "", nil); status != 200 {
		t.Fatal("signout")
	}
	if status, body := do(t, "GET", g.url+"/me", userCookie, "", nil); status != 401 {
		t.Fatalf("after signout: %d %v", status, body)
	}
}

func TestMeSessionInBody(t *testing.T) {
	g := startGateway(t, nil)
	status, body := do(t, "GET", g.url+"/me", "", `{"sessionId":"`+userCookie+`"}`, nil)
	if status != 200 {
		t.Fatalf("body session: %d %v", status, body)
	}
	// Answered from the session's entry: auth's /ms/me message and user.
	if user, _ := body["user"].(map[string]any); body["message"] != "ok" || user["id"] != "u1" || user["roleName"] != "user" || len(body) != 2 {
		t.Fatalf("body session: %v", body)
	}
	status, body = do(t, "GET", g.url+"/me", userCookie, `{"sessionId":"`+userCookie+`"}`, nil)
	if status != 400 || body["code"] != "ambiguous_session" {
		t.Fatalf("cookie and body: %d %v", status, body)
	}
	status, body = do(t, "GET", g.url+"/me", "", `{"sessionId":`, nil)
	if status != 400 || body["code"] != "invalid_json" {
		t.Fatalf("malformed: %d %v", status, body)
	}
	status, body = do(t, "GET", g.url+"/me", "", `{"sessionId":"`+userCookie+`","x":1}`, nil)
	if status != 400 {
		t.Fatalf("unknown field: %d %v", status, body)
	}
}

func TestOriginPolicy(t *testing.T) {
	g := startGateway(t, nil)
	status, body := do(t, "POST", g.url+"/signin", "", `{}`, map[string]string{"Origin": "https://evil.example"})
	if status != 403 || body["code"] != "forbidden_origin" {
		t.Fatalf("foreign origin: %d %v", status, body)
	}
	req, _ := http.NewRequest("POST", g.url+"/signin", strings.NewReader(`{}`))
	req.Header.Set("Origin", "https://app.example.com")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		resp.Header.Get("Access-Control-Allow-Credentials") != "true" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Logs-Resume-Before") {
		t.Fatalf("allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestAuthDownIs503Not401(t *testing.T) {
	// Requests wait GATEWAY_RETRY_WAIT for an auth replica, then 503.
	g := startGateway(t, map[string]string{"GATEWAY_AUTH_URL": "http://127.0.0.1:1", "GATEWAY_RETRY_WAIT": "500ms"})
	status, body := do(t, "GET", g.url+"/me", userCookie, "", nil)
	if status != 503 || body["code"] != "auth_unavailable" {
		t.Fatalf("got %d %v", status, body)
	}
	status, body = do(t, "POST", g.url+"/signin", "", `{}`, nil)
	if status != 503 || body["code"] != "service_unavailable" {
		t.Fatalf("signin with auth down: %d %v", status, body)
	}
	status, body = do(t, "GET", g.url+"/readyz", "", "", nil)
	if status != 503 {
		t.Fatalf("readyz with auth down: %d %v", status, body)
	}
}

func TestReadyz(t *testing.T) {
	g := startGateway(t, nil)
	// The fake services answer /readyz through echo with 200.
	if status, body := do(t, "GET", g.url+"/readyz", "", "", nil); status != 200 {
		t.Fatalf("readyz: %d %v", status, body)
	}
	if status, _ := do(t, "GET", g.url+"/healthz", "", "", nil); status != 200 {
		t.Fatal("healthz")
	}
}

func TestStreamsLargeBody(t *testing.T) {
	g := startGateway(t, nil)
	size := 8 << 20
	req, _ := http.NewRequest("POST", g.url+"/upload/file", io.LimitReader(zeroReader{}, int64(size)))
	req.ContentLength = int64(size)
	req.AddCookie(&http.Cookie{Name: "sessionId", Value: userCookie})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	if int(m["bodyLen"].(float64)) != size {
		t.Fatalf("body arrived with %v bytes, want %d", m["bodyLen"], size)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Bodies over the gateway's ceilings are refused here with 413, by length or
// while streaming a chunked body, never passed on to end as a broken write.
func TestBodyCeilings(t *testing.T) {
	g := startGateway(t, map[string]string{"GATEWAY_MAX_AUTH_BODY": "1KiB", "GATEWAY_MAX_UPLOAD": "64KiB"})
	status, body := do(t, "POST", g.url+"/signin", "", `{"email":"`+strings.Repeat("a", 2000)+`"}`, nil)
	if status != 413 || body["code"] != "body_too_large" {
		t.Fatalf("json over the ceiling: %d %v", status, body)
	}
	req, _ := http.NewRequest("POST", g.url+"/upload/file", io.NopCloser(io.LimitReader(zeroReader{}, 1<<20)))
	req.ContentLength = -1 // chunked: only counting can tell
	req.AddCookie(&http.Cookie{Name: "sessionId", Value: userCookie})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(raw), "body_too_large") {
		t.Fatalf("chunked upload over the ceiling: %d %s", resp.StatusCode, raw)
	}
	// Under the ceiling still passes.
	status, _ = do(t, "POST", g.url+"/signin", "", `{"email":"a@b.c"}`, nil)
	if status != 200 {
		t.Fatalf("small body: %d", status)
	}
}

// The services echo the X-Request-Id they are sent; a proxied answer still
// carries exactly one, the gateway's, which the service received.
func TestOneRequestIDPerResponse(t *testing.T) {
	g := startGateway(t, nil)
	for _, tc := range []struct{ path, cookie, sent string }{
		{"/files", userCookie, "client-id-1"},
		{"/files", userCookie, ""},
		{"/log/log/1", adminCookie, "client-id-2"},
		{"/me/sessions", userCookie, ""},
		{"/files", userCookie, "not a valid id!"},
	} {
		req, _ := http.NewRequest(http.MethodGet, g.url+tc.path, nil)
		req.AddCookie(&http.Cookie{Name: "sessionId", Value: tc.cookie})
		if tc.sent != "" {
			req.Header.Set("X-Request-Id", tc.sent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		got := resp.Header.Values("X-Request-Id")
		if resp.StatusCode != 200 || len(got) != 1 {
			t.Fatalf("%s (sent %q): status %d, X-Request-Id %q, want 200 and exactly one", tc.path, tc.sent, resp.StatusCode, got)
		}
		if got[0] != body["rid"] {
			t.Errorf("%s: answer's id %q, the service received %v", tc.path, got[0], body["rid"])
		}
		if tc.sent == "client-id-1" || tc.sent == "client-id-2" {
			if got[0] != tc.sent {
				t.Errorf("%s: id %q, want the client's %q", tc.path, got[0], tc.sent)
			}
		} else if got[0] == "" || got[0] == tc.sent {
			t.Errorf("%s: id %q, want one the gateway made", tc.path, got[0])
		}
	}
}
