package app_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestSignin(t *testing.T) {
	h := newHarness(t, nil)
	admin := h.adminToken()
	h.createUser(admin, "Alice@Example.com", "alice-password")

	for _, tc := range []struct {
		name      string
		email, pw string
		status    int
		code      string
	}{
		{"signin200", "alice@example.com", "alice-password", 200, ""},
		{"signin200CaseInsensitive", "ALICE@EXAMPLE.COM", "alice-password", 200, ""},
		{"signin401UnknownEmail", "nobody@example.com", "alice-password", 401, "invalid_credentials"},
		{"signin401WrongPassword", "alice@example.com", "wrong-password", 401, "invalid_credentials"},
		{"signin400ShortPassword", "alice@example.com", "short", 400, "invalid_password"},
		{"signin400EmptyEmail", "", "alice-password", 400, "invalid_email"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": tc.email, "password": tc.pw}})
			want(t, r, tc.status, tc.code)
			if tc.status == 200 {
				if r.body["message"] != "session created" {
					t.Fatalf("body %s", r.raw)
				}
				sessionCookie(t, r)
			} else if len(r.header.Values("Set-Cookie")) > 0 {
				t.Fatalf("failed sign-in set a cookie: %v", r.header.Values("Set-Cookie"))
			}
		})
	}
	t.Run("signin400LongPassword", func(t *testing.T) {
		r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": "alice@example.com", "password": strings.Repeat("x", 1025)}})
		want(t, r, 400, "invalid_password")
		if r.body["field"] != "password" {
			t.Fatalf("field %v, want password", r.body["field"])
		}
	})
	t.Run("signin400MissingPassword", func(t *testing.T) {
		r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": "alice@example.com"}})
		want(t, r, 400, "missing_field")
	})
}

func TestSigninCookieAndStoredHash(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(),
		headers: map[string]string{"User-Agent": "cookie-test/1.0"},
		body:    map[string]string{"email": adminEmail, "password": adminPassword}})
	want(t, r, 200, "")
	c := sessionCookie(t, r)
	if !c.HttpOnly || !c.Secure || c.SameSite != 2 /* http.SameSiteLaxMode */ || c.Path != "/" {
		t.Fatalf("cookie attributes: %s", c.Raw)
	}
	if c.MaxAge != int((7 * 24 * time.Hour).Seconds()) {
		t.Fatalf("Max-Age %d, want 7 days (%s)", c.MaxAge, c.Raw)
	}
	if len(c.Value) != 43 || strings.ContainsAny(c.Value, "+/=") {
		t.Fatalf("cookie value %q is not 43 base64url characters", c.Value)
	}

	ctx := context.Background()
	var doc bson.M
	if err := h.db.Collection("sessions").FindOne(ctx, bson.M{"_id": sha256Hex(c.Value)}).Decode(&doc); err != nil {
		t.Fatalf("no session stored under sha256(cookie): %v", err)
	}
	n, _ := h.db.Collection("sessions").CountDocuments(ctx, bson.M{"_id": c.Value})
	if n != 0 {
		t.Fatal("session stored under the cookie value itself")
	}
	raw, _ := bson.MarshalExtJSON(doc, false, false)
	if strings.Contains(string(raw), c.Value) {
		t.Fatalf("stored session contains the cookie value: %s", raw)
	}
	for _, f := range []string{"publicId", "userId", "createdAt", "lastSeenAt", "expiresAt", "userAgent", "ip"} {
		if _, ok := doc[f]; !ok {
			t.Errorf("stored session lacks %s: %s", f, raw)
		}
	}
	if doc["userAgent"] != "cookie-test/1.0" || doc["ip"] != "127.0.0.1" {
		t.Errorf("userAgent/ip: %s", raw)
	}

	// A second sign-in is a new session.
	if other := h.signIn(adminEmail, adminPassword); other == c.Value {
		t.Fatal("sign-in reused a session")
	}

	t.Run("insecureCookieWhenConfigured", func(t *testing.T) {
		h2 := newHarness(t, map[string]string{"AUTH_COOKIE_SECURE": "false"})
		r := h2.do(req{method: "POST", path: "/signin", token: h2.anonToken(), body: map[string]string{"email": adminEmail, "password": adminPassword}})
		want(t, r, 200, "")
		if c := sessionCookie(t, r); c.Secure || !c.HttpOnly {
			t.Fatalf("cookie %s: want no Secure, HttpOnly", c.Raw)
		}
	})
}

func TestSigninThrottle(t *testing.T) {
	h := newHarness(t, map[string]string{
		"AUTH_THROTTLE_ACCOUNT_MAX": "3",
		"AUTH_THROTTLE_ADDRESS_MAX": "10",
		"AUTH_THROTTLE_LOCK":        "1m",
	})
	admin := h.adminToken()
	h.createUser(admin, "bob@example.com", "bob-password")
	attempt := func(email, pw string) resp {
		return h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": email, "password": pw}})
	}

	// Success resets the account counter.
	want(t, attempt("bob@example.com", "wrong-password"), 401, "invalid_credentials")
	want(t, attempt("bob@example.com", "wrong-password"), 401, "invalid_credentials")
	want(t, attempt("bob@example.com", "bob-password"), 200, "")
	want(t, attempt("bob@example.com", "wrong-password"), 401, "invalid_credentials")
	want(t, attempt("bob@example.com", "wrong-password"), 401, "invalid_credentials")
	want(t, attempt("bob@example.com", "bob-password"), 200, "")

	// Three failures lock the account, even for the right password.
	for i := 0; i < 3; i++ {
		want(t, attempt("bob@example.com", "wrong-password"), 401, "invalid_credentials")
	}
	r := attempt("bob@example.com", "bob-password")
	want(t, r, 429, "throttled")
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q, want 1..60 seconds", r.header.Get("Retry-After"))
	}
	if n, _ := r.body["retryAfter"].(float64); int(n) != ra {
		t.Fatalf("body retryAfter %v, header %d", r.body["retryAfter"], ra)
	}
	// The state is in MongoDB, so another replica refuses too.
	other := h.run(h.env)
	h2 := *h
	h2.base = other
	want(t, h2.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": "bob@example.com", "password": "bob-password"}}), 429, "throttled")

	// Unknown e-mails count per account too (no hint that they do not exist).
	for i := 0; i < 3; i++ {
		want(t, attempt("ghost@example.com", "wrong-password"), 401, "invalid_credentials")
	}
	want(t, attempt("ghost@example.com", "wrong-password"), 429, "throttled")
	// This address has now failed 10 times: every account is refused from it.
	want(t, attempt("admin@acme.local", adminPassword), 429, "throttled")

	// Lock expiry, simulated: the account and address locks end in the past.
	// Throttle states are not cached: the next sign-in reads the change.
	ctx := context.Background()
	testkit.AllowScan(h.db.Name(), "signin_throttle", "{}")
	if _, err := h.db.Collection("signin_throttle").UpdateMany(ctx, bson.M{},
		bson.M{"$set": bson.M{"lockedUntil": time.Now().Add(-time.Second)}}); err != nil {
		t.Fatal(err)
	}
	want(t, attempt("bob@example.com", "bob-password"), 200, "")

	// A second lock of the same account lasts longer than the first.
	for i := 0; i < 3; i++ {
		want(t, attempt("ghost@example.com", "wrong-password"), 401, "invalid_credentials")
	}
	r = attempt("ghost@example.com", "wrong-password")
	want(t, r, 429, "throttled")
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra <= 60 || ra > 120 {
		t.Fatalf("second lock Retry-After %d, want 61..120 seconds", ra)
	}
}
