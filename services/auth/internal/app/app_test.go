package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/services/auth/internal/app"
	"github.com/acme/platform/services/auth/internal/password"
	"github.com/golang-jwt/jwt/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestDefaultsAreOWASP(t *testing.T) {
	env := map[string]string{"IDENTITY_PUBLIC_KEY": "x", "SERVICE_CREDENTIAL": "c"}
	cfg, _, err := app.LoadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Argon2 != password.OWASP || cfg.Argon2.MemoryKiB != 19456 || cfg.Argon2.Time != 2 || cfg.Argon2.Threads != 1 {
		t.Fatalf("default argon2 %+v, want m=19456 t=2 p=1", cfg.Argon2)
	}
	if !cfg.CookieSecure || cfg.Account.SessionTTL != 7*24*time.Hour || cfg.Account.SessionIdle != 24*time.Hour ||
		cfg.ReadTimeout != time.Minute || cfg.IdleTimeout != 90*time.Second {
		t.Fatalf("defaults %+v", cfg)
	}
}

func TestRefusesToStartMisconfigured(t *testing.T) {
	srv := testkit.Get(t, testkit.Mongo, testkit.NATS)
	for name, tc := range map[string]struct {
		drop    string
		set     map[string]string
		message string
	}{
		"noServiceCredential": {drop: "AUTH_SERVICE_CREDENTIALS", message: "service credential"},
		"noIdentityKey":       {drop: "IDENTITY_PUBLIC_KEY", message: "IDENTITY_PUBLIC_KEY"},
		"badDuration":         {set: map[string]string{"AUTH_SESSION_TTL": "forever"}, message: "SESSION_TTL"},
		"badArgon2":           {set: map[string]string{"AUTH_ARGON2_TIME": "0"}, message: "ARGON2"},
		"zeroReadTimeout":     {set: map[string]string{"AUTH_READ_TIMEOUT": "0s"}, message: "AUTH_READ_TIMEOUT"},
		"verifyWithoutMail":   {set: map[string]string{"AUTH_REQUIRE_VERIFIED_EMAIL": "true"}, message: "AUTH_REQUIRE_VERIFIED_EMAIL"},
		"badSMTPMode":         {set: map[string]string{"AUTH_SMTP_HOST": "127.0.0.1", "AUTH_SMTP_TLS": "ssl"}, message: "AUTH_SMTP_"},
		"badSMTPFrom":         {set: map[string]string{"AUTH_SMTP_HOST": "127.0.0.1", "AUTH_SMTP_FROM": "nobody"}, message: "AUTH_SMTP_"},
		"badPublicURL":        {set: map[string]string{"AUTH_SMTP_HOST": "127.0.0.1", "AUTH_PUBLIC_URL": "console"}, message: "AUTH_PUBLIC_URL"},
		"badAuditApp":         {set: map[string]string{"AUTH_AUDIT_APP": "a.b"}, message: "AUTH_AUDIT_APP"},
		"zeroEmailWindow":     {set: map[string]string{"AUTH_EMAIL_THROTTLE_WINDOW": "0s"}, message: "throttle windows"},
	} {
		t.Run(name, func(t *testing.T) {
			env, _ := srv.ServiceEnv(t, []string{"AUTH_ADDR"}, map[string]string{"AUTH_SERVICE_CREDENTIALS": credential},
				map[string]string{tc.drop: ""}, tc.set)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := app.Run(ctx, env.Getenv, &apptest.Log{}, func(string) { t.Error("service started") })
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Run = %v, want an error about %s", err, tc.message)
			}
		})
	}
}

func TestIdentityRequired(t *testing.T) {
	h := newHarness(t, nil)
	forger := testkit.NewIdentity(t)
	body := map[string]string{"email": adminEmail, "password": adminPassword}
	valid, _ := h.tokenFor(h.signIn(adminEmail, adminPassword))
	claims := func() identity.Claims {
		c, err := identity.NewVerifier(mustPub(t, h.id.PublicPEM), "auth").Verify(valid)
		if err != nil {
			t.Fatal(err)
		}
		return identity.Claims{Role: c.Role, SessionID: c.SessionID, RegisteredClaims: jwt.RegisteredClaims{Subject: c.Subject}}
	}
	for _, tc := range []struct {
		name, method, path, token string
	}{
		{"signin401NoToken", "POST", "/signin", ""},
		{"me401NoToken", "GET", "/me", ""},
		{"me401ForgedToken", "GET", "/me", forger.Token(t, claims(), "auth")},
		{"me401OtherAudience", "GET", "/me", h.id.Token(t, claims(), "files")},
		{"me401Tampered", "GET", "/me", valid[:len(valid)-4] + "AAAA"},
		{"me401Garbage", "GET", "/me", "not-a-token"},
		{"users401ForgedAdmin", "GET", "/users", forger.Token(t, claims(), "auth")},
		{"unknownRoute401NoToken", "GET", "/nope", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b any
			if tc.method == "POST" {
				b = body
			}
			want(t, h.do(req{method: tc.method, path: tc.path, token: tc.token, body: b}), 401, "identity_required")
		})
	}
	t.Run("me200ValidToken", func(t *testing.T) {
		want(t, h.do(req{method: "GET", path: "/me", token: valid}), 200, "")
	})
	t.Run("me200BodyIgnored", func(t *testing.T) {
		want(t, h.do(req{method: "GET", path: "/me", token: valid, body: map[string]string{"sessionId": "whatever"}}), 200, "")
	})
	t.Run("unknownRoute404", func(t *testing.T) {
		want(t, h.do(req{method: "GET", path: "/nope", token: valid}), 404, "not_found")
	})
	t.Run("health200WithoutToken", func(t *testing.T) {
		want(t, h.do(req{method: "GET", path: "/healthz"}), 200, "")
		want(t, h.do(req{method: "GET", path: "/readyz"}), 200, "")
	})
}

func mustPub(t *testing.T, pem string) []byte {
	t.Helper()
	k, err := identity.ParsePublicKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, nil)
	tok := h.anonToken()
	for _, tc := range []struct {
		name    string
		body    any
		ct      string
		headers map[string]string
		status  int
		code    string
	}{
		{"signin400Empty", "", "", nil, 400, "empty_body"},
		{"signin400Whitespace", "   ", "", nil, 400, "empty_body"},
		{"signin400Malformed", `{"email":"a@b.c",`, "", nil, 400, "invalid_json"},
		{"signin400Trailing", `{"email":"a@b.c","password":"12345678"} {}`, "", nil, 400, "invalid_json"},
		{"signin400Array", `[]`, "", nil, 400, "invalid_json"},
		{"signin400Unknown", map[string]any{"email": adminEmail, "password": adminPassword, "remember": true}, "", nil, 400, "unknown_field"},
		{"signin400WrongType", map[string]any{"email": adminEmail, "password": 12345678}, "", nil, 400, "invalid_type"},
		{"signin415TextPlain", `{"email":"a@b.c","password":"12345678"}`, "text/plain", nil, 415, "unsupported_media_type"},
		{"signin415Form", "email=a&password=b", "application/x-www-form-urlencoded", nil, 415, "unsupported_media_type"},
		{"signin415Gzip", `{"email":"a@b.c","password":"12345678"}`, "", map[string]string{"Content-Encoding": "gzip"}, 415, "unsupported_encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(req{method: "POST", path: "/signin", token: tok, body: tc.body, contentType: tc.ct, headers: tc.headers})
			want(t, r, tc.status, tc.code)
			if len(r.header.Values("Set-Cookie")) != 0 {
				t.Fatal("bad input set a cookie")
			}
		})
	}
	if n, _ := h.db.Collection("sessions").CountDocuments(context.Background(), bson.M{}); n != 0 {
		t.Fatalf("bad input created %d sessions", n)
	}
	// Over 64 KiB. The server answers as soon as it has read the headers
	// and closes the connection, so the request is written in full over a
	// raw connection before the answer is read (an HTTP client still
	// writing the body may see the reset first).
	huge := `{"email":"` + strings.Repeat("a", 70<<10) + `","password":"12345678"}`
	t.Run("signin413Huge", func(t *testing.T) {
		want(t, h.raw(t, "POST", "/signin", map[string]string{identity.Header: tok}, huge), 413, "body_too_large")
	})
	t.Run("msme413Huge", func(t *testing.T) {
		want(t, h.raw(t, "GET", "/ms/me", map[string]string{"X-Service-Credential": credential}, huge), 413, "body_too_large")
	})
	t.Run("signin200JustUnderLimit", func(t *testing.T) {
		// padding with spaces keeps the JSON valid
		body := `{"email":"` + adminEmail + `","password":"` + adminPassword + `"}` + strings.Repeat(" ", 60<<10)
		want(t, h.do(req{method: "POST", path: "/signin", token: tok, body: body}), 200, "")
	})
	t.Run("msme415", func(t *testing.T) {
		r := h.do(req{method: "GET", path: "/ms/me", body: `{"sessionId":"x"}`, contentType: "text/plain",
			headers: map[string]string{"X-Service-Credential": credential}})
		want(t, r, 415, "unsupported_media_type")
	})
}

var passwordLine = regexp.MustCompile(`(?m)^initial admin password for admin@acme\.local: (\S+)$`)

func TestBootstrapAdmin(t *testing.T) {
	h := newHarness(t, map[string]string{"AUTH_ADMIN_PASSWORD": ""})
	m := passwordLine.FindAllStringSubmatch(h.stdout.String(), -1)
	if len(m) != 1 || len(m[0][1]) != 20 {
		t.Fatalf("want one generated 20-character password line, got %q", m)
	}
	pw := m[0][1]
	r, s := h.msMe(h.signIn(adminEmail, pw))
	if r.status != 200 || s.role != "admin" {
		t.Fatalf("bootstrap admin: %s", r.raw)
	}
	// The password is not in the logs otherwise.
	if strings.Count(h.stdout.String(), pw) != 1 {
		t.Fatal("generated password printed more than once")
	}

	// A restart finds the admin and prints nothing.
	before := len(h.stdout.String())
	h.run(h.env)
	if passwordLine.MatchString(h.stdout.String()[before:]) {
		t.Fatal("password printed again on restart")
	}

	// Several replicas starting at once on an empty database: one admin,
	// one password line.
	env := testkit.Env{}
	for k, v := range h.env {
		env[k] = v
	}
	env["MONGO_DB"] = h.srv.Database(t)
	const replicas = 3
	outs := make([]*apptest.Log, replicas)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	readies := make(chan string, replicas)
	errs := make(chan error, replicas)
	for i := range outs {
		outs[i] = &apptest.Log{}
		wg.Add(1)
		go func(out *apptest.Log) {
			defer wg.Done()
			errs <- app.Run(ctx, env.Getenv, out, func(a string) { readies <- a })
		}(outs[i])
	}
	for i := 0; i < replicas; i++ {
		select {
		case <-readies:
		case err := <-errs:
			cancel()
			t.Fatalf("replica failed: %v", err)
		case <-time.After(60 * time.Second):
			cancel()
			t.Fatal("replicas did not start")
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("replica: %v", err)
		}
	}
	lines := 0
	for _, o := range outs {
		lines += len(passwordLine.FindAllString(o.String(), -1))
	}
	n, _ := h.srv.Mongo.Database(env["MONGO_DB"]).Collection("users").CountDocuments(context.Background(), bson.M{})
	if lines != 1 || n != 1 {
		t.Fatalf("%d password lines and %d users after concurrent start, want 1 and 1", lines, n)
	}
}

func TestConfiguredAdminPassword(t *testing.T) {
	h := newHarness(t, map[string]string{"ADMIN_EMAIL": "Root@Example.com", "ADMIN_PASSWORD": "configured-secret", "AUTH_ADMIN_PASSWORD": ""})
	if strings.Contains(h.stdout.String(), "configured-secret") || strings.Contains(h.stdout.String(), "initial admin password") {
		t.Fatal("configured password printed")
	}
	h.signIn("root@example.com", "configured-secret")
}

func TestRehashAtSignin(t *testing.T) {
	h := newHarness(t, nil)
	admin := h.adminToken()
	id := h.createUser(admin, "lena@example.com", "lena-password")
	hash := func() string {
		var d struct {
			H string `bson:"passwordHash"`
		}
		_ = h.db.Collection("users").FindOne(context.Background(), bson.M{"_id": mustOID(t, id)}).Decode(&d)
		return d.H
	}
	if !strings.HasPrefix(hash(), "$argon2id$v=19$m=1024,t=1,p=1$") {
		t.Fatalf("hash %s", hash())
	}
	// A replica with new parameters re-hashes at the next sign-in.
	env := testkit.Env{}
	for k, v := range h.env {
		env[k] = v
	}
	env["AUTH_ARGON2_MEMORY_KIB"] = "2048"
	env["AUTH_ARGON2_TIME"] = "2"
	h2 := *h
	h2.base = h.run(env)
	h2.signIn("lena@example.com", "lena-password")
	if got := hash(); !strings.HasPrefix(got, "$argon2id$v=19$m=2048,t=2,p=1$") {
		t.Fatalf("hash after sign-in with new parameters: %s", got)
	}
	// Still verifies, on both replicas.
	h2.signIn("lena@example.com", "lena-password")
	h.signIn("lena@example.com", "lena-password")
}

func TestSweeperDeletesExpiredSessions(t *testing.T) {
	h := newHarness(t, map[string]string{"AUTH_SESSION_SWEEP_INTERVAL": "100ms"})
	expired := h.signIn(adminEmail, adminPassword)
	idle := h.signIn(adminEmail, adminPassword)
	live := h.signIn(adminEmail, adminPassword)
	setSession(t, h, expired, bson.M{"expiresAt": time.Now().Add(-time.Minute)})
	setSession(t, h, idle, bson.M{"lastSeenAt": time.Now().Add(-25 * time.Hour)})
	coll := h.db.Collection("sessions")
	apptest.Eventually(t, 10*time.Second, func() error {
		n, _ := coll.CountDocuments(context.Background(), bson.M{"_id": bson.M{"$in": bson.A{sha256Hex(expired), sha256Hex(idle)}}})
		if n != 0 {
			return fmt.Errorf("%d expired sessions not swept", n)
		}
		return nil
	})
	if n, _ := coll.CountDocuments(context.Background(), bson.M{"_id": sha256Hex(live)}); n != 1 {
		t.Fatal("sweeper deleted a live session")
	}
}

// With MongoDB gone, requests answer 503 JSON, never 500 or 401.
func TestMongoDown503(t *testing.T) {
	testkit.SkipShort(t)
	dir := t.TempDir()
	m, err := embedded.StartFerretDB(context.Background(), embedded.FerretDBOptions{Dir: filepath.Join(dir, "mongo")})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			m.Stop()
		}
	})
	h := newHarness(t, map[string]string{"MONGO_URL": m.URI, "AUTH_MONGO_SELECT_TIMEOUT": "1s"})
	tok, _ := h.tokenFor(h.signIn(adminEmail, adminPassword))
	m.Stop()
	stopped = true
	_ = os.RemoveAll(dir)

	// A user read before (in the user cache, which the fence still
	// vouches for: nothing can change a user without MongoDB) is served;
	// one that must be read from MongoDB is 503.
	want(t, h.do(req{method: "GET", path: "/me", token: tok}), 200, "")
	r := h.do(req{method: "GET", path: "/me", token: h.token("6b06a5223c75665b77abff9c", "user", "x")})
	want(t, r, 503, "")
	r = h.do(req{method: "GET", path: "/me/sessions", token: tok})
	want(t, r, 503, "")
	r = h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": adminEmail, "password": adminPassword}})
	want(t, r, 503, "")
	r, _ = h.msMe(strings.Repeat("A", 43))
	want(t, r, 503, "")
	want(t, h.do(req{method: "GET", path: "/readyz"}), 503, "unavailable")
}
