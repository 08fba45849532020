package e2e

// Hostile-input suite, sign-in with identity providers and the last way to
// sign in (issue 43, rows 3, 4 and 5): cookieless provider callbacks that
// any page can make a visitor's browser send, a flood of provider sign-ins
// begun from one address, and removals of an account's last ways to sign
// in, one after the other and at once. Each test replays the attack through
// the gateway against the real processes and a real OpenID Provider
// (testop).

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/testkit/authenticator"
	"github.com/acme/platform/scripts/stack"
)

// The test OpenID Provider's one person, and this platform's client there.
const (
	corpSecret   = "testop-client-secret"
	corpUser     = "ada"
	corpPassword = "ada-password"
	corpEmail    = "ada@corp.example"
)

// corpPlatform starts testop and the platform with it as provider "corp"
// (sign-up on for corp.example), as TestProviderSignIn does; it returns the
// platform, its secrets and the provider's issuer.
func corpPlatform(t *testing.T) (*stack.Platform, stack.Secrets, string) {
	t.Helper()
	addr, err := embedded.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	base := "http://127.0.0.1:" + port
	issuer := startTestOP(t, base+"/signin/oidc/corp/callback", corpSecret, corpUser, corpPassword, corpEmail)
	p, sec, _ := platformWith(t, map[string]string{
		"AUTH_PUBLIC_URL":                base,
		"AUTH_OIDC_PROVIDERS":            "corp",
		"AUTH_OIDC_CORP_ISSUER":          issuer,
		"AUTH_OIDC_CORP_CLIENT_ID":       "platform",
		"AUTH_OIDC_CORP_CLIENT_SECRET":   corpSecret,
		"AUTH_OIDC_CORP_SIGNUP":          "true",
		"AUTH_OIDC_CORP_ALLOWED_DOMAINS": "corp.example",
	}, stack.Options{GatewayAddr: addr})
	if p.GatewayURL != base {
		t.Fatalf("the gateway is at %s, want %s", p.GatewayURL, base)
	}
	return p, sec, issuer
}

// browserClient is a client that stops at every redirect, to read it.
func browserClient(t *testing.T, base string) *client {
	c := newClient(t, base)
	c.http.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// consoleError is the error code a 302 back to the console carries ("" when
// the redirect goes elsewhere).
func consoleError(h http.Header) string {
	u, err := url.Parse(h.Get("Location"))
	if err != nil || u.Path != "/console/" {
		return ""
	}
	_, query, _ := strings.Cut(u.Fragment, "?")
	q, _ := url.ParseQuery(query)
	return q.Get("error")
}

// TestHostileProviderCallbackWithoutState: 55 provider callbacks without
// the browser's state cookie (what `<img src=".../signin/oidc/corp/callback
// ?state=x&code=y">` on any page makes a visitor's browser send), more than
// the address's 50 failed sign-ins, from the administrator's address. Each
// is sent back to the console with invalid_state; none counts, so the
// administrator's right password then signs in (200, not 429).
func TestHostileProviderCallbackWithoutState(t *testing.T) {
	p, sec, _ := corpPlatform(t)
	for i := range 55 {
		c := browserClient(t, p.GatewayURL) // a fresh browser: no idpState cookie
		path := "/signin/oidc/corp/callback?state=x&code=y"
		if i%5 == 4 {
			path = "/signin/oidc/corp/callback?state=x" // no code either
		}
		st, _, h := c.do("GET", path, nil)
		if st != http.StatusFound || consoleError(h) != "invalid_state" {
			t.Fatalf("callback %d without the state cookie: %d %q, want 302 to the console with invalid_state", i+1, st, h.Get("Location"))
		}
	}
	admin := newClient(t, p.GatewayURL)
	st, m, h := admin.do("POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	if st != http.StatusOK {
		t.Fatalf("the administrator's right password after 55 cookieless callbacks: %d %v (Retry-After %q), want 200", st, m, h.Get("Retry-After"))
	}
}

// TestHostileProviderBeginFlood: 400 `GET /signin/oidc/corp` from one
// address. At most 20 (AUTH_CEREMONY_THROTTLE_ADDRESS_MAX, the budget of
// passkey begins, shared) are sent to the provider with a state; the rest
// go back to the console with error=throttled and store nothing: the
// stored states grow by at most 20.
func TestHostileProviderBeginFlood(t *testing.T) {
	p, _, issuer := corpPlatform(t)
	count := storedTokens(t, p)
	before := count()
	awayFromWindowEdge(time.Minute)

	c := browserClient(t, p.GatewayURL)
	toProvider, refused := 0, 0
	for i := range 400 {
		st, _, h := c.do("GET", "/signin/oidc/corp", nil)
		switch {
		case st == http.StatusFound && strings.HasPrefix(h.Get("Location"), issuer+"/"):
			toProvider++
		case st == http.StatusFound && consoleError(h) == "throttled":
			refused++
		default:
			t.Fatalf("begin %d: %d %q, want 302 to the provider or to the console with throttled", i+1, st, h.Get("Location"))
		}
	}
	if toProvider > 20 || toProvider < 1 || toProvider+refused != 400 {
		t.Fatalf("400 begins: %d sent to the provider, %d refused; want at most 20 sent and the rest refused", toProvider, refused)
	}
	after := count()
	if after-before > 20 {
		t.Fatalf("account_tokens grew by %d for 400 begins, want at most 20", after-before)
	}
	// The address's budget is one with passkey sign-ins: spent too.
	if st, m, h := c.do("POST", "/signin/passkey/begin", nil); st != http.StatusTooManyRequests || m["code"] != "throttled" || h.Get("Retry-After") == "" {
		t.Fatalf("a passkey begin after the flood: %d %v", st, m)
	}
}

// providerLink links the provider's person to c's account: the link's
// URL, the provider's login, and the callback.
func providerLink(t *testing.T, c *client, user, password string) {
	t.Helper()
	u, _ := c.mustStatus(200, "POST", "/me/identities/corp/link", nil)["url"].(string)
	gw, _ := url.Parse(c.base)
	c.http.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		if r.URL.Host == gw.Host && strings.HasPrefix(r.URL.Path, "/console") {
			return http.ErrUseLastResponse
		}
		return nil
	}
	defer func() { c.http.CheckRedirect = nil }()
	page, err := c.http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	id := page.Request.URL.Query().Get("authRequestID")
	if page.StatusCode != 200 || id == "" {
		t.Fatalf("not the provider's login page: %s %s", page.Status, page.Request.URL)
	}
	issuer := page.Request.URL.Scheme + "://" + page.Request.URL.Host
	resp, err := c.http.PostForm(issuer+"/login/username", url.Values{"id": {id}, "username": {user}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || loc.Fragment != "/profile?linked=corp" {
		t.Fatalf("not linked: %s %q", resp.Status, resp.Header.Get("Location"))
	}
}

// identityIDs lists the ids of c's linked identities.
func identityIDs(t *testing.T, c *client) []string {
	t.Helper()
	var out []string
	for _, i := range c.mustStatus(200, "GET", "/me/identities", nil)["identities"].([]any) {
		out = append(out, i.(map[string]any)["id"].(string))
	}
	return out
}

// TestHostileLastSignInMethod: an account signed up through the provider
// (no password) adds a passkey. Unlinking the identity then deleting the
// passkey: the second is refused (409 last_sign_in_method) and the passkey
// still signs in. Then, with the identity linked again, both removed at
// once, five times: one passes, the other is refused, and one way in is
// always left.
func TestHostileLastSignInMethod(t *testing.T) {
	p, _, issuer := corpPlatform(t)
	const origin = "http://localhost:8080" // AUTH_WEBAUTHN_ORIGINS' default
	ada := newClient(t, p.GatewayURL)
	if page, q := providerSignIn(t, ada, issuer, corpUser, corpPassword); page != "/profile" {
		t.Fatalf("sign-up: back at %s?%s", page, q.Encode())
	}
	ada.http.CheckRedirect = nil
	key := authenticator.New(origin)
	pk := registerPasskey(t, ada, key, "")["id"].(string)
	ids := identityIDs(t, ada)
	if len(ids) != 1 {
		t.Fatalf("identities after sign-up: %v", ids)
	}
	ada.mustStatus(200, "DELETE", "/me/identities/"+ids[0], nil)
	wantCode(t, ada, "DELETE", "/me/passkeys/"+pk, nil, 409, "last_sign_in_method")
	if n := len(passkeysOf(t, ada)); n != 1 {
		t.Fatalf("the refused deletion left %d passkeys", n)
	}
	if _, _, st, m := passkeySignIn(t, p.GatewayURL, key); st != 200 {
		t.Fatalf("the kept passkey no longer signs in: %d %v", st, m)
	}

	// Both last ways removed at once.
	for round := range 5 {
		if len(identityIDs(t, ada)) == 0 {
			providerLink(t, ada, corpUser, corpPassword)
		}
		if len(passkeysOf(t, ada)) == 0 {
			key = authenticator.New(origin)
			registerPasskey(t, ada, key, "")
		}
		ids, pks := identityIDs(t, ada), passkeysOf(t, ada)
		if len(ids) != 1 || len(pks) != 1 {
			t.Fatalf("round %d: %d identities and %d passkeys, want one of each", round, len(ids), len(pks))
		}
		type answer struct {
			status int
			code   any
		}
		answers := make([]answer, 2)
		paths := []string{"/me/identities/" + ids[0], "/me/passkeys/" + pks[0]["id"].(string)}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, path := range paths {
			wg.Go(func() {
				<-start
				st, m, _ := ada.do("DELETE", path, nil)
				answers[i] = answer{st, m["code"]}
			})
		}
		close(start)
		wg.Wait()
		ok, last := 0, 0
		for _, a := range answers {
			switch {
			case a.status == 200:
				ok++
			case a.status == 409 && a.code == "last_sign_in_method":
				last++
			}
		}
		if ok != 1 || last != 1 {
			t.Fatalf("round %d: concurrent unlink and passkey delete answered %+v (identity, passkey), want one 200 and one 409 last_sign_in_method", round, answers)
		}
		if n := len(identityIDs(t, ada)) + len(passkeysOf(t, ada)); n != 1 {
			t.Fatalf("round %d: %d ways to sign in left, want 1", round, n)
		}
	}
}
