package app_test

import (
	"strings"
	"testing"
)

// Every line the service writes is JSON; lines about a request carry its
// id; and no password, cookie, session secret, identity token or service
// credential appears in any of them, whatever the request did: the real
// service, driven as the gateway drives it (Cookie header forwarded, token
// minted from /ms/me), through sign-in, failure, password change and
// sign-out.
func TestNoSecretsInLogs(t *testing.T) {
	h := newHarness(t, nil)
	const (
		email      = "carol@example.com"
		firstPW    = "first-Secret-phrase-41"
		secondPW   = "second-Secret-phrase-42"
		wrongPW    = "wrong-Secret-phrase-43"
		badCred    = "not-the-credential-0123456789abcdef"
		requestID  = "leak-test-rid-1"
		cookieName = "sessionId="
	)
	secrets := map[string]string{"admin password": adminPassword, "first password": firstPW,
		"second password": secondPW, "wrong password": wrongPW, "service credential": credential,
		"wrong credential": badCred}

	adminCookie := h.signIn(adminEmail, adminPassword)
	adminTok, _ := h.tokenFor(adminCookie)
	secrets["admin cookie"], secrets["admin token"] = adminCookie, adminTok
	secrets["admin cookie hash"] = sha256Hex(adminCookie)
	h.createUser(adminTok, email, firstPW)

	r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": email, "password": wrongPW}})
	want(t, r, 401, "invalid_credentials")
	cookie := h.signIn(email, firstPW)
	tok, _ := h.tokenFor(cookie)
	secrets["cookie"], secrets["token"], secrets["cookie hash"] = cookie, tok, sha256Hex(cookie)
	as := func(cookie string) map[string]string {
		return map[string]string{"Cookie": cookieName + cookie, "X-Request-Id": requestID}
	}

	want(t, h.do(req{method: "GET", path: "/me", token: tok, headers: as(cookie)}), 200, "")
	r = h.do(req{method: "PATCH", path: "/me", token: tok, headers: as(cookie),
		body: map[string]any{"password": map[string]string{"old": wrongPW, "new": secondPW}}})
	want(t, r, 403, "wrong_password")
	r = h.do(req{method: "PATCH", path: "/me", token: tok, headers: as(cookie),
		body: map[string]any{"password": map[string]string{"old": firstPW, "new": secondPW}}})
	want(t, r, 200, "")
	newCookie := sessionCookie(t, r).Value
	secrets["new cookie"] = newCookie
	r = h.do(req{method: "GET", path: "/ms/me", body: map[string]string{"sessionId": cookie},
		headers: map[string]string{"X-Service-Credential": credential}})
	want(t, r, 401, "invalid_session") // ended by the password change
	r = h.do(req{method: "GET", path: "/ms/me", body: map[string]string{"sessionId": newCookie},
		headers: map[string]string{"X-Service-Credential": badCred}})
	want(t, r, 401, "invalid_service_credential")
	newTok, _ := h.tokenFor(newCookie)
	secrets["new token"] = newTok
	want(t, h.do(req{method: "DELETE", path: "/signout", token: newTok, headers: as(newCookie)}), 200, "")
	r = h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": email, "password": secondPW}})
	want(t, r, 200, "")
	secrets["last cookie"] = sessionCookie(t, r).Value

	out := h.stdout.String()
	for what, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the %s appears in the service's log", what)
		}
	}
	var requests, withOurID int
	for _, m := range h.stdout.Lines(t) {
		if m["msg"] == "request" {
			requests++
			if rid, _ := m["rid"].(string); rid == "" {
				t.Errorf("access line without a request id: %v", m)
			} else if rid == requestID {
				withOurID++
			}
		}
	}
	if requests < 12 || withOurID != 4 {
		t.Errorf("%d access lines, %d with the request id sent; want >= 12 and 4", requests, withOurID)
	}
}

// LOG_LEVEL (read through pkg/service) decides what is written: at warn,
// neither the start-up lines nor the access lines appear.
func TestLogLevel(t *testing.T) {
	h := newHarness(t, map[string]string{"LOG_LEVEL": "warn"})
	want(t, h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": adminEmail, "password": "wrong-password-x"}}), 401, "invalid_credentials")
	for _, m := range h.stdout.Lines(t) {
		if lvl, _ := m["level"].(string); lvl != "WARN" && lvl != "ERROR" {
			t.Errorf("line below warn written at LOG_LEVEL=warn: %v", m)
		}
	}
}
