package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestAccountPagesInBrowser drives the console's account pages in headless
// Chromium against a platform that sends mail to Mailpit: the verification
// link opened from the message, "Forgot your password?" and the reset link,
// sign-in with the new password, an API key created on the profile (its
// secret shown once, then used and revoked), and the administrator's Audit
// page filtered by event.
func TestAccountPagesInBrowser(t *testing.T) {
	artifacts := browserArtifacts(t)
	mc, env := mailCatcher(t, nil)
	p, sec, _ := platform(t, env)
	base := p.GatewayURL
	admin := newClient(t, base)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	const userEmail = "lin@example.com"
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": userEmail, "password": "correct horse battery", "fullName": "Lin", "edv": "E-9"})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := startBrowser(ctx, t, artifacts)
	pg := b.newTab("account", 1280, 900)
	status := func(text string) loc { return doc.role("status", text) }

	b.step("verification link", pg, func() {
		tok := mailedToken(t, mc, userEmail, "Confirm your e-mail address", "verify", 1)
		pg.goTo(base + "/console/#/verify?token=" + tok)
		pg.waitFor(status("Your e-mail address is confirmed."))
		pg.shot("20-verify")
	})

	b.step("forgot and reset", pg, func() {
		pg.click(doc.role("link", "To sign-in"))
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.click(doc.role("link", "Forgot your password?"))
		pg.waitFor(doc.role("h1", "Forgot your password?"))
		pg.fill(doc.label("E-mail"), userEmail)
		pg.click(doc.role("button", "Send me a link"))
		pg.waitFor(doc.text("If the address belongs to an account, the link is on its way. Check your mail."))
		pg.shot("21-forgot")
		tok := mailedToken(t, mc, userEmail, "Reset your password", "reset", 1)
		// The link opened in the same tab: only the fragment changes.
		pg.eval(`(location.hash = '#/reset?token=`+tok+`') && true`, nil)
		pg.waitFor(doc.role("h1", "Choose a new password"))
		pg.fill(doc.label("New password (8 characters or more)"), "a brand new phrase")
		pg.fill(doc.label("Repeat the new password"), "a brand new phrase")
		pg.click(doc.role("button", "Set the new password"))
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.waitFor(status("Password changed. Sign in with the new password."))
		pg.fill(doc.label("E-mail"), userEmail)
		pg.fill(doc.label("Password"), "a brand new phrase")
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("h1", "Profile"))
		pg.waitText(doc.fact("E-mail"), "confirmed")
	})

	b.step("api key", pg, func() {
		pg.fill(doc.label("Name"), "browser key")
		pg.click(doc.label("files:read"))
		pg.click(doc.role("button", "Create key"))
		pg.waitFor(doc.text("Copy the key now: it is not shown again."))
		secret := pg.textOf(doc.css("code.secret"))
		if !secretForm.MatchString(secret) {
			t.Fatalf("secret shown: %q", secret)
		}
		pg.shot("22-api-key")
		wantKey(t, base, "Bearer "+secret, "GET", "/files", nil, 200, "")
		accepted := pg.acceptDialog()
		pg.click(doc.role("button", "Revoke"))
		if m := accepted(); !strings.Contains(m, "browser key") {
			t.Fatalf("confirm dialog: %q", m)
		}
		pg.waitFor(status("Key revoked."))
		wantKey(t, base, "Bearer "+secret, "GET", "/files", nil, 401, "invalid_api_key")
	})

	b.step("audit page", pg, func() {
		pg.click(doc.role("button", "Sign out"))
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.fill(doc.label("E-mail"), sec.AdminEmail)
		pg.fill(doc.label("Password"), sec.AdminPassword)
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("h1", "Profile"))
		pg.click(doc.role("link", "Audit"))
		pg.waitFor(doc.role("h1", "Audit trail"))
		pg.selectOption(doc.label("Event"), "password.reset")
		table := doc.css("section table")
		pg.reloadUntil("the reset event listed", doc.role("button", "Apply"), table, func() bool {
			return pg.count(doc.role("cell", "password.reset")) == 1 && pg.count(doc.role("cell", "signin.succeeded")) == 0
		})
		pg.shot("23-audit")
	})
}
