package e2e

// Password reset and e-mail verification, through the gateway, with the
// messages delivered by the auth service to a real SMTP server (Mailpit,
// built from its pinned module) and read back through Mailpit's HTTP API.

import (
	"context"
	"encoding/json"
	"github.com/acme/platform/pkg/testkit"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
)

// mailCatcher starts a Mailpit and returns it with the auth settings that
// send to it.
func mailCatcher(t *testing.T, env map[string]string) (*embedded.MailpitClient, map[string]string) {
	testkit.SkipShort(t)
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mp, err := embedded.StartMailpit(ctx, embedded.MailpitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mp.Stop)
	if env == nil {
		env = map[string]string{}
	}
	env["AUTH_SMTP_HOST"] = mp.SMTPHost
	env["AUTH_SMTP_PORT"] = strconv.Itoa(mp.SMTPPort)
	env["AUTH_SMTP_TLS"] = "none"
	env["AUTH_SMTP_FROM"] = "ACME <no-reply@acme.test>"
	env["AUTH_PUBLIC_URL"] = "http://console.acme.test"
	return mp.Client(), env
}

var tokenInLink = regexp.MustCompile(`http://console\.acme\.test/console/#/(reset|verify|confirm-email-change)\?token=([A-Za-z0-9_-]{43})`)

// mailedToken waits for the n-th message with subject to address and
// returns the token of the link in it (text and HTML parts carry the same).
func mailedToken(t *testing.T, mc *embedded.MailpitClient, to, subject, page string, n int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := mc.WaitFor(ctx, to, subject, n)
	if err != nil {
		t.Fatal(err)
	}
	if m.From == nil || m.From.Address != "no-reply@acme.test" {
		t.Fatalf("from %v", m.From)
	}
	got := tokenInLink.FindStringSubmatch(m.Text)
	if got == nil || got[1] != page {
		t.Fatalf("no %s link in the text part:\n%s", page, m.Text)
	}
	if !strings.Contains(m.HTML, got[0]) {
		t.Fatalf("the HTML part lacks the link %s:\n%s", got[0], m.HTML)
	}
	return got[2]
}

func TestPasswordResetByMail(t *testing.T) {
	mc, env := mailCatcher(t, nil)
	p, sec, logs := platform(t, env)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	adaID := admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "ada@example.com", "password": "correct horse battery", "fullName": "Ada Lovelace", "edv": "E-1",
	})["user"].(map[string]any)["id"].(string)
	laptop, phone := newClient(t, p.GatewayURL), newClient(t, p.GatewayURL)
	for _, c := range []*client{laptop, phone} {
		c.mustStatus(200, "POST", "/signin", map[string]string{"email": "ada@example.com", "password": "correct horse battery"})
	}
	if me := laptop.mustStatus(200, "GET", "/me", nil); me["user"].(map[string]any)["emailVerified"] != false {
		t.Fatalf("a new user's address is verified: %v", me)
	}
	// Unverified users may sign in (AUTH_REQUIRE_VERIFIED_EMAIL is off) and
	// ask for a new link; it replaces the one sent at creation.
	mailedToken(t, mc, "ada@example.com", "Confirm your e-mail address", "verify", 1)
	laptop.mustStatus(202, "POST", "/me/email/verification", nil)
	mailedToken(t, mc, "ada@example.com", "Confirm your e-mail address", "verify", 2)

	// Known and unknown addresses get the same answer.
	anon := newClient(t, p.GatewayURL)
	known := anon.mustStatus(202, "POST", "/password/forgot", map[string]string{"email": "Ada@Example.com"})
	unknown := anon.mustStatus(202, "POST", "/password/forgot", map[string]string{"email": "nobody@example.com"})
	if known["message"] != unknown["message"] {
		t.Fatalf("answers differ: %v / %v", known, unknown)
	}
	token := mailedToken(t, mc, "ada@example.com", "Reset your password", "reset", 1)

	// Bad input: precise 400s, the token not spent.
	for _, c := range []struct {
		body      any
		code, fld string
	}{
		{map[string]string{"password": "new secret phrase"}, "missing_field", "token"},
		{map[string]string{"token": "abc", "password": "new secret phrase"}, "invalid_token", "token"},
		{map[string]string{"token": token, "password": "short"}, "invalid_password", "password"},
		{map[string]any{"token": token, "password": 12345678}, "invalid_type", "password"},
		{map[string]string{"token": strings.Repeat("A", 43), "password": "new secret phrase"}, "invalid_token", ""},
	} {
		got, m, _ := anon.do("POST", "/password/reset", c.body)
		if got != 400 || m["code"] != c.code || (c.fld != "" && m["field"] != c.fld) {
			t.Fatalf("reset %v: %d %v, want 400 %s %s", c.body, got, m, c.code, c.fld)
		}
	}
	anon.mustStatus(400, "POST", "/password/forgot", map[string]string{"email": "not an address"})

	anon.mustStatus(200, "POST", "/password/reset", map[string]string{"token": token, "password": "new secret phrase"})
	// Every session of the user ended, on the gateway at once.
	laptop.mustStatus(401, "GET", "/me", nil)
	phone.mustStatus(401, "GET", "/me", nil)
	// The token is spent.
	if got, m, _ := anon.do("POST", "/password/reset", map[string]string{"token": token, "password": "another phrase 2"}); got != 400 || m["code"] != "invalid_token" {
		t.Fatalf("second use: %d %v", got, m)
	}
	laptop.mustStatus(401, "POST", "/signin", map[string]string{"email": "ada@example.com", "password": "correct horse battery"})
	laptop.mustStatus(200, "POST", "/signin", map[string]string{"email": "ada@example.com", "password": "new secret phrase"})
	if me := laptop.mustStatus(200, "GET", "/me", nil); me["user"].(map[string]any)["emailVerified"] != true {
		t.Fatalf("the reset link did not verify the address: %v", me)
	}

	// A second request replaces the first link.
	anon.mustStatus(202, "POST", "/password/forgot", map[string]string{"email": "ada@example.com"})
	first := mailedToken(t, mc, "ada@example.com", "Reset your password", "reset", 2)
	anon.mustStatus(202, "POST", "/password/forgot", map[string]string{"email": "ada@example.com"})
	second := mailedToken(t, mc, "ada@example.com", "Reset your password", "reset", 3)
	if got, m, _ := anon.do("POST", "/password/reset", map[string]string{"token": first, "password": "another phrase 2"}); got != 400 || m["code"] != "invalid_token" {
		t.Fatalf("replaced link: %d %v", got, m)
	}
	anon.mustStatus(200, "POST", "/password/reset", map[string]string{"token": second, "password": "another phrase 2"})

	// Throttled per address: the fourth request for one address within the
	// hour is refused, for an unknown address too.
	for i := 0; i < 3; i++ {
		anon.mustStatus(202, "POST", "/password/forgot", map[string]string{"email": "nobody2@example.com"})
	}
	got, m, h := anon.do("POST", "/password/forgot", map[string]string{"email": "nobody2@example.com"})
	if got != 429 || m["code"] != "throttled" || h.Get("Retry-After") == "" {
		t.Fatalf("fourth request: %d %v", got, m)
	}

	for _, to := range []string{"nobody@example.com", "nobody2@example.com"} {
		if list, err := mc.To(context.Background(), to); err != nil || len(list) != 0 {
			t.Fatalf("mail to an unknown address %s: %v %v", to, list, err)
		}
	}
	// The audit trail: ACME-AUTH records of type log, read by the admin
	// through the gateway once the logs service has ingested them.
	adminID := admin.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)["id"].(string)
	want := map[string]func(_ string, r map[string]any) bool{
		"user.created":             func(_ string, r map[string]any) bool { return r["actor"] == adminID && r["target"] == adaID },
		"signin.succeeded":         func(_ string, r map[string]any) bool { return r["actor"] == adaID && r["clientIp"] != "" },
		"signin.failed":            func(_ string, r map[string]any) bool { return r["targetEmail"] == "ada@example.com" && r["actor"] == nil },
		"password.reset_requested": func(_ string, r map[string]any) bool { return r["target"] == adaID },
		"password.reset":           func(_ string, r map[string]any) bool { return r["target"] == adaID && r["requestId"] != "" },
	}
	bodies := awaitAuditEvents(t, admin, want, func(_ string, rec, r map[string]any) {
		if r != nil && r["requestId"] != rec["metricsId"] {
			t.Fatalf("record %v: metricsId is not the request id", rec)
		}
	})
	for _, secret := range []string{token, first, second, "new secret phrase", "another phrase 2", "correct horse battery"} {
		if strings.Contains(logs.String(), secret) || strings.Contains(strings.Join(bodies, "\n"), secret) {
			t.Fatal("a secret appears in the services' logs or the audit trail")
		}
	}
}

func TestEmailVerificationByMail(t *testing.T) {
	mc, env := mailCatcher(t, map[string]string{"AUTH_REQUIRE_VERIFIED_EMAIL": "true"})
	p, sec, _ := platform(t, env)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	created := admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "grace@example.com", "password": "correct horse battery", "fullName": "Grace Hopper", "edv": "E-2",
	})
	if created["user"].(map[string]any)["emailVerified"] != false {
		t.Fatalf("created: %v", created)
	}
	grace := newClient(t, p.GatewayURL)
	creds := map[string]string{"email": "grace@example.com", "password": "correct horse battery"}
	if got, m, _ := grace.do("POST", "/signin", creds); got != 403 || m["code"] != "email_unverified" {
		t.Fatalf("unverified sign-in: %d %v", got, m)
	}
	// A wrong password is still just wrong.
	grace.mustStatus(401, "POST", "/signin", map[string]string{"email": "grace@example.com", "password": "wrong password"})

	token := mailedToken(t, mc, "grace@example.com", "Confirm your e-mail address", "verify", 1)
	grace.mustStatus(400, "POST", "/email/verify", map[string]string{})
	grace.mustStatus(200, "POST", "/email/verify", map[string]string{"token": token})
	if got, m, _ := grace.do("POST", "/email/verify", map[string]string{"token": token}); got != 400 || m["code"] != "invalid_token" {
		t.Fatalf("second use: %d %v", got, m)
	}
	grace.mustStatus(200, "POST", "/signin", creds)
	if me := grace.mustStatus(200, "GET", "/me", nil); me["user"].(map[string]any)["emailVerified"] != true {
		t.Fatalf("/me: %v", me)
	}
	grace.mustStatus(409, "POST", "/me/email/verification", nil)

	// An address change waits for the new address to be verified; the old
	// one is told.
	edited := grace.mustStatus(200, "PATCH", "/me", map[string]any{"email": "grace.hopper@example.com", "currentPassword": "correct horse battery"})
	if u := edited["user"].(map[string]any); u["email"] != "grace@example.com" || u["emailVerified"] != true {
		t.Fatalf("address changed before verification: %v", edited)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	notice, err := mc.WaitFor(ctx, "grace@example.com", "Your e-mail address is changing", 1)
	if err != nil || !strings.Contains(notice.Text, "grace.hopper@example.com") {
		t.Fatalf("notice to the old address: %v %q", err, notice.Text)
	}
	change := mailedToken(t, mc, "grace.hopper@example.com", "Confirm your e-mail address", "verify", 1)
	newCreds := map[string]string{"email": "grace.hopper@example.com", "password": "correct horse battery"}
	newClient(t, p.GatewayURL).mustStatus(401, "POST", "/signin", newCreds)
	// The address taken meanwhile by someone else: 409, nothing changes.
	other := admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "grace.hopper@example.com", "password": "correct horse battery", "fullName": "Other", "edv": "E-3",
	})
	if got, m, _ := grace.do("POST", "/email/verify", map[string]string{"token": change}); got != 409 || m["code"] != "email_taken" {
		t.Fatalf("verify a taken address: %d %v", got, m)
	}
	mailedToken(t, mc, "grace.hopper@example.com", "Confirm your e-mail address", "verify", 2) // the other user's link
	admin.mustStatus(200, "DELETE", "/users/"+other["user"].(map[string]any)["id"].(string), nil)
	grace.mustStatus(200, "PATCH", "/me", map[string]any{"email": "grace.hopper@example.com", "currentPassword": "correct horse battery"})
	change = mailedToken(t, mc, "grace.hopper@example.com", "Confirm your e-mail address", "verify", 3)
	grace.mustStatus(200, "POST", "/email/verify", map[string]string{"token": change})
	me := grace.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)
	if me["email"] != "grace.hopper@example.com" || me["emailVerified"] != true {
		t.Fatalf("after verification: %v", me)
	}
	newClient(t, p.GatewayURL).mustStatus(200, "POST", "/signin", newCreds)
	newClient(t, p.GatewayURL).mustStatus(401, "POST", "/signin", creds)

	// The seed's contract: `email` alone is a valid PATCH /me. The answer is
	// 200 with the user unchanged; the change takes effect once the current
	// address (its own link, POST /email/change/confirm) and the new one
	// (the verification link) have both confirmed, in either order.
	edited = grace.mustStatus(200, "PATCH", "/me", map[string]any{"email": "rear.admiral@example.com"})
	if u := edited["user"].(map[string]any); u["email"] != "grace.hopper@example.com" {
		t.Fatalf("address changed before confirmation: %v", edited)
	}
	current := mailedToken(t, mc, "grace.hopper@example.com", "Confirm the change of your e-mail address", "confirm-email-change", 1)
	fresh := mailedToken(t, mc, "rear.admiral@example.com", "Confirm your e-mail address", "verify", 1)
	grace.mustStatus(202, "POST", "/email/change/confirm", map[string]string{"token": current})
	if me := grace.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any); me["email"] != "grace.hopper@example.com" {
		t.Fatalf("changed after the current address alone confirmed: %v", me)
	}
	grace.mustStatus(200, "POST", "/email/verify", map[string]string{"token": fresh})
	if me := grace.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any); me["email"] != "rear.admiral@example.com" || me["emailVerified"] != true {
		t.Fatalf("after both confirmations: %v", me)
	}
	newClient(t, p.GatewayURL).mustStatus(200, "POST", "/signin", map[string]string{"email": "rear.admiral@example.com", "password": "correct horse battery"})
}

// awaitAuditEvents reads auth's audit trail (its ACME-AUTH records, as the
// administrator admin through the gateway) until every event of want has
// an audit record its check accepts (given the record's body and its
// parsed fields), for 30 s at most, and returns the bodies of the records
// it read last. each, when set, is run on every record read, r nil for
// one that is not an audit record.
func awaitAuditEvents(t *testing.T, admin *client, want map[string]func(body string, r map[string]any) bool, each func(body string, rec, r map[string]any)) []string {
	t.Helper()
	var bodies []string
	deadline := time.Now().Add(30 * time.Second)
	for len(want) > 0 {
		bodies = bodies[:0]
		for _, rec := range logsOf(t, admin.mustStatus(201, "GET", "/log/log/1/ACME-AUTH?limit=500", nil)) {
			body, _ := rec["logBody"].(string)
			bodies = append(bodies, body)
			var r map[string]any
			if json.Unmarshal([]byte(body), &r) != nil || r["audit"] != true {
				r = nil
			}
			if each != nil {
				each(body, rec, r)
			}
			if r == nil {
				continue
			}
			if ok := want[r["event"].(string)]; ok != nil && ok(body, r) {
				delete(want, r["event"].(string))
			}
		}
		if len(want) > 0 && time.Now().After(deadline) {
			t.Fatalf("audit events missing: %v; records:\n%s", want, strings.Join(bodies, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return bodies
}
