package app_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"

	"github.com/acme/platform/pkg/embedded"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// replica returns a harness for one more auth replica on h's database and
// NATS subject (same env).
func (h *harness) replica() *harness {
	h.t.Helper()
	b := *h
	b.base = h.run(h.env)
	return &b
}

func fullName(t *testing.T, r resp) string {
	t.Helper()
	want(t, r, 200, "")
	u, _ := r.body["user"].(map[string]any)
	s, _ := u["fullName"].(string)
	return s
}

func field(t *testing.T, r resp, key string) any {
	t.Helper()
	want(t, r, 200, "")
	u, _ := r.body["user"].(map[string]any)
	return u[key]
}

// The user cache is in use (a change behind the service's back is not
// seen) and yet every change made through any replica is seen by every
// replica on the very next request.
func TestUserCacheAcrossReplicas(t *testing.T) {
	a := newHarness(t, nil)
	b := a.replica()
	admin := a.adminToken()
	id := a.createUser(admin, "erin@example.com", "erin-password")
	secret := a.signIn("erin@example.com", "erin-password")
	tok, _ := a.tokenFor(secret)

	// Both replicas have read erin.
	if fullName(t, a.do(req{method: "GET", path: "/me", token: tok})) != "Test erin@example.com" ||
		fullName(t, b.do(req{method: "GET", path: "/me", token: tok})) != "Test erin@example.com" {
		t.Fatal("unexpected user")
	}
	// A write behind the service's back is not announced: B answers from
	// its cache (this is what the cache saves: no database read).
	if _, err := a.db.Collection("users").UpdateOne(context.Background(), bson.M{"_id": mustOID(t, id)},
		bson.M{"$set": bson.M{"fullName": "Behind the back"}}); err != nil {
		t.Fatal(err)
	}
	if got := fullName(t, b.do(req{method: "GET", path: "/me", token: tok})); got != "Test erin@example.com" {
		t.Fatalf("B answered %q: the user cache is not in use", got)
	}

	// Profile edits through A are visible on B at the next request, and
	// the other way round, every time.
	for i := range 20 {
		w, r := a, b
		if i%2 == 1 {
			w, r = b, a
		}
		name := fmt.Sprintf("Erin %d", i)
		want(t, w.do(req{method: "PATCH", path: "/me", token: tok, body: map[string]any{"fullName": name}}), 200, "")
		if got := fullName(t, r.do(req{method: "GET", path: "/me", token: tok})); got != name {
			t.Fatalf("edit %d: GET /me on the other replica answered %q, want %q", i, got, name)
		}
		if _, s := r.msMe(secret); s.user["fullName"] != name {
			t.Fatalf("edit %d: /ms/me on the other replica answered %v", i, s.user["fullName"])
		}
	}

	// Admin edits through A: role, sector, e-mail, seen on B at once.
	want(t, a.do(req{method: "PATCH", path: "/users/" + id, token: admin, body: map[string]any{"roleName": "admin", "sector": "Ops"}}), 200, "")
	if _, s := b.msMe(secret); s.role != "admin" {
		t.Fatalf("role on B after promotion: %q", s.role)
	}
	if got := field(t, b.do(req{method: "GET", path: "/me", token: tok}), "sector"); got != "Ops" {
		t.Fatalf("sector on B: %v", got)
	}
	want(t, a.do(req{method: "PATCH", path: "/users/" + id, token: admin, body: map[string]any{"roleName": "user", "email": "erin2@example.com"}}), 200, "")
	if _, s := b.msMe(secret); s.role != "user" || s.user["email"] != "erin2@example.com" {
		t.Fatalf("on B after demotion: role %q email %v", s.role, s.user["email"])
	}

	// A password change through A ends erin's other sessions on B at once,
	// and the new session works on B.
	other := a.signIn("erin2@example.com", "erin-password")
	if r, _ := b.msMe(other); r.status != 200 {
		t.Fatalf("second session: %d", r.status)
	}
	r := a.do(req{method: "PATCH", path: "/me", token: tok, body: map[string]any{"password": map[string]string{"old": "erin-password", "new": "erin-password-2"}}})
	want(t, r, 200, "")
	fresh := sessionCookie(t, r).Value
	for _, s := range []string{secret, other} {
		r, _ := b.msMe(s)
		want(t, r, 401, "invalid_session")
	}
	tok, _ = b.tokenFor(fresh)
	want(t, b.do(req{method: "GET", path: "/me", token: tok}), 200, "")

	// An admin password reset through B ends the session on A at once.
	want(t, b.do(req{method: "PATCH", path: "/users/" + id, token: admin, body: map[string]any{"password": map[string]string{"new": "erin-password-3"}}}), 200, "")
	r, _ = a.msMe(fresh)
	want(t, r, 401, "invalid_session")

	// Deleted through A: B refuses at once (GET /me 401, /ms/me 401).
	third := b.signIn("erin2@example.com", "erin-password-3")
	tok, _ = b.tokenFor(third)
	want(t, b.do(req{method: "GET", path: "/me", token: tok}), 200, "")
	want(t, a.do(req{method: "DELETE", path: "/users/" + id, token: admin}), 200, "")
	want(t, b.do(req{method: "GET", path: "/me", token: tok}), 401, "unauthenticated")
	r, _ = b.msMe(third)
	want(t, r, 401, "invalid_session")
}

// With NATS away no replica can learn of changes made elsewhere, so none
// serves a cached user: every read goes to the database, and stays exact.
// After NATS is back, the first fence clears what was cached before.
func TestUserCacheWithoutNATS(t *testing.T) {
	testkit.SkipShort(t)
	dir := t.TempDir()
	addr, err := embedded.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	ns, err := embedded.NATS(filepath.Join(dir, "nats"), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			ns.Shutdown()
		}
	})
	a := newHarness(t, map[string]string{"NATS_URL": ns.ClientURL()})
	b := a.replica()
	admin := a.adminToken()
	a.createUser(admin, "finn@example.com", "finn-password")
	secret := a.signIn("finn@example.com", "finn-password")
	tok, _ := a.tokenFor(secret)
	if fullName(t, b.do(req{method: "GET", path: "/me", token: tok})) != "Test finn@example.com" {
		t.Fatal("unexpected user")
	}

	ns.Shutdown()
	stopped = true
	// Give the clients a moment to notice.
	time.Sleep(200 * time.Millisecond)
	for i := range 3 {
		name := fmt.Sprintf("Finn offline %d", i)
		want(t, a.do(req{method: "PATCH", path: "/me", token: tok, body: map[string]any{"fullName": name}}), 200, "")
		if got := fullName(t, b.do(req{method: "GET", path: "/me", token: tok})); got != name {
			t.Fatalf("NATS down: B answered %q, want %q", got, name)
		}
		if _, s := b.msMe(secret); s.user["fullName"] != name {
			t.Fatalf("NATS down: /ms/me on B answered %v", s.user["fullName"])
		}
	}

	// NATS back on the same address: the replicas reconnect, and edits are
	// again seen everywhere at once.
	ns2, err := embedded.NATS(filepath.Join(dir, "nats"), "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns2.Shutdown)
	apptest.Eventually(t, 15*time.Second, func() error {
		ra := a.do(req{method: "GET", path: "/readyz"})
		rb := b.do(req{method: "GET", path: "/readyz"})
		if ra.status != 200 || rb.status != 200 {
			return fmt.Errorf("replicas not ready after NATS came back: %s / %s", ra.raw, rb.raw)
		}
		return nil
	})
	for i := range 5 {
		name := fmt.Sprintf("Finn online %d", i)
		want(t, a.do(req{method: "PATCH", path: "/me", token: tok, body: map[string]any{"fullName": name}}), 200, "")
		if got := fullName(t, b.do(req{method: "GET", path: "/me", token: tok})); got != name {
			t.Fatalf("NATS back: B answered %q, want %q", got, name)
		}
	}
}

// signInStatus signs in on h and returns the status and error code.
func (h *harness) signInStatus(email, pw string) (int, string) {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": email, "password": pw}})
	code, _ := r.body["code"].(string)
	return r.status, code
}

// Sign-ins read the user and the address through the cache (a password
// hash changed behind the service's back is not seen), and yet every
// password change, address change and deletion made through one replica,
// and every throttle change (throttle states are never cached), holds on
// the other at the next sign-in.
func TestSignInCacheAcrossReplicas(t *testing.T) {
	a := newHarness(t, map[string]string{"AUTH_THROTTLE_ACCOUNT_MAX": "3"})
	b := a.replica()
	admin := a.adminToken()
	id := a.createUser(admin, "fay@example.com", "fay-password")
	for range 2 { // the second sign-in on b is served by b's caches
		if st, code := b.signInStatus("fay@example.com", "fay-password"); st != 200 {
			t.Fatalf("sign-in on B: %d %s", st, code)
		}
	}
	// A hash replaced behind the service's back is not announced: B still
	// verifies against the cached one (this is what the cache saves).
	testkit.AllowScan(a.db.Name(), "users", "{email: string}") // the test's own look-up
	other, err := a.db.Collection("users").FindOne(context.Background(), bson.M{"email": "admin@acme.local"}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	adminHash := other.Lookup("passwordHash").StringValue()
	oldHash := ""
	if u, err := a.db.Collection("users").FindOne(context.Background(), bson.M{"_id": mustOID(t, id)}).Raw(); err == nil {
		oldHash = u.Lookup("passwordHash").StringValue()
	}
	if _, err := a.db.Collection("users").UpdateOne(context.Background(), bson.M{"_id": mustOID(t, id)},
		bson.M{"$set": bson.M{"passwordHash": adminHash}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.signInStatus("fay@example.com", "fay-password"); st != 200 {
		t.Fatalf("B answered %d: sign-ins do not read users through the cache", st)
	}
	if _, err := a.db.Collection("users").UpdateOne(context.Background(), bson.M{"_id": mustOID(t, id)},
		bson.M{"$set": bson.M{"passwordHash": oldHash}}); err != nil {
		t.Fatal(err)
	}

	// A password change through A: the old password is refused on B at
	// once, the new one accepted.
	secret := b.signIn("fay@example.com", "fay-password")
	tok, _ := b.tokenFor(secret)
	want(t, a.do(req{method: "PATCH", path: "/me", token: tok, body: map[string]any{"password": map[string]string{"old": "fay-password", "new": "fay-password-2"}}}), 200, "")
	if st, code := b.signInStatus("fay@example.com", "fay-password"); st != 401 {
		t.Fatalf("old password on B after the change on A: %d %s", st, code)
	}
	b.signIn("fay@example.com", "fay-password-2")

	// An administrator's password reset through B holds on A.
	a.signIn("fay@example.com", "fay-password-2")
	want(t, b.do(req{method: "PATCH", path: "/users/" + id, token: admin, body: map[string]any{"password": map[string]string{"new": "fay-password-3"}}}), 200, "")
	if st, _ := a.signInStatus("fay@example.com", "fay-password-2"); st != 401 {
		t.Fatalf("old password on A after the reset on B: %d", st)
	}
	a.signIn("fay@example.com", "fay-password-3")

	// The address moves through A: the old one is refused on B, the new
	// one works; then another user takes the old address and B signs
	// that user in, not fay.
	b.signIn("fay@example.com", "fay-password-3")
	want(t, a.do(req{method: "PATCH", path: "/users/" + id, token: admin, body: map[string]any{"email": "fay2@example.com"}}), 200, "")
	if st, _ := b.signInStatus("fay@example.com", "fay-password-3"); st != 401 {
		t.Fatalf("old address on B after the change on A: %d", st)
	}
	b.signIn("fay2@example.com", "fay-password-3")
	gus := a.createUser(admin, "fay@example.com", "gus-password")
	if st, _ := b.signInStatus("fay@example.com", "fay-password-3"); st != 401 {
		t.Fatalf("fay's password for gus's address on B: %d", st)
	}
	if _, s := b.msMe(b.signIn("fay@example.com", "gus-password")); s.userID != gus {
		t.Fatalf("the address now names %s, want gus %s", s.userID, gus)
	}

	// Failures through A lock the account on B at once, even for the right
	// password; B had cached the account's state (no failures).
	b.signIn("fay2@example.com", "fay-password-3")
	for range 3 {
		if st, _ := a.signInStatus("fay2@example.com", "wrong-password"); st != 401 {
			t.Fatalf("wrong password on A: %d", st)
		}
	}
	if st, code := b.signInStatus("fay2@example.com", "fay-password-3"); st != 429 {
		t.Fatalf("right password on B after the lock on A: %d %s, want 429", st, code)
	}

	// Deleted through A: refused on B at once.
	want(t, a.do(req{method: "DELETE", path: "/users/" + gus, token: admin}), 200, "")
	if st, _ := b.signInStatus("fay@example.com", "gus-password"); st != 401 {
		t.Fatalf("deleted user on B: %d", st)
	}
}
