// Package e2e runs the platform as a developer or an operator does: the four
// services built and started as separate processes against the test kit's
// real servers, exercised only through the gateway.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/scripts/stack"
)

var (
	buildOnce sync.Once
	bins      map[string]string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "acme-e2e-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := func() int { defer testkit.Stop(); return m.Run() }()
	code = reportAPICoverage(code)
	os.RemoveAll(dir)
	os.Exit(code)
}

// platform starts the whole platform for one test.
// builtServices returns the four services' binaries, built once per test
// binary.
func builtServices(t *testing.T) map[string]string {
	t.Helper()
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		bins, buildErr = stack.Build(ctx, filepath.Join(binDir, "bin"), os.Getenv("E2E_RACE") == "1")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins
}

func platform(t *testing.T, env map[string]string) (*stack.Platform, stack.Secrets, *stack.Output) {
	t.Helper()
	return platformWith(t, env, stack.Options{})
}

// platformWith is platform with launch options (o.Env and o.Out are set
// here): replicas, gateways, or a subset of the services, named by the keys
// of o.Bins (the values are filled in with the built binaries).
func platformWith(t *testing.T, env map[string]string, o stack.Options) (*stack.Platform, stack.Secrets, *stack.Output) {
	t.Helper()
	return platformOn(t, env, o, nil)
}

// platformOn is platformWith on the test kit's servers as edit changes
// them (nil: unchanged), e.g. its object store behind a proxy.
func platformOn(t *testing.T, env map[string]string, o stack.Options, edit func(*stack.Servers)) (*stack.Platform, stack.Secrets, *stack.Output) {
	testkit.SkipShort(t)
	t.Helper()
	bins := builtServices(t)
	s := testkit.Get(t)
	sec, err := stack.NewSecrets("admin@acme.test", "")
	if err != nil {
		t.Fatal(err)
	}
	if env == nil {
		env = map[string]string{}
	}
	env["AUTH_COOKIE_SECURE"] = "false"
	logs := &stack.Output{}
	servers := stack.Servers{
		MongoURL: s.MongoURL, MongoDB: s.Database(t), NATSURL: s.NATSURL, SubjectPrefix: s.SubjectPrefix(t),
		S3Endpoint: s.S3Endpoint, S3Access: s.S3Access, S3Secret: s.S3Secret, S3Bucket: s.Bucket(t),
	}
	if edit != nil {
		edit(&servers)
	}
	o.Env, o.Out = env, logs
	if o.GatewayAddr == "" {
		o.GatewayAddr = "127.0.0.1:0"
	}
	if o.Bins == nil {
		o.Bins = bins
	} else {
		subset := map[string]string{}
		for name := range o.Bins {
			subset[name] = bins[name]
		}
		o.Bins = subset
	}
	p, err := stack.Launch(o, servers, sec)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	launched.Store(p, launch{servers: servers, env: env})
	t.Cleanup(func() {
		launched.Delete(p)
		p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("service output:\n%s", logs.String())
		}
	})
	return p, sec, logs
}

// launched remembers how each platform was started (servers, extra
// environment), for tests that need the servers or restart a service.
var launched sync.Map // *stack.Platform → launch

type launch struct {
	servers stack.Servers
	env     map[string]string
}

// client is a browser-like HTTP client with its own cookie jar. Every
// exchange with the gateway is checked against the OpenAPI document
// (openapi_test.go).
type client struct {
	t    *testing.T
	base string
	http *http.Client
	api  *apptest.Client // sends through http
}

func newClient(t *testing.T, base string) *client {
	api := apptest.NewClient(t, base)
	api.HTTP.Timeout, api.HTTP.Transport = 30*time.Second, checked(t, base, nil)
	return &client{t: t, base: base, http: api.HTTP, api: api}
}

// do sends body as JSON (none when nil) and decodes a JSON answer.
func (c *client) do(method, path string, body any) (int, map[string]any, http.Header) {
	c.t.Helper()
	var b any
	if body != nil {
		j, _ := json.Marshal(body)
		b = j
	}
	r := c.api.Do(method, path, b)
	var m map[string]any
	if len(r.Body) > 0 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		r.JSON(c.t, &m)
	}
	return r.Status, m, r.Header
}

// cookie is the session cookie the client holds ("" when signed out).
func (c *client) cookie() string { return c.api.Cookie("sessionId") }

func (c *client) mustStatus(want int, method, path string, body any) map[string]any {
	c.t.Helper()
	got, m, _ := c.do(method, path, body)
	if got != want {
		c.t.Fatalf("%s %s: status %d, want %d; body %v", method, path, got, want, m)
	}
	return m
}

// The README's curl walk-through, through the gateway: sign in as the admin,
// create a user, sign in as that user, GET /me, PATCH /me including a
// password change, sign out, and the old cookie is refused.
func TestSignInWalkThrough(t *testing.T) {
	p, sec, logs := platform(t, nil)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	created := admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "Ada@Example.com", "password": "correct horse battery", "fullName": "Ada Lovelace", "edv": "E-1",
	})
	user, _ := created["user"].(map[string]any)
	if user["email"] == nil || user["roleName"] != "user" {
		t.Fatalf("created user: %v", created)
	}

	ada := newClient(t, p.GatewayURL)
	ada.mustStatus(401, "POST", "/signin", map[string]string{"email": "ada@example.com", "password": "wrong password"})
	ada.mustStatus(200, "POST", "/signin", map[string]string{"email": "ada@example.com", "password": "correct horse battery"})
	me := ada.mustStatus(200, "GET", "/me", nil)
	if u := me["user"].(map[string]any); u["fullName"] != "Ada Lovelace" || u["id"] != user["id"] {
		t.Fatalf("/me: %v", me)
	}
	for _, k := range []string{"password", "passwordHash", "hash"} {
		if _, leaked := me["user"].(map[string]any)[k]; leaked {
			t.Fatalf("/me leaks %s", k)
		}
	}

	// One X-Request-Id per answer, the gateway's, whichever process answered
	// (auth, files, or the gateway itself for GET /me).
	for _, path := range []string{"/me/sessions", "/files", "/me"} {
		st, _, h := ada.do("GET", path, nil)
		if ids := h.Values("X-Request-Id"); st != 200 || len(ids) != 1 || ids[0] == "" {
			t.Fatalf("GET %s: status %d, X-Request-Id %q, want 200 and exactly one", path, st, ids)
		}
	}

	// A second device of the same user.
	phone := newClient(t, p.GatewayURL)
	phone.mustStatus(200, "POST", "/signin", map[string]string{"email": "ada@example.com", "password": "correct horse battery"})

	oldCookie := ada.cookie()
	edited := ada.mustStatus(200, "PATCH", "/me", map[string]any{
		"fullName": "Augusta Ada King", "password": map[string]string{"old": "correct horse battery", "new": "new secret phrase"},
	})
	if edited["user"].(map[string]any)["fullName"] != "Augusta Ada King" {
		t.Fatalf("PATCH /me: %v", edited)
	}
	if ada.cookie() == oldCookie || ada.cookie() == "" {
		t.Fatal("password change did not replace the session cookie")
	}
	ada.mustStatus(200, "GET", "/me", nil)
	phone.mustStatus(401, "GET", "/me", nil) // other sessions ended at once

	stale := newClient(t, p.GatewayURL)
	u, _ := http.NewRequest("GET", p.GatewayURL, nil)
	stale.http.Jar.SetCookies(u.URL, []*http.Cookie{{Name: "sessionId", Value: oldCookie}})
	stale.mustStatus(401, "GET", "/me", nil)

	// The server-side runtime form: sessionId in the body.
	body := ada.cookie()
	anon := newClient(t, p.GatewayURL)
	anon.mustStatus(200, "GET", "/me", map[string]string{"sessionId": body})

	current := ada.cookie()
	ada.mustStatus(200, "DELETE", "/signout", nil)
	after := newClient(t, p.GatewayURL)
	after.http.Jar.SetCookies(u.URL, []*http.Cookie{{Name: "sessionId", Value: current}})
	after.mustStatus(401, "GET", "/me", nil)

	ada.mustStatus(200, "POST", "/signin", map[string]string{"email": "ada@example.com", "password": "new secret phrase"})

	// No secret reaches a log line.
	for _, secret := range []string{current, oldCookie, "new secret phrase", "correct horse battery", sec.AdminPassword} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("a secret appears in the services' logs")
		}
	}
}

// A service reached directly, not through the gateway, refuses the request.
func TestServicesRefuseDirectCalls(t *testing.T) {
	p, sec, _ := platform(t, nil)
	for name, proc := range p.Procs {
		if name == "gateway" {
			continue
		}
		path := map[string]string{"auth": "/me", "files": "/files", "logs": "/log/log/1"}[name]
		resp, err := http.Get("http://" + proc.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("%s %s direct: %d, want 401", name, path, resp.StatusCode)
		}
	}
	// /ms/me without the service credential.
	req, _ := http.NewRequest("GET", "http://"+p.Procs["auth"].Addr+"/ms/me", strings.NewReader(`{"sessionId":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("/ms/me without credential: %d", resp.StatusCode)
	}
	_ = sec
}

func TestGatewayReadyz(t *testing.T) {
	p, sec, _ := platform(t, nil)
	gw := newClient(t, p.GatewayURL)
	if r := gw.raw("GET", "/readyz", nil, nil, ""); r.status != 200 {
		t.Fatalf("readyz %d %s", r.status, r.body)
	}
	if r := gw.raw("GET", "/healthz", nil, nil, ""); r.status != 200 || r.json(t)["status"] != "ok" {
		t.Fatalf("healthz %d %s", r.status, r.body)
	}
	// The API document, as written and as JSON, revalidated by ETag.
	want, err := os.ReadFile(openapiPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := gw.raw("GET", "/openapi.yaml", nil, nil, "")
	if doc.status != 200 || !bytes.Equal(doc.body, want) {
		t.Fatalf("GET /openapi.yaml: %d, %d bytes (file: %d)", doc.status, len(doc.body), len(want))
	}
	if r := gw.raw("GET", "/openapi.yaml", map[string]string{"If-None-Match": doc.header.Get("ETag")}, nil, ""); r.status != 304 {
		t.Fatalf("GET /openapi.yaml revalidated: %d", r.status)
	}
	js := gw.raw("GET", "/openapi.json", nil, nil, "")
	if js.status != 200 || js.json(t)["openapi"] != "3.1.0" {
		t.Fatalf("GET /openapi.json: %d", js.status)
	}
	if r := gw.raw("GET", "/openapi.json", map[string]string{"If-None-Match": js.header.Get("ETag")}, nil, ""); r.status != 304 {
		t.Fatalf("GET /openapi.json revalidated: %d", r.status)
	}
	// Oversized bodies are a 413 JSON through the real processes, whatever
	// their size relative to socket buffers (never a 503 from a broken write).
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	for _, c := range []struct {
		method, path string
		size         int
	}{{"POST", "/signin", 10 << 20}, {"POST", "/signin", 300 << 10}, {"PATCH", "/me", 300 << 10}, {"POST", "/log", 5 << 20}} {
		path, size := c.path, c.size
		req, _ := http.NewRequest(c.method, p.GatewayURL+path, bytes.NewReader(bytes.Repeat([]byte("a"), size)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := admin.http.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || !strings.Contains(string(raw), `"code"`) {
			t.Fatalf("%s with %d bytes: %d %s", path, size, resp.StatusCode, raw)
		}
	}
	p.Procs["auth"].Stop(5 * time.Second)
	if r := gw.raw("GET", "/readyz", nil, nil, ""); r.status != 503 || r.json(t)["checks"] == nil {
		t.Fatalf("readyz with auth stopped: %d %s", r.status, r.body)
	}
	c := newClient(t, p.GatewayURL)
	st, body, _ := c.do("POST", "/signin", map[string]string{"email": "a@b.c", "password": "whatever1"})
	if st != 503 || body["code"] == nil {
		t.Fatalf("signin with auth down: %d %v", st, body)
	}
}

// Sessions and user administration beyond the walk-through, through the
// gateway: a user's own sessions (list, end one, end the others), the
// service form of /me with the service credential, and an administrator
// listing, reading, editing and deleting a user.
func TestAccountAdministration(t *testing.T) {
	p, sec, _ := platform(t, nil)
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	created := admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "ada@example.com", "password": "correct horse battery", "fullName": "Ada", "edv": "E-1", "sector": "Maths",
	})
	adaID, _ := created["user"].(map[string]any)["id"].(string)
	ada := signIn(t, gw, "ada@example.com", "correct horse battery")
	tablet := signIn(t, gw, "ada@example.com", "correct horse battery")
	phone := signIn(t, gw, "ada@example.com", "correct horse battery")

	// Sessions: three, one of them the caller's.
	list, _ := ada.mustStatus(200, "GET", "/me/sessions", nil)["sessions"].([]any)
	var current int
	for _, s := range list {
		if s.(map[string]any)["current"] == true {
			current++
		}
	}
	if len(list) != 3 || current != 1 {
		t.Fatalf("GET /me/sessions: %v", list)
	}
	tabletSessions, _ := tablet.mustStatus(200, "GET", "/me/sessions", nil)["sessions"].([]any)
	var tabletID string
	for _, s := range tabletSessions {
		if m := s.(map[string]any); m["current"] == true {
			tabletID, _ = m["id"].(string)
		}
	}
	ada.mustStatus(200, "DELETE", "/me/sessions/"+tabletID, nil)
	// The ended sessions' cached identities leave this gateway's cache
	// through auth's revocation event on NATS: soon, not synchronously.
	soon := func(c *client, want int, path string) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for {
			status, _, _ := c.do("GET", path, nil)
			if status == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %d, want %d within 3s", path, status, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	soon(tablet, 401, "/me")
	ada.mustStatus(404, "DELETE", "/me/sessions/"+tabletID, nil)
	if ended := ada.mustStatus(200, "DELETE", "/me/sessions", nil)["ended"]; ended != float64(1) {
		t.Fatalf("DELETE /me/sessions ended %v, want 1", ended)
	}
	soon(phone, 401, "/me")
	ada.mustStatus(200, "GET", "/me", nil)

	// GET /ms/me through the gateway: the service credential, not a cookie.
	svc := newClient(t, gw)
	body := func() io.Reader { return strings.NewReader(`{"sessionId":"` + ada.cookie() + `"}`) }
	r := svc.raw("GET", "/ms/me", map[string]string{"X-Service-Credential": sec.ServiceCredential}, body(), "application/json")
	if m := r.json(t); r.status != 200 || m["user"].(map[string]any)["id"] != adaID || m["session"] == nil {
		t.Fatalf("GET /ms/me: %d %s", r.status, r.body)
	}
	if r := svc.raw("GET", "/ms/me", map[string]string{"X-Service-Credential": "wrong"}, body(), "application/json"); r.status != 401 {
		t.Fatalf("GET /ms/me with a wrong credential: %d %s", r.status, r.body)
	}

	// Administration.
	ada.mustStatus(403, "GET", "/users", nil)
	users := admin.mustStatus(200, "GET", "/users?page=1&limit=10", nil)
	if all, _ := users["users"].([]any); len(all) != 2 || users["total"] != float64(2) {
		t.Fatalf("GET /users: %v", users)
	}
	admin.mustStatus(400, "GET", "/users?limit=0", nil)
	if u := admin.mustStatus(200, "GET", "/users/"+adaID, nil)["user"].(map[string]any); u["sector"] != "Maths" {
		t.Fatalf("GET /users/{id}: %v", u)
	}
	edited := admin.mustStatus(200, "PATCH", "/users/"+adaID, map[string]any{"sector": "", "roleName": "admin"})
	if u := edited["user"].(map[string]any); u["sector"] != nil || u["roleName"] != "admin" {
		t.Fatalf("PATCH /users/{id}: %v", u)
	}
	admin.mustStatus(404, "GET", "/users/nope", nil)
	soon(ada, 200, "/log/dead") // the new role reaches the gateway's cache over NATS
	if m := ada.mustStatus(409, "PATCH", "/users/"+adaID, map[string]any{"roleName": "user"}); m["code"] != "cannot_demote_self" {
		t.Fatalf("self-demotion: %v", m)
	}
	admin.mustStatus(200, "DELETE", "/users/"+adaID, nil)
	admin.mustStatus(404, "DELETE", "/users/"+adaID, nil)
	soon(ada, 401, "/me")
}
