package e2e

// Hostile-input cases of the account routes (issue 34, rows 6 and 8),
// replayed through the gateway against the real processes, with mail
// delivered to a real SMTP server (Mailpit).

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
)

// mailCount is how many messages with subject reached address (all of
// them when subject is "").
func mailCount(t *testing.T, mc *embedded.MailpitClient, address, subject string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := mc.To(ctx, address)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range list {
		if subject == "" || m.Subject == subject {
			n++
		}
	}
	return n
}

const (
	subjectVerify  = "Confirm your e-mail address"
	subjectChanged = "Your e-mail address is changing"
	subjectInUse   = "Someone asked to use your e-mail address"
	subjectConfirm = "Confirm the change of your e-mail address"
)

// TestHostileEmailEnumeration: a signed-in user may not learn which
// addresses have accounts through PATCH /me {email}, nor move the account
// with a stolen session (e-mail alone needs the current mailbox's
// confirmation too), nor flood mailboxes with address changes or
// verification links.
func TestHostileEmailEnumeration(t *testing.T) {
	// The throttle's windows are fixed intervals: a long one, so that no
	// window ends during the test.
	mc, env := mailCatcher(t, map[string]string{
		"AUTH_EMAIL_THROTTLE_ACCOUNT_MAX": "5", "AUTH_EMAIL_THROTTLE_TARGET_MAX": "3", "AUTH_EMAIL_THROTTLE_WINDOW": "8760h",
	})
	p, sec, _ := platform(t, env)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	const pw = "correct horse battery"
	for _, u := range []string{"alice", "mallory", "eve", "trudy", "oscar"} {
		admin.mustStatus(201, "POST", "/users", map[string]any{"email": u + "@example.com", "password": pw, "fullName": u, "edv": "E-" + u})
	}
	signIn := func(email string) *client {
		c := newClient(t, p.GatewayURL)
		c.mustStatus(200, "POST", "/signin", map[string]string{"email": email, "password": pw})
		return c
	}
	mallory := signIn("mallory@example.com")
	// Every creation sent a verification link: wait for them, so that
	// later counts see only what the attack caused.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, u := range []string{"alice", "mallory", "eve", "trudy", "oscar"} {
		if _, err := mc.WaitFor(ctx, u+"@example.com", subjectVerify, 1); err != nil {
			t.Fatal(err)
		}
	}

	// A stolen session of oscar's (no password, no access to his
	// mailbox): e-mail alone is accepted, the same answer for a taken and a
	// free address, the user unchanged.
	oscar := signIn("oscar@example.com")
	alone := func(addr string) (int, string) {
		got, m, _ := oscar.do("PATCH", "/me", map[string]any{"email": addr})
		b, _ := json.Marshal(m)
		return got, string(b)
	}
	takenStatus, taken := alone("ALICE@example.com")
	freeStatus, free := alone("thief@example.com")
	if takenStatus != 200 || freeStatus != takenStatus || taken != free {
		t.Fatalf("e-mail alone, taken address: %d %s\nfree address: %d %s\nwant the same 200", takenStatus, taken, freeStatus, free)
	}
	oscarMe := func() map[string]any { return oscar.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any) }
	if me := oscarMe(); me["email"] != "oscar@example.com" {
		t.Fatalf("the address changed at once: %v", me)
	}
	// Mail: the taken address's owner is told, the free one gets a link,
	// and oscar's own mailbox the confirmation of each (the same mail).
	if _, err := mc.WaitFor(ctx, "alice@example.com", subjectInUse, 1); err != nil {
		t.Fatal(err)
	}
	thiefLink := mailedToken(t, mc, "thief@example.com", subjectVerify, "verify", 1)
	ownerLink := mailedToken(t, mc, "oscar@example.com", subjectConfirm, "confirm-email-change", 2)
	if m, _ := mc.WaitFor(ctx, "oscar@example.com", subjectConfirm, 2); !strings.Contains(m.Text, "thief@example.com") {
		t.Fatalf("the newest confirmation names another address:\n%s", m.Text)
	}
	// The thief opens the link of the mailbox they hold: confirmed, not
	// done; once only; not usable as the current address's.
	if got, m, _ := newClient(t, p.GatewayURL).do("POST", "/email/verify", map[string]string{"token": thiefLink}); got != 202 {
		t.Fatalf("the thief's link: %d %v, want 202", got, m)
	}
	for _, path := range []string{"/email/verify", "/email/change/confirm"} {
		if got, m, _ := newClient(t, p.GatewayURL).do("POST", path, map[string]string{"token": thiefLink}); got != 400 || m["code"] != "invalid_token" {
			t.Fatalf("the thief's link again at %s: %d %v", path, got, m)
		}
	}
	if me := oscarMe(); me["email"] != "oscar@example.com" {
		t.Fatalf("a stolen session moved the account: %v", me)
	}
	// The owner confirms from the current address: now it changes.
	if got, m, _ := newClient(t, p.GatewayURL).do("POST", "/email/change/confirm", map[string]string{"token": ownerLink}); got != 200 {
		t.Fatalf("the current address's link: %d %v, want 200", got, m)
	}
	if me := oscarMe(); me["email"] != "thief@example.com" || me["emailVerified"] != true {
		t.Fatalf("after both confirmations: %v", me)
	}
	if got, _, _ := newClient(t, p.GatewayURL).do("POST", "/email/change/confirm", map[string]string{"token": ownerLink}); got != 400 {
		t.Fatalf("the current address's link again: %d", got)
	}
	// A taken address: the current address's confirmation is accepted
	// like any other (202) and nothing changes.
	alone("alice@example.com")
	pending := mailedToken(t, mc, "thief@example.com", subjectConfirm, "confirm-email-change", 1)
	if got, m, _ := newClient(t, p.GatewayURL).do("POST", "/email/change/confirm", map[string]string{"token": pending}); got != 202 {
		t.Fatalf("confirming a change to a taken address: %d %v, want 202", got, m)
	}
	if me := oscarMe(); me["email"] != "thief@example.com" {
		t.Fatalf("the account moved to a taken address: %v", me)
	}
	if _, err := mc.WaitFor(ctx, "alice@example.com", subjectInUse, 2); err != nil {
		t.Fatal(err)
	}
	if n := mailCount(t, mc, "alice@example.com", subjectVerify); n != 1 {
		t.Fatalf("%d verification links to the taken address, want only its creation's", n)
	}

	// The current password, when sent, must be right.
	got, m, _ := mallory.do("PATCH", "/me", map[string]any{"email": "alice@example.com", "currentPassword": "not the password"})
	if got != 403 || m["code"] != "wrong_password" {
		t.Fatalf("a wrong current password: %d %v", got, m)
	}

	// With the password: a taken and a free address answer identically.
	answer := func(addr string) (int, string) {
		got, m, h := mallory.do("PATCH", "/me", map[string]any{"email": addr, "currentPassword": pw})
		if h.Get("Set-Cookie") != "" {
			t.Errorf("a cookie set by an address change")
		}
		b, _ := json.Marshal(m)
		return got, string(b)
	}
	takenStatus, taken = answer("alice@example.com")
	freeStatus, free = answer("free@example.com")
	if takenStatus != 200 || freeStatus != takenStatus || taken != free {
		t.Fatalf("taken address: %d %s\nfree address: %d %s\nwant the same 200", takenStatus, taken, freeStatus, free)
	}
	if me := mallory.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any); me["email"] != "mallory@example.com" {
		t.Fatalf("the address changed before verification: %v", me)
	}
	// The outcome went by mail: a link to the free address, a notice to
	// the taken one's owner, and mallory's own address told twice.
	if _, err := mc.WaitFor(ctx, "free@example.com", subjectVerify, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.WaitFor(ctx, "alice@example.com", subjectInUse, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.WaitFor(ctx, "mallory@example.com", subjectChanged, 2); err != nil {
		t.Fatal(err)
	}
	if n := mailCount(t, mc, "alice@example.com", subjectVerify); n != 1 {
		t.Fatalf("%d verification links to the taken address, want only its creation's", n)
	}
	if n := mailCount(t, mc, "mallory@example.com", subjectConfirm); n != 0 {
		t.Fatalf("%d confirmation links for changes proven by the password, want 0", n)
	}

	// Mail bombing one address: at most 3 requests per target address
	// (whoever asks) and 5 per account in a window, then 429 with
	// Retry-After, and nothing sent.
	throttled := func(c *client, method, path string, body any) bool {
		got, m, h := c.do(method, path, body)
		switch {
		case got == 429:
			if m["code"] != "throttled" || h.Get("Retry-After") == "" || m["retryAfter"] == nil {
				t.Fatalf("%s %s: 429 without code or Retry-After: %v %v", method, path, m, h)
			}
			return true
		case got >= 300:
			t.Fatalf("%s %s: %d %v", method, path, got, m)
		}
		return false
	}
	// bomb asks for an address change to victim: 1 if accepted, 0 if
	// throttled.
	bomb := func(c *client, victim string) int {
		if throttled(c, "PATCH", "/me", map[string]any{"email": victim, "currentPassword": pw}) {
			return 0
		}
		return 1
	}
	sent := 0
	for range 6 {
		sent += bomb(mallory, "victim@example.com")
	}
	if sent != 3 {
		t.Fatalf("%d of 6 changes to one address were accepted, want 3", sent)
	}
	// The limit is the address's, not mallory's: another account is
	// refused too.
	eve := signIn("eve@example.com")
	if bomb(eve, "victim@example.com") != 0 {
		t.Fatal("another account mailed a throttled address")
	}
	// Mallory's account is spent (2 + 3 of 5): another address and a new
	// verification link are refused too.
	if bomb(mallory, "other@example.com") != 0 {
		t.Fatal("an account past its limit mailed another address")
	}
	if !throttled(mallory, "POST", "/me/email/verification", nil) {
		t.Fatal("an account past its limit was sent a verification link")
	}
	// Verification links to one's own address are counted the same way.
	links := 0
	for range 6 {
		if !throttled(eve, "POST", "/me/email/verification", nil) {
			links++
		}
	}
	if links != 3 {
		t.Fatalf("%d of 6 verification links sent to one address, want 3", links)
	}

	// Concurrent requests cannot overshoot: 8 at once to a fresh address
	// from a fresh account.
	trudy := signIn("trudy@example.com")
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _, _ := trudy.do("PATCH", "/me", map[string]any{"email": "burst@example.com", "currentPassword": pw})
			mu.Lock()
			defer mu.Unlock()
			if got == 200 {
				accepted++
			} else if got != 429 {
				t.Errorf("concurrent change: %d", got)
			}
		}()
	}
	wg.Wait()
	if accepted > 3 {
		t.Fatalf("%d of 8 concurrent changes to one address accepted, want at most 3", accepted)
	}

	// The mailboxes got what was accepted and no more.
	if _, err := mc.WaitFor(ctx, "victim@example.com", subjectVerify, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.WaitFor(ctx, "eve@example.com", subjectVerify, 1+3); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // anything sent in excess would be delivered by now
	for addr, want := range map[string]int{
		"victim@example.com": 3, "other@example.com": 0, "eve@example.com": 1 + 3,
		"burst@example.com": accepted, "mallory@example.com": 1 + 5, // creation + one notice per accepted change
	} {
		if n := mailCount(t, mc, addr, ""); n != want {
			t.Errorf("%d mails to %s, want %d", n, addr, want)
		}
	}
}

// TestHostileControlCharacters: control and bidirectional-override
// characters in free-text fields are refused with a 400 naming the field,
// and nothing is stored.
func TestHostileControlCharacters(t *testing.T) {
	p, sec, _ := platform(t, nil)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	const pw = "correct horse battery"
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "cc@example.com", "password": pw, "fullName": "Cee", "edv": "E-1"})
	user := newClient(t, p.GatewayURL)
	user.mustStatus(200, "POST", "/signin", map[string]string{"email": "cc@example.com", "password": pw})
	before := user.mustStatus(200, "GET", "/me", nil)["user"]
	users := admin.mustStatus(200, "GET", "/users", nil)["total"]

	for _, c := range []struct {
		class string
		r     rune
	}{
		{"NUL", 0x00}, {"C0 unit separator", 0x1F}, {"newline", '\n'}, {"carriage return", '\r'}, {"tab", '\t'},
		{"DEL", 0x7F}, {"C1 NEL", 0x85}, {"C1 APC", 0x9F},
		{"LRE", 0x202A}, {"RLO", 0x202E}, {"LRI", 0x2066}, {"PDI", 0x2069},
		{"zero-width space", 0x200B}, {"BOM", 0xFEFF}, {"line separator", 0x2028},
	} {
		t.Run(fmt.Sprintf("%s U+%04X", c.class, c.r), func(t *testing.T) {
			evil := "Eve" + string(c.r) + "lyn"
			for _, tc := range []struct {
				who          *client
				method, path string
				body         map[string]any
				field        string
			}{
				{user, "PATCH", "/me", map[string]any{"fullName": evil}, "fullName"},
				{user, "PATCH", "/me", map[string]any{"sector": evil}, "sector"},
				{user, "PATCH", "/me", map[string]any{"fullName": "Eve" + string(c.r)}, "fullName"}, // trailing, not trimmed away
				{user, "POST", "/me/api-keys", map[string]any{"name": evil, "scopes": []string{"files:read"}}, "name"},
				{admin, "POST", "/users", map[string]any{"email": "new@example.com", "password": pw, "fullName": evil, "edv": "E-2"}, "fullName"},
				{admin, "POST", "/users", map[string]any{"email": "new@example.com", "password": pw, "fullName": "New", "edv": evil}, "edv"},
			} {
				got, m, _ := tc.who.do(tc.method, tc.path, tc.body)
				if got != 400 || m["code"] != "invalid_characters" || m["field"] != tc.field {
					t.Errorf("%s %s %v: %d %v, want 400 invalid_characters naming %s", tc.method, tc.path, tc.body, got, m, tc.field)
				}
			}
		})
	}
	if after := user.mustStatus(200, "GET", "/me", nil)["user"]; !reflect.DeepEqual(after, before) {
		t.Fatalf("the user changed:\n%v\n%v", before, after)
	}
	if keys := user.mustStatus(200, "GET", "/me/api-keys", nil)["apiKeys"].([]any); len(keys) != 0 {
		t.Fatalf("api keys stored: %v", keys)
	}
	if n := admin.mustStatus(200, "GET", "/users", nil)["total"]; n != users {
		t.Fatalf("users: %v, was %v", n, users)
	}
	// Allowed: letters of every script, the joiners and direction marks.
	for _, name := range []string{"José Ñúñez", "محمد\u200f", "می\u200cخواهم", "👩\u200d💻 Ada"} {
		if u := user.mustStatus(200, "PATCH", "/me", map[string]any{"fullName": name})["user"].(map[string]any); u["fullName"] != name {
			t.Fatalf("fullName %q stored as %q", name, u["fullName"])
		}
	}
}
