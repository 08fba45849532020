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

// TestEmailCodeInBrowser drives sign-in by mailed code in headless
// Chromium: "E-mail me a code" on the sign-in page, the code typed on the
// code page, the mailed link's landing (nothing is spent until its button
// is pressed), and a first password set from the profile of an account
// made by a code, proven by a fresh code.
func TestEmailCodeInBrowser(t *testing.T) {
	artifacts := browserArtifacts(t)
	mc, env := mailCatcher(t, map[string]string{"AUTH_EMAIL_SIGNIN_SIGNUP": "true", "AUTH_EMAIL_SIGNIN_ALLOWED_DOMAINS": "signup.example"})
	p, sec, _ := platform(t, env)
	base := p.GatewayURL
	admin := newClient(t, base)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	const userEmail = "mo@example.com"
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": userEmail, "password": "correct horse battery", "fullName": "Mo", "edv": "E-7"})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := startBrowser(ctx, t, artifacts)
	pg := b.newTab("email-code", 1280, 900)

	b.step("code", pg, func() {
		pg.goTo(base + "/console/#/signin")
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.click(doc.role("link", "E-mail me a code"))
		pg.waitFor(doc.role("h1", "Sign in with a code"))
		pg.fill(doc.label("E-mail"), userEmail)
		pg.click(doc.role("button", "Send me a code"))
		pg.waitFor(doc.role("h1", "Enter the code"))
		code, _ := mailedCode(t, mc, userEmail, subjectSignInCode, 1)
		pg.fill(doc.label("Code"), otherCode(code, 1))
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("alert", "The code is wrong. 4 tries left."))
		pg.shot("30-email-code")
		pg.fill(doc.label("Code"), code)
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("h1", "Profile"))
		pg.waitText(doc.fact("E-mail"), rx("confirmed"))
	})

	b.step("link", pg, func() {
		pg.click(doc.role("button", "Sign out"))
		pg.waitFor(doc.role("h1", "Sign in"))
		newClient(t, base).mustStatus(202, "POST", "/signin/email", map[string]string{"email": userEmail})
		_, token := mailedCode(t, mc, userEmail, subjectSignInCode, 2)
		// The link opened in the same tab: only the fragment changes.
		pg.eval(`(location.hash = '#/signin-email?token=`+token+`') && true`, nil)
		pg.waitFor(doc.role("h1", "Sign in with the link"))
		pg.shot("31-email-link")
		// Opening the page spent nothing: the button signs in.
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("h1", "Profile"))
		pg.click(doc.role("button", "Sign out"))
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.eval(`(location.hash = '#/signin-email?token=`+token+`') && true`, nil)
		pg.waitFor(doc.role("h1", "Sign in with the link"))
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("alert", rx("^This link no longer works")))
	})

	b.step("sign-up and a first password", pg, func() {
		const newEmail = "neo@signup.example"
		pg.click(doc.role("link", "Ask for a new code")) // on the spent link's page
		pg.waitFor(doc.role("h1", "Sign in with a code"))
		pg.fill(doc.label("E-mail"), newEmail)
		pg.click(doc.role("button", "Send me a code"))
		pg.waitFor(doc.role("h1", "Enter the code"))
		code, _ := mailedCode(t, mc, newEmail, subjectSignUpCode, 1)
		pg.fill(doc.label("Code"), code)
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("h1", "Profile"))
		pg.waitFor(doc.role("h2", "Set a password"))
		if pg.count(doc.role("h2", "Change password")) != 0 {
			t.Fatal("an account without a password is offered to change it")
		}
		pg.click(doc.role("button", "E-mail me a code"))
		pg.waitFor(doc.label("Code from the message"))
		pcode, _ := mailedCode(t, mc, newEmail, subjectPasswordCode, 1)
		pg.fill(doc.label("Code from the message"), pcode)
		pg.fill(doc.label("New password (8 characters or more)"), "my first password")
		pg.fill(doc.label("Repeat the new password"), "my first password")
		pg.shot("32-set-password")
		pg.click(doc.role("button", "Set the password"))
		pg.waitFor(doc.role("h2", "Change password"))
		signIn(t, base, newEmail, "my first password")
	})
}
