package e2e

// Hostile-input cases of sign-in by mailed code (issue 48): learning which
// addresses have accounts, and guessing a code, replayed through the
// gateway against the real processes with mail delivered to Mailpit.

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestHostileEmailCodeEnumeration: POST /signin/email answers a known and
// an unknown address alike (status, body, headers that matter) and in the
// same timing class, and so does a code tried against either; only the
// known address receives mail.
func TestHostileEmailCodeEnumeration(t *testing.T) {
	mc, env := mailCatcher(t, map[string]string{
		"AUTH_EMAIL_SIGNIN_THROTTLE_ACCOUNT_MAX": "100", "AUTH_EMAIL_SIGNIN_THROTTLE_ADDRESS_MAX": "1000",
		"AUTH_THROTTLE_ADDRESS_MAX": "1000", "AUTH_THROTTLE_ACCOUNT_MAX": "100",
	})
	p, sec, _ := platform(t, env)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "known@example.com", "password": "correct horse battery", "fullName": "K", "edv": "E"})

	answer := func(path string, body any) (int, string, time.Duration) {
		c := newClient(t, p.GatewayURL)
		start := time.Now()
		got, m, h := c.do("POST", path, body)
		took := time.Since(start)
		b, _ := json.Marshal(m)
		return got, string(b) + " retry-after=" + h.Get("Retry-After") + " set-cookie=" + h.Get("Set-Cookie"), took
	}
	// Interleaved rounds, so that a slow moment of the machine hits both.
	const rounds = 12
	var known, unknown []time.Duration
	for i := range rounds {
		for _, addr := range []string{"known@example.com", "unknown@example.com"} {
			got, body, took := answer("/signin/email", map[string]string{"email": addr})
			if got != 202 {
				t.Fatalf("round %d, %s: %d %s", i, addr, got, body)
			}
			_, ref, _ := answer("/signin/email", map[string]string{"email": "another-unknown@example.com"})
			if body != ref {
				t.Fatalf("%s answered %s, an unknown address %s", addr, body, ref)
			}
			if addr == "known@example.com" {
				known = append(known, took)
			} else {
				unknown = append(unknown, took)
			}
		}
	}
	// The same timing class: the medians within 25 ms of each other (the
	// lookup and the mail happen after the answer, so neither waits on them).
	med := func(d []time.Duration) time.Duration { s := slices.Clone(d); slices.Sort(s); return s[len(s)/2] }
	if diff := med(known) - med(unknown); diff > 25*time.Millisecond || diff < -25*time.Millisecond {
		t.Fatalf("median answer: known %v, unknown %v", med(known), med(unknown))
	}
	// Each address has a pending request: a wrong code gets the same
	// answer for both (a try counted), whether or not an account exists.
	gk, bk, _ := answer("/signin/email/verify", map[string]string{"email": "known@example.com", "code": "000000"})
	gu, bu, _ := answer("/signin/email/verify", map[string]string{"email": "unknown@example.com", "code": "000000"})
	code, _ := mailedCode(t, mc, "known@example.com", subjectSignInCode, rounds)
	if code == "000000" {
		t.Skip("the code is 000000 (one chance in a million)")
	}
	if gk != 401 || gk != gu || bk != bu {
		t.Fatalf("a wrong code: known %d %s, unknown %d %s", gk, bk, gu, bu)
	}
	if n := mailCount(t, mc, "unknown@example.com", ""); n != 0 {
		t.Fatalf("%d messages to an address without an account", n)
	}
	if n := mailCount(t, mc, "known@example.com", subjectSignInCode); n != rounds {
		t.Fatalf("%d messages to the known address, want %d", n, rounds)
	}
}

// TestHostileEmailCodeGuessing: 30 wrong codes sent at once for one
// request are compared at most 5 times (5 answers invalid_code, the
// others code_void), the request is void after, and the right code and
// the link are then refused. The account's sign-in throttle is raised
// here so that only the request's own bound is at work (with the default,
// the throttle refuses the sixth guess too: TestEmailCodeSignIn).
func TestHostileEmailCodeGuessing(t *testing.T) {
	mc, env := mailCatcher(t, map[string]string{
		"AUTH_THROTTLE_ACCOUNT_MAX": "1000", "AUTH_THROTTLE_ADDRESS_MAX": "1000",
	})
	p, sec, _ := platform(t, env)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "victim@example.com", "password": "correct horse battery", "fullName": "V", "edv": "E"})
	newClient(t, p.GatewayURL).mustStatus(202, "POST", "/signin/email", map[string]string{"email": "victim@example.com"})
	code, token := mailedCode(t, mc, "victim@example.com", subjectSignInCode, 1)

	var mu sync.Mutex
	answers := map[string]int{}
	triesSeen := map[float64]bool{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 30 {
		wg.Go(func() {
			c := newClient(t, p.GatewayURL)
			<-start
			got, m := verifyCode(c, "victim@example.com", otherCode(code, i))
			mu.Lock()
			defer mu.Unlock()
			answers[m["code"].(string)]++
			if got == 401 && m["code"] == "invalid_code" {
				triesSeen[m["triesLeft"].(float64)] = true
			}
		})
	}
	close(start)
	wg.Wait()
	if answers["invalid_code"] != 5 || answers["code_void"] != 25 || len(triesSeen) != 5 {
		t.Fatalf("30 parallel wrong codes: %v (tries left seen %v), want 5 invalid_code (4..0) and 25 code_void", answers, triesSeen)
	}
	if got, m := verifyCode(newClient(t, p.GatewayURL), "victim@example.com", code); got != 401 || m["code"] != "code_void" {
		t.Fatalf("the right code after the guesses: %d %v, want 401 code_void", got, m)
	}
	if got, m := verifyLink(newClient(t, p.GatewayURL), token); got != 400 || m["code"] != "invalid_token" {
		t.Fatalf("the link after the guesses: %d %v, want 400 invalid_token", got, m)
	}
}
