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
