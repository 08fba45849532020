package app_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/services/auth/internal/app"
	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const (
	credential    = "test-service-credential-0123456789"
	adminEmail    = "admin@acme.local"
	adminPassword = "admin-password-123"
)

type harness struct {
	t      testing.TB
	srv    *testkit.Servers
	env    testkit.Env
	id     testkit.Identity
	base   string
	db     *mongo.Database
	stdout *apptest.Log
}

// lowCost are argon2 parameters for tests that are not about hashing.
var lowCost = map[string]string{
	"AUTH_ARGON2_MEMORY_KIB": "1024",
	"AUTH_ARGON2_TIME":       "1",
}

// newHarness starts the service on a fresh database with cheap hashing
// unless extra says otherwise.
func newHarness(t testing.TB, extra map[string]string) *harness {
	t.Helper()
	srv := testkit.Get(t, testkit.Mongo, testkit.NATS)
	env, id := srv.ServiceEnv(t, []string{"AUTH_ADDR"}, map[string]string{
		"AUTH_SERVICE_CREDENTIALS": credential,
		"AUTH_ADMIN_PASSWORD":      adminPassword,
	}, lowCost, extra)
	h := &harness{t: t, srv: srv, env: env, id: id, db: srv.Mongo.Database(env["MONGO_DB"]), stdout: &apptest.Log{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service output:\n%s", h.stdout.String())
		}
	})
	h.base = h.run(env)
	return h
}

// run starts one more replica on env and returns its base URL.
func (h *harness) run(env testkit.Env) string {
	h.t.Helper()
	return apptest.Start(h.t, app.Run, env.Getenv, apptest.Options{Stdout: h.stdout, StopTimeout: 20 * time.Second}).URL
}

// token mints an identity token for the auth audience.
func (h *harness) token(sub, role, sid string) string {
	h.t.Helper()
	return h.id.Token(h.t, identity.Claims{
		Role: role, SessionID: sid, ClientIP: "127.0.0.1",
		RegisteredClaims: jwt.RegisteredClaims{Subject: sub},
	}, "auth")
}

func (h *harness) anonToken() string { return h.token("", "", "") }

type resp struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// req is a request; body is JSON-encoded unless it is a string or []byte.
type req struct {
	method, path string
	token        string
	body         any
	contentType  string // default application/json when there is a body
	headers      map[string]string
}

var client = &http.Client{Timeout: 60 * time.Second} // no cookie jar: tokens say who calls

func (h *harness) do(r req) resp {
	h.t.Helper()
	c := apptest.NewClient(h.t, h.base)
	c.HTTP = client
	hdr := map[string]string{}
	if r.body != nil && r.contentType != "" {
		hdr["Content-Type"] = r.contentType
	}
	if r.token != "" {
		hdr[identity.Header] = r.token
	}
	for k, v := range r.headers {
		hdr[k] = v
	}
	res := c.Do(r.method, r.path, r.body, hdr)
	return resp{status: res.Status, header: res.Header, body: res.Object(h.t), raw: string(res.Body)}
}

// raw sends a request over a plain TCP connection, writing it in full
// before reading the answer.
func (h *harness) raw(t testing.TB, method, path string, headers map[string]string, body string) resp {
	t.Helper()
	r := testkit.RawRequest(t, h.base, method, path, headers, body)
	out := resp{status: r.Status, header: r.Header, raw: string(r.Body)}
	if err := json.Unmarshal(r.Body, &out.body); err != nil {
		t.Fatalf("%s %s: %d body is not a JSON object: %q", method, path, r.Status, r.Body)
	}
	return out
}

// want fails unless the response has the status (and, if given, the code).
func want(t testing.TB, r resp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
	if status >= 400 {
		if c, _ := r.body["code"].(string); c == "" || (code != "" && c != code) {
			t.Fatalf("code %q, want %q; body %s", c, code, r.raw)
		}
	}
}

// sessionCookie returns the sessionId Set-Cookie of a response.
func sessionCookie(t testing.TB, r resp) *http.Cookie {
	t.Helper()
	for _, line := range r.header.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err == nil && c.Name == "sessionId" {
			c.Raw = line
			return c
		}
	}
	t.Fatalf("no sessionId cookie in %v", r.header.Values("Set-Cookie"))
	return nil
}

// signIn signs in and returns the cookie value.
func (h *harness) signIn(email, pw string) string {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": email, "password": pw}})
	want(h.t, r, 200, "")
	return sessionCookie(h.t, r).Value
}

type session struct {
	userID, role, publicID string
	user                   map[string]any
}

// msMe resolves a session like a gateway does.
func (h *harness) msMe(secret string) (resp, session) {
	h.t.Helper()
	r := h.do(req{method: "GET", path: "/ms/me", body: map[string]string{"sessionId": secret},
		headers: map[string]string{"X-Service-Credential": credential}})
	var s session
	if r.status == 200 {
		s.user, _ = r.body["user"].(map[string]any)
		s.userID, _ = s.user["id"].(string)
		s.role, _ = s.user["roleName"].(string)
		sess, _ := r.body["session"].(map[string]any)
		s.publicID, _ = sess["id"].(string)
	}
	return r, s
}

// tokenFor resolves a cookie and mints the token a gateway would forward.
func (h *harness) tokenFor(secret string) (string, session) {
	h.t.Helper()
	r, s := h.msMe(secret)
	want(h.t, r, 200, "")
	return h.token(s.userID, s.role, s.publicID), s
}

// adminToken signs in as the bootstrap admin.
func (h *harness) adminToken() string {
	h.t.Helper()
	tok, _ := h.tokenFor(h.signIn(adminEmail, adminPassword))
	return tok
}

// createUser creates a user through the admin API and returns its id.
func (h *harness) createUser(admin, email, pw string) string {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/users", token: admin, body: map[string]any{
		"email": email, "password": pw, "fullName": "Test " + email, "edv": "E-1",
	}})
	want(h.t, r, 201, "")
	u := r.body["user"].(map[string]any)
	return u["id"].(string)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// revocations subscribes to the revocation subject.
func (h *harness) revocations() *nats.Subscription {
	h.t.Helper()
	sub, err := h.srv.NATS.SubscribeSync(h.env["NATS_SUBJECT_PREFIX"] + ".auth.revoked")
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.srv.NATS.Flush(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

type revocation struct {
	Sessions []string `json:"sessions"`
	Users    []string `json:"users"`
}

func nextRevocation(t testing.TB, sub *nats.Subscription) revocation {
	t.Helper()
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no revocation message: %v", err)
	}
	var r revocation
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || r.Sessions == nil || r.Users == nil {
		t.Fatalf("revocation %s: want {sessions:[...], users:[...]}, err %v", m.Data, err)
	}
	return r
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
