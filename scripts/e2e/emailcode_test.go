package e2e

// Sign-in by a code (and a link) mailed to the address, through the
// gateway, with the messages delivered to Mailpit and read back from it.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"go.mongodb.org/mongo-driver/v2/bson"
)

const (
	subjectSignInCode   = "Your sign-in code"
	subjectSignUpCode   = "Your code to create an account"
	subjectPasswordCode = "Your code to set a password"
)

var (
	codeInMail     = regexp.MustCompile(`\n[ \t]+([0-9]{6,8})\r?\n`)
	codeLinkInMail = regexp.MustCompile(`http://console\.acme\.test/console/#/signin-email\?token=([A-Za-z0-9_-]{64})`)
)

// mailedCode waits for the n-th message with subject to address and
// returns its code and the token of its link ("" when it has none).
func mailedCode(t *testing.T, mc *embedded.MailpitClient, to, subject string, n int) (code, token string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := mc.WaitFor(ctx, to, subject, n)
	if err != nil {
		t.Fatalf("message %d %q to %s: %v", n, subject, to, err)
	}
	c := codeInMail.FindStringSubmatch(m.Text)
	if c == nil || !strings.Contains(m.HTML, c[1]) {
		t.Fatalf("no code in the message (text and HTML):\n%q", m.Text)
	}
	if l := codeLinkInMail.FindStringSubmatch(m.Text); l != nil {
		if !strings.Contains(m.HTML, l[0]) {
			t.Fatalf("the HTML part lacks the link %s", l[0])
		}
		token = l[1]
	}
	return c[1], token
}

// otherCode is a code of the same length that is not code.
func otherCode(code string, i int) string {
	for {
		c := fmt.Sprintf("%0*d", len(code), (i*7919+12345)%1000000)
		if c != code {
			return c
		}
		i++
	}
}

// expireSignInCode moves the expiry of address's pending request into the
// past, in the platform's database.
func expireSignInCode(t *testing.T, p any, address string) {
	t.Helper()
	sum := sha256.Sum256([]byte(strings.ToLower(address)))
	res, err := platformDB(t, p).Collection("account_tokens").UpdateOne(context.Background(),
		bson.M{"_id": "signin-email:" + hex.EncodeToString(sum[:16])}, bson.M{"$set": bson.M{"expiresAt": time.Now().Add(-time.Second).UTC()}})
	if err != nil || res.MatchedCount != 1 {
		t.Fatalf("expiring the code of %s: %v (matched %v)", address, err, res)
	}
}

func verifyCode(c *client, email, code string) (int, map[string]any) {
	got, m, _ := c.do("POST", "/signin/email/verify", map[string]string{"email": email, "code": code})
	return got, m
}

func verifyLink(c *client, token string) (int, map[string]any) {
	got, m, _ := c.do("POST", "/signin/email/verify", map[string]string{"token": token})
	return got, m
}

func wantSignedIn(t *testing.T, c *client, email string) map[string]any {
	t.Helper()
	u := c.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)
	if !strings.EqualFold(u["email"].(string), email) {
		t.Fatalf("signed in as %v, want %s", u["email"], email)
	}
	return u
}

// TestEmailSignInTurnedOff: with mail on, AUTH_EMAIL_SIGNIN=false turns
// the method off: the console is told it is off (GET /signin/email, which
// decides whether the sign-in page offers it), its routes answer 503
// email_signin_disabled, and no code is mailed.
func TestEmailSignInTurnedOff(t *testing.T) {
	mc, env := mailCatcher(t, map[string]string{"AUTH_EMAIL_SIGNIN": "false"})
	p, sec, _ := platform(t, env)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "off@example.com", "password": "correct horse battery", "fullName": "Off", "edv": "E"})
	anon := newClient(t, p.GatewayURL)
	if s := anon.mustStatus(200, "GET", "/signin/email", nil); s["enabled"] != false {
		t.Fatalf("GET /signin/email with the method off: %v", s)
	}
	for _, tc := range []struct {
		path string
		body map[string]string
	}{
		{"/signin/email", map[string]string{"email": "off@example.com"}},
		{"/signin/email/verify", map[string]string{"email": "off@example.com", "code": "123456"}},
	} {
		if got, m, _ := anon.do("POST", tc.path, tc.body); got != 503 || m["code"] != "email_signin_disabled" {
			t.Fatalf("POST %s with the method off: %d %v, want 503 email_signin_disabled", tc.path, got, m)
		}
	}
	list, err := mc.To(context.Background(), "off@example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list {
		if m.Subject != "Confirm your e-mail address" { // the account's own verification link
			t.Fatalf("a mail to off@example.com with the method off: %q", m.Subject)
		}
	}
}

// TestEmailCodeSignIn: every rule of sign-in by mailed code, each refusal
// as its own subtest, on one platform. The client-address throttles are
// raised (every request comes from 127.0.0.1); the per-account ones are
// the defaults.
func TestEmailCodeSignIn(t *testing.T) {
	mc, env := mailCatcher(t, map[string]string{
		"AUTH_THROTTLE_ADDRESS_MAX": "1000", "AUTH_EMAIL_SIGNIN_THROTTLE_ADDRESS_MAX": "1000",
		"AUTH_EMAIL_SIGNIN_SIGNUP": "true", "AUTH_EMAIL_SIGNIN_ALLOWED_DOMAINS": "signup.example",
	})
	p, sec, logs := platform(t, env)
	gw := p.GatewayURL
	admin := newClient(t, gw)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	const pw = "correct horse battery"
	user := func(t *testing.T, email string) {
		t.Helper()
		admin.mustStatus(201, "POST", "/users", map[string]any{"email": email, "password": pw, "fullName": "U " + email, "edv": "E"})
	}
	ask := func(t *testing.T, email string) map[string]any {
		t.Helper()
		return newClient(t, gw).mustStatus(202, "POST", "/signin/email", map[string]string{"email": email})
	}
	anon := func() *client { return newClient(t, gw) }

	if s := anon().mustStatus(200, "GET", "/signin/email", nil); s["enabled"] != true || s["signUp"] != true || s["codeLength"] != 6.0 {
		t.Fatalf("GET /signin/email: %v", s)
	}

	t.Run("code", func(t *testing.T) {
		user(t, "ada@example.com")
		known, unknown := ask(t, "Ada@Example.com"), ask(t, "nobody@example.com")
		if known["message"] != unknown["message"] {
			t.Fatalf("answers differ: %v / %v", known, unknown)
		}
		code, token := mailedCode(t, mc, "ada@example.com", subjectSignInCode, 1)
		if token == "" {
			t.Fatal("the message has no link")
		}
		c := anon()
		if got, m := verifyCode(c, "ada@example.com", " "+code[:3]+" "+code[3:]); got != 200 || m["message"] != "session created" {
			t.Fatalf("the right code: %d %v", got, m)
		}
		if u := wantSignedIn(t, c, "ada@example.com"); u["emailVerified"] != true {
			t.Fatalf("the code did not verify the address: %v", u)
		}
		// The code proved the mailbox: the password still works too.
		signIn(t, gw, "ada@example.com", pw)
		if n := mailCount(t, mc, "nobody@example.com", ""); n != 0 {
			t.Fatalf("%d messages to an address without an account", n)
		}
	})

	t.Run("reused", func(t *testing.T) {
		user(t, "reuse@example.com")
		ask(t, "reuse@example.com")
		code, token := mailedCode(t, mc, "reuse@example.com", subjectSignInCode, 1)
		if got, _ := verifyCode(anon(), "reuse@example.com", code); got != 200 {
			t.Fatalf("first use: %d", got)
		}
		if got, m := verifyCode(anon(), "reuse@example.com", code); got != 401 || m["code"] != "code_void" {
			t.Fatalf("the code again: %d %v, want 401 code_void", got, m)
		}
		if got, m := verifyLink(anon(), token); got != 400 || m["code"] != "invalid_token" {
			t.Fatalf("the link of a used code: %d %v, want 400 invalid_token", got, m)
		}
	})

	t.Run("link", func(t *testing.T) {
		user(t, "lin@example.com")
		ask(t, "lin@example.com")
		code, token := mailedCode(t, mc, "lin@example.com", subjectSignInCode, 1)
		c := anon()
		if got, m := verifyLink(c, token); got != 200 {
			t.Fatalf("the link: %d %v", got, m)
		}
		wantSignedIn(t, c, "lin@example.com")
		if got, m := verifyLink(anon(), token); got != 400 || m["code"] != "invalid_token" {
			t.Fatalf("the link again: %d %v", got, m)
		}
		if got, m := verifyCode(anon(), "lin@example.com", code); got != 401 || m["code"] != "code_void" {
			t.Fatalf("the code of a used link: %d %v", got, m)
		}
		for _, bad := range []map[string]any{
			{"token": "short"}, {"token": token, "email": "lin@example.com"}, {"email": "lin@example.com"}, {"code": "123456"},
			{"email": "lin@example.com", "code": "12345"}, {"email": "lin@example.com", "code": "abcdef"}, {"email": "lin@example.com", "code": 123456},
		} {
			if got, m, _ := anon().do("POST", "/signin/email/verify", bad); got != 400 {
				t.Fatalf("%v: %d %v, want 400", bad, got, m)
			}
		}
	})

	t.Run("expired", func(t *testing.T) {
		user(t, "exp@example.com")
		ask(t, "exp@example.com")
		code, token := mailedCode(t, mc, "exp@example.com", subjectSignInCode, 1)
		expireSignInCode(t, p, "exp@example.com")
		if got, m := verifyCode(anon(), "exp@example.com", code); got != 401 || m["code"] != "code_void" {
			t.Fatalf("an expired code: %d %v", got, m)
		}
		if got, m := verifyLink(anon(), token); got != 400 || m["code"] != "invalid_token" {
			t.Fatalf("an expired link: %d %v", got, m)
		}
	})

	t.Run("wrongAddress", func(t *testing.T) {
		user(t, "bob@example.com")
		user(t, "carol@example.com")
		user(t, "dave@example.com")
		ask(t, "bob@example.com")
		ask(t, "carol@example.com")
		bob, _ := mailedCode(t, mc, "bob@example.com", subjectSignInCode, 1)
		carol, _ := mailedCode(t, mc, "carol@example.com", subjectSignInCode, 1)
		if bob == carol {
			t.Skip("the two codes are equal (one chance in a million)")
		}
		// Bob's code is no code of carol's, nor of an address with none.
		if got, m := verifyCode(anon(), "carol@example.com", bob); got != 401 || m["code"] != "invalid_code" || m["triesLeft"] != 4.0 {
			t.Fatalf("bob's code for carol: %d %v", got, m)
		}
		if got, m := verifyCode(anon(), "dave@example.com", bob); got != 401 || m["code"] != "code_void" {
			t.Fatalf("bob's code for dave: %d %v", got, m)
		}
		c := anon()
		if got, _ := verifyCode(c, "bob@example.com", bob); got != 200 {
			t.Fatalf("bob's code for bob: %d", got)
		}
		wantSignedIn(t, c, "bob@example.com")
	})

	t.Run("replaced", func(t *testing.T) {
		user(t, "rep@example.com")
		ask(t, "rep@example.com")
		first, firstLink := mailedCode(t, mc, "rep@example.com", subjectSignInCode, 1)
		ask(t, "rep@example.com")
		second, _ := mailedCode(t, mc, "rep@example.com", subjectSignInCode, 2)
		if got, m := verifyLink(anon(), firstLink); got != 400 || m["code"] != "invalid_token" {
			t.Fatalf("the replaced link: %d %v", got, m)
		}
		if first != second {
			if got, m := verifyCode(anon(), "rep@example.com", first); got != 401 || m["code"] != "invalid_code" {
				t.Fatalf("the replaced code: %d %v", got, m)
			}
		}
		if got, _ := verifyCode(anon(), "rep@example.com", second); got != 200 {
			t.Fatalf("the newer code: %d", got)
		}
	})

	// Five wrong codes void the request (code and link); the account's
	// sign-in throttle (5 failures) then refuses every guess, also at a
	// new request's right code, and the password.
	t.Run("voidAfterFiveTries", func(t *testing.T) {
		user(t, "guess@example.com")
		ask(t, "guess@example.com")
		code, token := mailedCode(t, mc, "guess@example.com", subjectSignInCode, 1)
		for i := range 5 {
			if got, m := verifyCode(anon(), "guess@example.com", otherCode(code, i)); got != 401 || m["code"] != "invalid_code" || m["triesLeft"] != float64(4-i) {
				t.Fatalf("wrong code %d: %d %v", i+1, got, m)
			}
		}
		if got, m := verifyLink(anon(), token); got != 400 || m["code"] != "invalid_token" {
			t.Fatalf("the link after 5 wrong codes: %d %v", got, m)
		}
		got, m := verifyCode(anon(), "guess@example.com", code)
		if got != 429 || m["code"] != "throttled" {
			t.Fatalf("the right code after 5 wrong ones: %d %v, want 429 (the account's 5 failures)", got, m)
		}
		ask(t, "guess@example.com")
		code2, _ := mailedCode(t, mc, "guess@example.com", subjectSignInCode, 2)
		if got, m := verifyCode(anon(), "guess@example.com", code2); got != 429 {
			t.Fatalf("a new request's right code while the account is locked: %d %v", got, m)
		}
		if got, _, _ := anon().do("POST", "/signin", map[string]string{"email": "guess@example.com", "password": pw}); got != 429 {
			t.Fatalf("the password while the account is locked: %d", got)
		}
	})

	t.Run("requestThrottle", func(t *testing.T) {
		for range 5 {
			ask(t, "flood@example.com")
		}
		got, m, h := anon().do("POST", "/signin/email", map[string]string{"email": "FLOOD@example.com"})
		if got != 429 || m["code"] != "throttled" || h.Get("Retry-After") == "" {
			t.Fatalf("sixth request: %d %v", got, m)
		}
	})

	t.Run("secondFactor", func(t *testing.T) {
		user(t, "tess@example.com")
		tess := signIn(t, gw, "tess@example.com", pw)
		secret, _ := enrol(t, tess)
		ask(t, "tess@example.com")
		code, _ := mailedCode(t, mc, "tess@example.com", subjectSignInCode, 1)
		c := anon()
		got, m := verifyCode(c, "tess@example.com", code)
		ch, _ := m["challenge"].(string)
		if got != 202 || m["mfaRequired"] != true || ch == "" || c.cookie() != "" {
			t.Fatalf("the code of a TOTP account: %d %v", got, m)
		}
		c.mustStatus(401, "GET", "/me", nil)
		c.mustStatus(200, "POST", "/signin/mfa", map[string]string{"challenge": ch, "code": totpAt(t, secret, stepNow()+1)})
		wantSignedIn(t, c, "tess@example.com")
	})

	// Sign-up by code: an address of an allowed domain gets its account
	// (verified, no password), then sets a password from the profile with a
	// fresh code; another domain gets nothing.
	t.Run("signUpAndFirstPassword", func(t *testing.T) {
		ask(t, "new@signup.example")
		ask(t, "new@elsewhere.example")
		code, token := mailedCode(t, mc, "new@signup.example", subjectSignUpCode, 1)
		if token == "" {
			t.Fatal("no link")
		}
		c := anon()
		if got, m := verifyCode(c, "new@signup.example", code); got != 200 {
			t.Fatalf("sign-up code: %d %v", got, m)
		}
		if u := wantSignedIn(t, c, "new@signup.example"); u["emailVerified"] != true || u["roleName"] != "user" {
			t.Fatalf("signed-up user: %v", u)
		}
		if st := c.mustStatus(200, "GET", "/me/mfa", nil); st["password"] != false {
			t.Fatalf("GET /me/mfa: %v", st)
		}
		if got, _, _ := anon().do("POST", "/signin", map[string]string{"email": "new@signup.example", "password": "anything at all"}); got != 401 {
			t.Fatalf("a password sign-in without a password: %d", got)
		}
		wantCode(t, c, "POST", "/me/password", map[string]string{"code": "123456", "password": "a first password"}, 401, "code_void")
		c.mustStatus(202, "POST", "/me/password/code", nil)
		pcode, ptoken := mailedCode(t, mc, "new@signup.example", subjectPasswordCode, 1)
		if ptoken != "" {
			t.Fatal("the password code's message holds a sign-in link")
		}
		// A sign-in code is no password code, and the reverse.
		if got, m := verifyCode(anon(), "new@signup.example", pcode); got != 401 || m["code"] != "code_void" {
			t.Fatalf("the password code as a sign-in code: %d %v", got, m)
		}
		wantCode(t, c, "POST", "/me/password", map[string]string{"code": pcode, "password": "short"}, 400, "invalid_password")
		if m := c.mustStatus(200, "POST", "/me/password", map[string]string{"code": pcode, "password": "a first password"}); m["message"] != "password set" {
			t.Fatalf("POST /me/password: %v", m)
		}
		wantSignedIn(t, c, "new@signup.example") // the session stays
		signIn(t, gw, "new@signup.example", "a first password")
		wantCode(t, c, "POST", "/me/password/code", nil, 409, "password_set")
		wantCode(t, c, "POST", "/me/password", map[string]string{"code": pcode, "password": "a first password"}, 409, "password_set")
		if n := mailCount(t, mc, "new@elsewhere.example", ""); n != 0 {
			t.Fatalf("%d messages to an address of a domain that may not sign up", n)
		}
	})

	// 200 concurrent uses of one request, 100 by its code and 100 by its
	// link: exactly one signs in.
	t.Run("concurrentUses", func(t *testing.T) {
		user(t, "race@example.com")
		ask(t, "race@example.com")
		code, token := mailedCode(t, mc, "race@example.com", subjectSignInCode, 1)
		var mu sync.Mutex
		statuses := map[int]int{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 200 {
			wg.Go(func() {
				c := anon()
				<-start
				var got int
				if i%2 == 0 {
					got, _ = verifyCode(c, "race@example.com", code)
				} else {
					got, _ = verifyLink(c, token)
				}
				mu.Lock()
				statuses[got]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if statuses[200] != 1 || statuses[500] != 0 || statuses[503] != 0 {
			t.Fatalf("200 concurrent uses: statuses %v, want exactly one 200", statuses)
		}
	})

	t.Run("audit", func(t *testing.T) {
		want := map[string]func(_ string, r map[string]any) bool{
			"signin.email.requested": func(_ string, r map[string]any) bool { return r["targetEmail"] == "ada@example.com" },
			"signin.email.failed":    func(_ string, r map[string]any) bool { return r["targetEmail"] == "guess@example.com" },
			"signin.email.voided":    func(_ string, r map[string]any) bool { return r["targetEmail"] == "guess@example.com" },
			"signin.succeeded": func(_ string, r map[string]any) bool {
				d, _ := r["detail"].(map[string]any)
				return r["targetEmail"] == "lin@example.com" && d["method"] == "email-link"
			},
			"user.created": func(_ string, r map[string]any) bool {
				d, _ := r["detail"].(map[string]any)
				return r["targetEmail"] == "new@signup.example" && d["method"] == "email-code"
			},
		}
		bodies := awaitAuditEvents(t, admin, want, nil)
		// No code or token in the logs or the trail.
		all := logs.String() + strings.Join(bodies, "\n")
		if codeLinkInMail.MatchString(all) {
			t.Fatal("a sign-in link appears in the services' logs or the audit trail")
		}
	})
}
