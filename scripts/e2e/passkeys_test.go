package e2e

// Passkeys through the gateway, against real servers. TestPasskeyCeremonies
// drives the API with a software authenticator (pkg/testkit/authenticator):
// registration, discoverable sign-in, replayed, unknown and expired
// ceremonies, another origin, a rewound sign count, the administrators' MFA
// requirement met by a passkey session, the administrator's reset,
// throttling and the audit trail. TestPasskeysInBrowser does it as a person
// would, in headless Chromium with a DevTools virtual authenticator, through
// the console's pages.

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/testkit/authenticator"
	"github.com/acme/platform/scripts/stack"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
)

// registerPasskey adds a passkey of a to c's account; it returns the
// passkey as listed.
func registerPasskey(t *testing.T, c *client, a *authenticator.Authenticator, name string) map[string]any {
	t.Helper()
	begin := c.mustStatus(200, "POST", "/me/passkeys/begin", nil)
	resp, err := a.Create(publicKeyOf(t, begin))
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"ceremony": begin["ceremony"], "credential": json.RawMessage(resp)}
	if name != "" {
		body["name"] = name
	}
	return c.mustStatus(201, "POST", "/me/passkeys/finish", body)["passkey"].(map[string]any)
}

func publicKeyOf(t *testing.T, begin map[string]any) []byte {
	t.Helper()
	if c, _ := begin["ceremony"].(string); len(c) != 43 {
		t.Fatalf("ceremony id %v", begin["ceremony"])
	}
	b, err := json.Marshal(begin["publicKey"])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// passkeySignIn begins a sign-in ceremony and answers it with a; it returns
// the client, the finish body (for replays) and the finish's status and
// answer.
func passkeySignIn(t *testing.T, gw string, a *authenticator.Authenticator) (*client, map[string]any, int, map[string]any) {
	t.Helper()
	c := newClient(t, gw)
	begin := c.mustStatus(200, "POST", "/signin/passkey/begin", nil)
	resp, err := a.Get(publicKeyOf(t, begin))
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"ceremony": begin["ceremony"], "credential": json.RawMessage(resp)}
	status, m, _ := c.do("POST", "/signin/passkey/finish", body)
	return c, body, status, m
}

func passkeysOf(t *testing.T, c *client) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, p := range c.mustStatus(200, "GET", "/me/passkeys", nil)["passkeys"].([]any) {
		out = append(out, p.(map[string]any))
	}
	return out
}

// awaitAudit waits until the audit trail (ACME-AUTH records) has an event
// of type event whose body contains every string of with, and fails if any
// record contains a string of never.
func awaitAudit(t *testing.T, admin *client, event string, with, never []string) {
	t.Helper()
	awaitAuditEvents(t, admin, map[string]func(string, map[string]any) bool{
		event: func(body string, _ map[string]any) bool {
			for _, s := range with {
				if !strings.Contains(body, s) {
					return false
				}
			}
			return true
		},
	}, func(body string, _, _ map[string]any) {
		for _, s := range never {
			if strings.Contains(body, s) {
				t.Fatalf("the audit trail shows %q: %s", s, body)
			}
		}
	})
}

func TestPasskeyCeremonies(t *testing.T) {
	const origin = "http://localhost:8080" // AUTH_WEBAUTHN_ORIGINS' default, with AUTH_WEBAUTHN_RP_ID localhost
	p, sec, _ := platform(t, map[string]string{"AUTH_WEBAUTHN_TIMEOUT": "3s", "AUTH_MFA_REQUIRE_ADMIN": "true"})
	gw := p.GatewayURL
	const pw = "correct horse battery"
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)

	// The administrator must enrol: a passkey, then a passkey sign-in.
	if u := admin.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any); u["roleName"] != "user" {
		t.Fatalf("an administrator without a second factor: %v", u)
	}
	adminKey := authenticator.New(origin)
	registerPasskey(t, admin, adminKey, "")
	if st := admin.mustStatus(200, "GET", "/me/mfa", nil); st["passkeys"] != float64(1) || st["required"] != false {
		t.Fatalf("GET /me/mfa with a passkey: %v", st)
	}
	admin.mustStatus(403, "GET", "/users", nil) // the password session still is one factor
	admin, _, status, m := passkeySignIn(t, gw, adminKey)
	if status != 200 || admin.cookie() == "" {
		t.Fatalf("administrator's passkey sign-in: %d %v", status, m)
	}
	if u := admin.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any); u["roleName"] != "admin" {
		t.Fatalf("an administrator signed in with a passkey: %v", u)
	}
	created := admin.mustStatus(201, "POST", "/users", map[string]any{"email": "kim@example.com", "password": pw, "fullName": "Kim", "edv": "E-9"})
	kimID := created["user"].(map[string]any)["id"].(string)

	kim := signIn(t, gw, "kim@example.com", pw)
	if l := passkeysOf(t, kim); len(l) != 0 {
		t.Fatalf("passkeys before registration: %v", l)
	}
	// Registration: bad input, then the ceremony, then its replay.
	wantCode(t, kim, "POST", "/me/passkeys/finish", map[string]any{"credential": map[string]any{}}, 400, "missing_field")
	wantCode(t, kim, "POST", "/me/passkeys/finish", map[string]any{"ceremony": "x"}, 400, "missing_field")
	wantCode(t, kim, "POST", "/me/passkeys/finish", map[string]any{"ceremony": "x", "credential": "y"}, 400, "invalid_type")
	wantCode(t, kim, "POST", "/me/passkeys/finish", map[string]any{"ceremony": strings.Repeat("A", 43), "credential": map[string]any{}}, 400, "invalid_ceremony")
	key := authenticator.New(origin)
	begin := kim.mustStatus(200, "POST", "/me/passkeys/begin", nil)
	resp, err := key.Create(publicKeyOf(t, begin))
	if err != nil {
		t.Fatal(err)
	}
	finish := map[string]any{"ceremony": begin["ceremony"], "credential": json.RawMessage(resp), "name": "Soft key"}
	pk := kim.mustStatus(201, "POST", "/me/passkeys/finish", finish)["passkey"].(map[string]any)
	wantCode(t, kim, "POST", "/me/passkeys/finish", finish, 400, "invalid_ceremony") // spent
	if pk["name"] != "Soft key" || pk["lastUsedAt"] != nil || pk["cloneWarning"] != false {
		t.Fatalf("registered passkey: %v", pk)
	}
	pkID := pk["id"].(string)
	// Kim's ceremony answered in the administrator's session: refused (and
	// spent).
	begin = kim.mustStatus(200, "POST", "/me/passkeys/begin", nil)
	resp, _ = authenticator.New(origin).Create(publicKeyOf(t, begin))
	theirs := map[string]any{"ceremony": begin["ceremony"], "credential": json.RawMessage(resp)}
	wantCode(t, admin, "POST", "/me/passkeys/finish", theirs, 400, "invalid_ceremony")
	wantCode(t, kim, "POST", "/me/passkeys/finish", theirs, 400, "invalid_ceremony")
	// A registration signed for another origin.
	evil := authenticator.New("http://evil.example")
	begin = kim.mustStatus(200, "POST", "/me/passkeys/begin", nil)
	resp, _ = evil.Create(publicKeyOf(t, begin))
	_, m, _ = kim.do("POST", "/me/passkeys/finish", map[string]any{"ceremony": begin["ceremony"], "credential": json.RawMessage(resp)})
	if m["code"] != "passkey_rejected" || !strings.Contains(strings.ToLower(m["error"].(string)), "origin") {
		t.Fatalf("registration from another origin: %v", m)
	}

	// Sign-in: no e-mail, no password; a session like a password's.
	c, body, status, m := passkeySignIn(t, gw, key)
	if status != 200 || m["message"] != "session created" || c.cookie() == "" {
		t.Fatalf("passkey sign-in: %d %v", status, m)
	}
	if u := c.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any); u["id"] != kimID {
		t.Fatalf("GET /me after a passkey sign-in: %v", u)
	}
	if l := passkeysOf(t, kim); len(l) != 1 || l[0]["lastUsedAt"] == nil {
		t.Fatalf("passkeys after a sign-in: %v", l)
	}
	// Replayed, unknown, malformed and expired ceremonies.
	replay := newClient(t, gw)
	wantCode(t, replay, "POST", "/signin/passkey/finish", body, 400, "invalid_ceremony")
	replay.mustStatus(401, "GET", "/me", nil)
	wantCode(t, replay, "POST", "/signin/passkey/finish", map[string]any{"ceremony": strings.Repeat("B", 43), "credential": body["credential"]}, 400, "invalid_ceremony")
	wantCode(t, replay, "POST", "/signin/passkey/finish", map[string]any{"ceremony": "short", "credential": body["credential"]}, 400, "invalid_ceremony")
	wantCode(t, replay, "POST", "/signin/passkey/finish", map[string]any{"credential": body["credential"]}, 400, "missing_field")
	wantCode(t, replay, "POST", "/signin/passkey/finish", map[string]any{"ceremony": "x", "credential": body["credential"], "name": "n"}, 400, "unknown_field")
	begin = replay.mustStatus(200, "POST", "/signin/passkey/begin", nil)
	resp, _ = key.Get(publicKeyOf(t, begin))
	time.Sleep(3500 * time.Millisecond) // past AUTH_WEBAUTHN_TIMEOUT
	wantCode(t, replay, "POST", "/signin/passkey/finish", map[string]any{"ceremony": begin["ceremony"], "credential": json.RawMessage(resp)}, 400, "invalid_ceremony")

	// Another origin: refused, saying why.
	key.Origin = "http://evil.example"
	_, _, status, m = passkeySignIn(t, gw, key)
	if status != 401 || m["code"] != "passkey_failed" || !strings.Contains(strings.ToLower(m["error"].(string)), "origin") {
		t.Fatalf("sign-in from another origin: %d %v", status, m)
	}
	key.Origin = origin
	// A rewound sign count (the next assertion presents 1, the count the
	// one sign-in stored): refused and marked.
	key.Creds[0].Count = 0
	_, _, status, m = passkeySignIn(t, gw, key)
	if status != 401 || m["code"] != "passkey_cloned" {
		t.Fatalf("rewound sign count: %d %v", status, m)
	}
	if l := passkeysOf(t, kim); l[0]["cloneWarning"] != true {
		t.Fatalf("after a rewound sign count: %v", l)
	}
	key.Creds[0].Count += 5
	if _, _, status, m := passkeySignIn(t, gw, key); status != 200 {
		t.Fatalf("sign count advanced again: %d %v", status, m)
	}

	// Remove, then sign in with it: unknown.
	wantCode(t, admin, "DELETE", "/me/passkeys/"+pkID, nil, 404, "passkey_not_found") // not the administrator's
	kim.mustStatus(200, "DELETE", "/me/passkeys/"+pkID, nil)
	wantCode(t, kim, "DELETE", "/me/passkeys/"+pkID, nil, 404, "passkey_not_found")
	_, _, status, m = passkeySignIn(t, gw, key)
	if status != 401 || m["code"] != "passkey_unknown" {
		t.Fatalf("removed passkey: %d %v", status, m)
	}

	// The administrator's reset removes passkeys too.
	key2 := authenticator.New(origin)
	registerPasskey(t, kim, key2, "")
	admin.mustStatus(200, "DELETE", "/users/"+kimID+"/mfa", nil)
	if l := passkeysOf(t, kim); len(l) != 0 {
		t.Fatalf("passkeys after the administrator's reset: %v", l)
	}
	if _, _, status, m := passkeySignIn(t, gw, key2); status != 401 || m["code"] != "passkey_unknown" {
		t.Fatalf("sign-in after the reset: %d %v", status, m)
	}

	// Throttling: refused assertions of a known passkey count against the
	// account (5); then even a good one waits.
	key3 := authenticator.New(origin)
	registerPasskey(t, kim, key3, "")
	key3.Origin = "http://evil.example"
	for i := range 5 {
		if _, _, status, m := passkeySignIn(t, gw, key3); status != 401 {
			t.Fatalf("refused assertion %d: %d %v", i+1, status, m)
		}
	}
	key3.Origin = origin
	_, _, status, m = passkeySignIn(t, gw, key3)
	if status != 429 || m["code"] != "throttled" {
		t.Fatalf("sixth attempt: %d %v", status, m)
	}

	adminID := admin.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)["id"].(string)
	awaitAudit(t, admin, "passkey.added", []string{kimID, pkID}, nil)
	awaitAudit(t, admin, "passkey.removed", []string{kimID, pkID}, nil)
	awaitAudit(t, admin, "signin.succeeded", []string{kimID, `"factor":"passkey"`}, nil)
	awaitAudit(t, admin, "passkey.clone_warning", []string{kimID, pkID}, nil)
	awaitAudit(t, admin, "passkey.failed", []string{`"reason":"passkey_failed"`}, nil)
	awaitAudit(t, admin, "mfa.reset", []string{kimID, adminID, `"passkeysRemoved":1`}, nil)
}

// TestPasskeysInBrowser: register a passkey on the profile page, sign out,
// sign in with the passkey button, see its last use, remove it, and fail to
// sign in with it. The console is opened as http://localhost:<port> (an IP
// address cannot be a relying-party id).
func TestPasskeysInBrowser(t *testing.T) {
	artifacts := browserArtifacts(t)
	addr, err := embedded.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	base := "http://localhost:" + port
	p, sec, _ := platformWith(t, map[string]string{"AUTH_WEBAUTHN_ORIGINS": base}, stack.Options{GatewayAddr: addr})
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	const email, pw = "pat@example.com", "correct horse battery"
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": email, "password": pw, "fullName": "Pat", "edv": "E-6"})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := startBrowser(ctx, t, artifacts)
	pg := b.newTab("passkeys", 1280, 1000)
	// A platform authenticator with resident keys and user verification
	// that succeeds (a fingerprint touched), on this tab's page.
	if _, err := chromedp.Call(pg.ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	va, err := chromedp.Call(pg.ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
		Protocol: webauthn.AuthenticatorProtocolCtap2, Transport: webauthn.AuthenticatorTransportInternal,
		HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	me := func() map[string]any {
		var r map[string]any
		pg.eval(`fetch('/me', { credentials: 'same-origin' }).then(async (r) => ({ status: r.status, body: await r.json() }))`, &r)
		return r
	}
	signInWithPasskey := func() {
		pg.click(doc.role("button", "Sign out"))
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.click(doc.role("button", "Sign in with a passkey"))
	}
	row := doc.role("table", "Your passkeys").role("row", rx(`^Laptop key`))

	b.step("register a passkey", pg, func() {
		pg.goTo(base + "/console/#/signin")
		pg.fill(doc.label("E-mail"), email)
		pg.fill(doc.label("Password"), pw)
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("h1", "Profile"))
		pg.waitFor(doc.role("table", "Your passkeys").text("No passkeys yet."))
		pg.fill(doc.label("Name for the new passkey (optional)"), "Laptop key")
		pg.click(doc.role("button", "Add a passkey"))
		pg.waitFor(row)
		if got := pg.textOf(row.role("cell", nil).nth(2)); got != "never" {
			t.Fatalf("last used of a new passkey: %q", got)
		}
		pg.shot("50-passkey-added")
		creds, err := chromedp.Call(pg.ctx, webauthn.GetCredentials, webauthn.GetCredentialsParams{AuthenticatorID: va.AuthenticatorID})
		if err != nil || len(creds.Credentials) != 1 || !creds.Credentials[0].IsResidentCredential {
			t.Fatalf("the authenticator's credentials: %+v %v", creds, err)
		}
	})

	b.step("sign in with the passkey", pg, func() {
		signInWithPasskey()
		pg.waitFor(doc.role("h1", "Profile"))
		r := me()
		if r["status"] != float64(200) || r["body"].(map[string]any)["user"].(map[string]any)["email"] != email {
			t.Fatalf("GET /me after the passkey sign-in: %v", r)
		}
		pg.waitFor(row)
		if got := pg.textOf(row.role("cell", nil).nth(2)); got == "never" || got == "" {
			t.Fatalf("last used after a sign-in: %q", got)
		}
		pg.shot("51-passkey-signed-in")
	})

	b.step("remove it", pg, func() {
		confirmed := pg.acceptDialog()
		pg.click(doc.role("button", "Remove passkey Laptop key"))
		if m := confirmed(); !strings.HasPrefix(m, "Remove the passkey “Laptop key”?") {
			t.Fatalf("confirmation: %q", m)
		}
		pg.waitFor(doc.role("table", "Your passkeys").text("No passkeys yet."))
	})

	b.step("a removed passkey does not sign in", pg, func() {
		signInWithPasskey()
		pg.waitFor(doc.role("alert", rx(`not registered here`)))
		pg.shot("52-passkey-removed")
		if r := me(); r["status"] != float64(401) {
			t.Fatalf("GET /me after the refused sign-in: %v", r)
		}
	})
}
