package e2e

// The TOTP second factor through the gateway, against real servers: the
// test computes codes from the secret it enrolled (pquerna/otp, as an
// authenticator app would) and checks enrolment, the sign-in challenge,
// replay, recovery codes, throttling, disabling, the administrator's reset
// (audited), challenge expiry and the administrators' MFA requirement.

import (
	"bytes"
	"context"
	"encoding/base64"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/scripts/stack"
	"github.com/pquerna/otp"
	"github.com/pquerna/otp/hotp"
)

// totpAt is the code of secret for the time step step.
func totpAt(t *testing.T, secret string, step int64) string {
	t.Helper()
	code, err := hotp.GenerateCodeCustom(secret, uint64(step), hotp.ValidateOpts{Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func stepNow() int64 { return time.Now().Unix() / 30 }

// wrongTOTP is a 6-digit code valid for none of the steps the server may
// accept now (one either side, and a margin).
func wrongTOTP(t *testing.T, secret string) string {
	t.Helper()
	now := stepNow()
	valid := map[string]bool{}
	for s := now - 3; s <= now+3; s++ {
		valid[totpAt(t, secret, s)] = true
	}
	for _, c := range []string{"000000", "111111", "222222", "333333", "444444", "555555", "666666", "777777"} {
		if !valid[c] {
			return c
		}
	}
	t.Fatal("no wrong code found")
	return ""
}

// enrol starts and confirms TOTP for c, returning the secret and the
// recovery codes. The confirmation spends the current step.
func enrol(t *testing.T, c *client) (string, []string) {
	t.Helper()
	start := c.mustStatus(200, "POST", "/me/mfa/totp", nil)
	secret, _ := start["secret"].(string)
	uri, _ := start["uri"].(string)
	if secret == "" || !strings.HasPrefix(uri, "otpauth://totp/") || !strings.Contains(uri, "secret="+secret) {
		t.Fatalf("POST /me/mfa/totp: %v", start)
	}
	qr, _ := start["qrCode"].(string)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(qr, "data:image/png;base64,"))
	if err != nil {
		t.Fatalf("qrCode is not base64: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil || img.Bounds().Dx() < 100 {
		t.Fatalf("qrCode is not a usable PNG: %v", err)
	}
	c.mustStatus(403, "POST", "/me/mfa/totp/confirm", map[string]string{"code": wrongTOTP(t, secret)})
	conf := c.mustStatus(200, "POST", "/me/mfa/totp/confirm", map[string]string{"code": totpAt(t, secret, stepNow())})
	list, _ := conf["recoveryCodes"].([]any)
	seen := map[string]bool{}
	var codes []string
	for _, v := range list {
		s, _ := v.(string)
		if s == "" || seen[s] {
			t.Fatalf("recovery codes: %v", list)
		}
		seen[s] = true
		codes = append(codes, s)
	}
	if len(codes) != 10 {
		t.Fatalf("%d recovery codes, want 10", len(codes))
	}
	return secret, codes
}

// challenge signs in with the password and expects the MFA challenge: 202,
// no cookie, no session.
func challenge(t *testing.T, gw, email, password string) (*client, string) {
	t.Helper()
	c := newClient(t, gw)
	status, m, hdr := c.do("POST", "/signin", map[string]string{"email": email, "password": password})
	ch, _ := m["challenge"].(string)
	if status != 202 || m["mfaRequired"] != true || ch == "" {
		t.Fatalf("POST /signin with a second factor: %d %v", status, m)
	}
	if hdr.Get("Set-Cookie") != "" || c.cookie() != "" {
		t.Fatal("POST /signin set a cookie before the second factor")
	}
	c.mustStatus(401, "GET", "/me", nil)
	return c, ch
}

func wantCode(t *testing.T, c *client, method, path string, body any, status int, code string) {
	t.Helper()
	got, m, _ := c.do(method, path, body)
	if got != status || m["code"] != code {
		t.Fatalf("%s %s: %d %v, want %d %s", method, path, got, m, status, code)
	}
}

func TestMFAThroughGateway(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"AUTH_MFA_KEY": "e2e-mfa-key-0123456789abcdef0123456789"})
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	const pw = "correct horse battery"
	created := admin.mustStatus(201, "POST", "/users", map[string]any{"email": "mia@example.com", "password": pw, "fullName": "Mia", "edv": "E-7"})
	miaID := created["user"].(map[string]any)["id"].(string)
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "bob@example.com", "password": pw, "fullName": "Bob", "edv": "E-8"})

	mia := signIn(t, gw, "mia@example.com", pw)
	if st := mia.mustStatus(200, "GET", "/me/mfa", nil); st["totp"] != false {
		t.Fatalf("GET /me/mfa before enrolment: %v", st)
	}
	mia.mustStatus(409, "POST", "/me/mfa/totp/confirm", map[string]string{"code": "123456"}) // nothing started
	secret, recovery := enrol(t, mia)
	if st := mia.mustStatus(200, "GET", "/me/mfa", nil); st["totp"] != true || st["recoveryCodesLeft"] != float64(10) {
		t.Fatalf("GET /me/mfa after enrolment: %v", st)
	}
	if u := mia.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any); u["mfaEnabled"] != true {
		t.Fatalf("GET /me: %v", u)
	}
	wantCode(t, mia, "POST", "/me/mfa/totp", nil, 409, "mfa_enabled")

	// Sign-in: password, then a code. The next step's code (accepted for
	// clock drift) is later than the one the confirmation spent.
	c, ch := challenge(t, gw, "mia@example.com", pw)
	code := totpAt(t, secret, stepNow()+1)
	c.mustStatus(200, "POST", "/signin/mfa", map[string]string{"challenge": ch, "code": code})
	if c.cookie() == "" {
		t.Fatal("no cookie after POST /signin/mfa")
	}
	c.mustStatus(200, "GET", "/me", nil)
	// The challenge is spent; the code too (replay), with a new challenge.
	wantCode(t, c, "POST", "/signin/mfa", map[string]string{"challenge": ch, "code": code}, 401, "invalid_challenge")
	c2, ch2 := challenge(t, gw, "mia@example.com", pw)
	wantCode(t, c2, "POST", "/signin/mfa", map[string]string{"challenge": ch2, "code": code}, 401, "invalid_code")
	wantCode(t, c2, "POST", "/signin/mfa", map[string]string{"challenge": "not-a-challenge", "code": code}, 401, "invalid_challenge")
	wantCode(t, c2, "POST", "/signin/mfa", map[string]string{"challenge": ch2}, 400, "missing_field")
	// A wrong code left the challenge usable: a recovery code (typed in
	// capitals, without dashes) completes it, once.
	typed := strings.ToUpper(strings.ReplaceAll(recovery[0], "-", ""))
	c2.mustStatus(200, "POST", "/signin/mfa", map[string]string{"challenge": ch2, "code": typed})
	c2.mustStatus(200, "GET", "/me", nil)
	c3, ch3 := challenge(t, gw, "mia@example.com", pw)
	wantCode(t, c3, "POST", "/signin/mfa", map[string]string{"challenge": ch3, "code": recovery[0]}, 401, "invalid_code")
	c3.mustStatus(200, "POST", "/signin/mfa", map[string]string{"challenge": ch3, "code": recovery[1]})
	if st := mia.mustStatus(200, "GET", "/me/mfa", nil); st["recoveryCodesLeft"] != float64(8) {
		t.Fatalf("GET /me/mfa after two recovery codes: %v", st)
	}

	// Disabling needs the password and an unspent code.
	wantCode(t, mia, "POST", "/me/mfa/totp/disable", map[string]string{"password": "wrong password!", "code": recovery[2]}, 403, "wrong_password")
	wantCode(t, mia, "POST", "/me/mfa/totp/disable", map[string]string{"password": pw, "code": recovery[0]}, 403, "invalid_code")
	wantCode(t, mia, "POST", "/me/mfa/totp/disable", map[string]string{"password": pw}, 400, "missing_field")
	mia.mustStatus(200, "POST", "/me/mfa/totp/disable", map[string]string{"password": pw, "code": recovery[2]})
	wantCode(t, mia, "POST", "/me/mfa/totp/disable", map[string]string{"password": pw, "code": recovery[3]}, 409, "mfa_not_enabled")
	signIn(t, gw, "mia@example.com", pw) // the password alone again

	// The administrator's reset: Mia enrols again, loses everything.
	enrol(t, mia)
	challenge(t, gw, "mia@example.com", pw)
	mia.mustStatus(403, "DELETE", "/users/"+miaID+"/mfa", nil)
	admin.mustStatus(404, "DELETE", "/users/0123456789abcdef01234567/mfa", nil)
	admin.mustStatus(200, "DELETE", "/users/"+miaID+"/mfa", nil)
	signIn(t, gw, "mia@example.com", pw)
	if u := admin.mustStatus(200, "GET", "/users/"+miaID, nil)["user"].(map[string]any); u["mfaEnabled"] != false {
		t.Fatalf("GET /users/{id} after the reset: %v", u)
	}

	// Throttling: wrong codes count like failed sign-ins (5 per account);
	// while locked even the right code is refused.
	bob := signIn(t, gw, "bob@example.com", pw)
	bobSecret, _ := enrol(t, bob)
	bc, bch := challenge(t, gw, "bob@example.com", pw)
	wrong := wrongTOTP(t, bobSecret)
	for i := range 5 {
		if status, m, _ := bc.do("POST", "/signin/mfa", map[string]string{"challenge": bch, "code": wrong}); status != 401 {
			t.Fatalf("wrong code %d: %d %v", i+1, status, m)
		}
	}
	status, m, hdr := bc.do("POST", "/signin/mfa", map[string]string{"challenge": bch, "code": totpAt(t, bobSecret, stepNow()+1)})
	if status != 429 || m["code"] != "throttled" || hdr.Get("Retry-After") == "" {
		t.Fatalf("sixth attempt: %d %v", status, m)
	}

	// The reset is in the audit trail, with the administrator as actor; no
	// secret or recovery code is.
	adminID := admin.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)["id"].(string)
	awaitAudit(t, admin, "mfa.reset", []string{miaID, adminID}, []string{secret, recovery[5]})
}

// A short challenge lifetime (a setting) and the administrators' MFA
// requirement: an administrator without a second factor acts as a user
// until they enrol.
func TestMFAChallengeExpiryAndAdminRequirement(t *testing.T) {
	p, sec, _ := platformWith(t, map[string]string{"AUTH_MFA_CHALLENGE_TTL": "1s", "AUTH_MFA_REQUIRE_ADMIN": "true"},
		stack.Options{Bins: map[string]string{"auth": "", "gateway": ""}})
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	if u := admin.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any); u["roleName"] != "user" {
		t.Fatalf("an administrator without a second factor: %v", u)
	}
	admin.mustStatus(403, "GET", "/users", nil)
	if st := admin.mustStatus(200, "GET", "/me/mfa", nil); st["required"] != true {
		t.Fatalf("GET /me/mfa: %v", st)
	}
	_, recovery := enrol(t, admin)
	// The change reaches the gateway's cache through auth's revocation.
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, _, _ := admin.do("GET", "/users", nil)
		if status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /users after enrolment: %d", status)
		}
		time.Sleep(20 * time.Millisecond)
	}

	c, ch := challenge(t, gw, sec.AdminEmail, sec.AdminPassword)
	time.Sleep(1500 * time.Millisecond) // past the 1 s lifetime
	wantCode(t, c, "POST", "/signin/mfa", map[string]string{"challenge": ch, "code": recovery[0]}, 401, "invalid_challenge")
	c.mustStatus(401, "GET", "/me", nil)
}

// TestMFAInBrowser drives the console in headless Chromium: the profile's
// set-up (the QR code shown, the key read from the page, the code computed
// from it, the recovery codes listed), then a sign-in through the code step.
func TestMFAInBrowser(t *testing.T) {
	artifacts := browserArtifacts(t)
	p, sec, _ := platform(t, nil)
	base := p.GatewayURL
	admin := signIn(t, base, sec.AdminEmail, sec.AdminPassword)
	const email, pw = "tess@example.com", "correct horse battery"
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": email, "password": pw, "fullName": "Tess", "edv": "E-5"})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := startBrowser(ctx, t, artifacts)
	pg := b.newTab("mfa", 1280, 900)
	var secret string

	b.step("enrol", pg, func() {
		pg.goTo(base + "/console/#/signin")
		pg.fill(doc.label("E-mail"), email)
		pg.fill(doc.label("Password"), pw)
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("h1", "Profile"))
		pg.click(doc.role("button", "Set up two-step sign-in"))
		pg.waitFor(doc.css(`img[alt="QR code for your authenticator app"]`))
		pg.waitJS("the QR code image is decoded", `(() => { const i = document.querySelector('img[alt="QR code for your authenticator app"]'); return !!i && i.complete && i.naturalWidth >= 100; })()`)
		secret = pg.textOf(doc.css("code.totp-secret"))
		pg.shot("40-mfa-qr")
		pg.fill(doc.label("Code from the app"), totpAt(t, secret, stepNow()))
		pg.click(doc.role("button", "Turn on"))
		pg.waitFor(doc.css("ul.recovery"))
		pg.shot("41-mfa-recovery")
		if n := pg.count(doc.css("ul.recovery li")); n != 10 {
			t.Fatalf("%d recovery codes listed, want 10", n)
		}
	})

	b.step("sign in with a code", pg, func() {
		pg.click(doc.role("button", "Sign out"))
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.fill(doc.label("E-mail"), email)
		pg.fill(doc.label("Password"), pw)
		pg.click(doc.role("button", "Sign in"))
		pg.waitFor(doc.role("h1", "Enter your code"))
		pg.shot("42-mfa-code")
		pg.fill(doc.label("Code"), totpAt(t, secret, stepNow()+1))
		pg.click(doc.role("button", "Verify"))
		pg.waitFor(doc.role("h1", "Profile"))
	})
}
