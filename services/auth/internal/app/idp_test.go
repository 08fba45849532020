package app_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/auth/internal/idp/idptest"
	"github.com/pquerna/otp"
	"github.com/pquerna/otp/hotp"
)

// gatewayHost is the public address the service is told it sits behind;
// the test browser sends what goes there to the service, with the
// identity token a gateway would add.
const gatewayHost = "gateway.test"

// The people at the test OpenID Provider.
var (
	opAlice = idptest.User{ID: "sub-alice", Username: "alice", Password: "alice-pw", Email: "alice@corp.example", EmailVerified: true, FirstName: "Alice", LastName: "Liddell"}
	opBob   = idptest.User{ID: "sub-bob", Username: "bob", Password: "bob-pw", Email: "bob@corp.example", EmailVerified: true, FirstName: "Bob"}
	opCarol = idptest.User{ID: "sub-carol", Username: "carol", Password: "carol-pw", Email: "carol@elsewhere.example", EmailVerified: true, FirstName: "Carol"}
	opDave  = idptest.User{ID: "sub-dave", Username: "dave", Password: "dave-pw", Email: "dave@corp.example", EmailVerified: false, FirstName: "Dave"}
)

type idpHarness struct {
	*harness
	op *idptest.OP
	gh *idptest.GitHub
}

// newIDPHarness starts the service with two providers: "corp" (OpenID
// Connect, sign-up on for corp.example) and GitHub (sign-up off).
func newIDPHarness(t *testing.T) *idpHarness {
	t.Helper()
	return newIDPHarnessWith(t, nil)
}

// newIDPHarnessWith is newIDPHarness with more settings.
func newIDPHarnessWith(t *testing.T, extra map[string]string) *idpHarness {
	t.Helper()
	op := idptest.StartOP(t, []idptest.Client{{ID: "platform", Secret: "platform-secret",
		RedirectURIs: []string{"http://" + gatewayHost + "/signin/oidc/corp/callback"}}},
		[]idptest.User{opAlice, opBob, opCarol, opDave})
	gh := idptest.StartGitHub(t, "gh-client", "gh-secret",
		idptest.GitHubUser{ID: 4242, Login: "octo", Name: "Octo Cat", Emails: []idptest.GitHubEmail{{Email: "octo@gh.example", Primary: true, Verified: true}}})
	h := newHarness(t, merge(map[string]string{
		"AUTH_PUBLIC_URL":                "http://" + gatewayHost,
		"AUTH_COOKIE_SECURE":             "false",
		"AUTH_OIDC_PROVIDERS":            "corp",
		"AUTH_OIDC_CORP_ISSUER":          op.Issuer,
		"AUTH_OIDC_CORP_CLIENT_ID":       "platform",
		"AUTH_OIDC_CORP_CLIENT_SECRET":   "platform-secret",
		"AUTH_OIDC_CORP_DISPLAY_NAME":    "Corp SSO",
		"AUTH_OIDC_CORP_SIGNUP":          "true",
		"AUTH_OIDC_CORP_ALLOWED_DOMAINS": "corp.example",
		"AUTH_GITHUB_CLIENT_ID":          "gh-client",
		"AUTH_GITHUB_CLIENT_SECRET":      "gh-secret",
		"AUTH_GITHUB_URL":                gh.URL,
		"AUTH_GITHUB_API_URL":            gh.URL,
	}, extra))
	return &idpHarness{harness: h, op: op, gh: gh}
}

// browser is a cookie jar and a client that plays the gateway for
// gatewayHost: requests go to the service with an identity token (the
// session's, once signed in). It stops at the console.
type browser struct {
	h   *idpHarness
	c   *http.Client
	tok string // the identity token the gateway adds; anonymous until set
}

func (h *idpHarness) browser(t *testing.T) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{h: h, tok: h.anonToken()}
	base, err := url.Parse(h.base)
	if err != nil {
		t.Fatal(err)
	}
	b.c = &http.Client{Jar: jar, Timeout: 20 * time.Second,
		Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host != gatewayHost {
				return http.DefaultTransport.RoundTrip(r)
			}
			r = r.Clone(r.Context())
			r.URL.Scheme, r.URL.Host = base.Scheme, base.Host
			r.Header.Set(identity.Header, b.tok)
			return http.DefaultTransport.RoundTrip(r)
		}),
		CheckRedirect: func(r *http.Request, _ []*http.Request) error {
			if r.URL.Host == gatewayHost && strings.HasPrefix(r.URL.Path, "/console") {
				return http.ErrUseLastResponse
			}
			return nil
		}}
	return b
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (b *browser) get(t *testing.T, u string) *http.Response {
	t.Helper()
	resp, err := b.c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// console reads where the service sent the browser back: the console's
// page and its query.
func console(t *testing.T, resp *http.Response) (string, url.Values) {
	t.Helper()
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	u, err := url.Parse(loc)
	if resp.StatusCode != http.StatusFound || err != nil || u.Path != "/console/" {
		t.Fatalf("not sent back to the console: %s %q", resp.Status, loc)
	}
	page, query, _ := strings.Cut(u.Fragment, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(page, "/"), q
}

// signInCorp signs in at the OpenID Provider as who, from the button.
func (b *browser) signInCorp(t *testing.T, who idptest.User) (string, url.Values) {
	t.Helper()
	page := b.get(t, "http://"+gatewayHost+"/signin/oidc/corp")
	return console(t, b.h.op.SignIn(t, b.c, page, who.Username, who.Password))
}

// session is the sessionId cookie the jar holds for the gateway.
func (b *browser) session() string {
	for _, c := range b.c.Jar.Cookies(&url.URL{Scheme: "http", Host: gatewayHost, Path: "/"}) {
		if c.Name == "sessionId" {
			return c.Value
		}
	}
	return ""
}

func wantRefused(t *testing.T, page string, q url.Values, wantPage, code string) {
	t.Helper()
	if page != wantPage || q.Get("error") != code {
		t.Fatalf("back at %s?%s, want %s with error %s", page, q.Encode(), wantPage, code)
	}
}

// TestIdentityProviders runs the whole flow through the service's routes
// against a real OpenID Provider and the GitHub fake: the buttons, sign-up,
// sign-in again, each refusal of the account rules, an administrator's
// invitation, a replayed or foreign callback, linking and unlinking, the
// administrator's view, and TOTP asked unless the provider asserted MFA.
func TestIdentityProviders(t *testing.T) {
	h := newIDPHarness(t)
	for _, st := range []struct {
		name string
		run  func(*testing.T, *idpHarness)
	}{
		{"providers200", idpProviders200},
		{"signUp", idpSignUp},
		{"emailOfAnotherAccount", idpEmailOfAnotherAccount},
		{"domainNotAllowed", idpDomainNotAllowed},
		{"unverifiedEmail", idpUnverifiedEmail},
		{"signUpOff", idpSignUpOff},
		{"stateOfAnotherBrowser", idpStateOfAnotherBrowser},
		{"replayedCallback", idpReplayedCallback},
		{"denied", idpDenied},
		{"unknownProvider", idpUnknownProvider},
		{"linkAndUnlink", idpLinkAndUnlink},
		{"secondFactor", idpSecondFactor},
	} {
		t.Run(st.name, func(t *testing.T) { st.run(t, h) })
	}
}

func idpProviders200(t *testing.T, h *idpHarness) {
	r := h.do(req{method: "GET", path: "/signin/oidc", token: h.anonToken()})
	want(t, r, 200, "")
	list, _ := r.body["providers"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["name"] != "corp" || list[0].(map[string]any)["displayName"] != "Corp SSO" || list[1].(map[string]any)["name"] != "github" {
		t.Fatalf("providers %v", r.body)
	}
}

func idpSignUp(t *testing.T, h *idpHarness) {
	b := h.browser(t)
	page, q := b.signInCorp(t, opAlice)
	if page != "profile" || len(q) != 0 {
		t.Fatalf("back at %s?%s, want the profile", page, q.Encode())
	}
	r, s := h.msMe(b.session())
	want(t, r, 200, "")
	if s.user["email"] != opAlice.Email || s.user["emailVerified"] != true || s.role != "user" {
		t.Fatalf("user %v", s.user)
	}
	aliceID := s.userID
	// Signing in again finds the same account.
	b2 := h.browser(t)
	if page, _ := b2.signInCorp(t, opAlice); page != "profile" {
		t.Fatalf("second sign-in ended at %s", page)
	}
	if _, s2 := h.msMe(b2.session()); s2.userID != aliceID {
		t.Fatalf("second sign-in opened user %s, want %s", s2.userID, aliceID)
	}
	tok, _ := h.tokenFor(b.session())
	r = h.do(req{method: "GET", path: "/me/identities", token: tok})
	want(t, r, 200, "")
	ids, _ := r.body["identities"].([]any)
	if len(ids) != 1 || ids[0].(map[string]any)["provider"] != "corp" || ids[0].(map[string]any)["email"] != opAlice.Email {
		t.Fatalf("identities %v", r.body)
	}
	// She has no password: a password sign-in is refused like a
	// wrong one.
	want(t, h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": opAlice.Email, "password": "any password at all"}}), 401, "invalid_credentials")
	// Her only way to sign in cannot be removed.
	id := ids[0].(map[string]any)["id"].(string)
	want(t, h.do(req{method: "DELETE", path: "/me/identities/" + id, token: tok}), 409, "last_sign_in_method")
}

func idpEmailOfAnotherAccount(t *testing.T, h *idpHarness) {
	admin := h.adminToken()
	bobID := h.createUser(admin, opBob.Email, "bob-password-1")
	page, q := h.browser(t).signInCorp(t, opBob)
	wantRefused(t, page, q, "signin", "identity_email_taken")
	r := h.do(req{method: "GET", path: "/users/" + bobID + "/identities", token: admin})
	want(t, r, 200, "")
	if ids, _ := r.body["identities"].([]any); len(ids) != 0 {
		t.Fatalf("the account was linked by its address: %v", r.body)
	}
	// The administrator invites Bob's account for the provider: his
	// next sign-in there links it.
	want(t, h.do(req{method: "POST", path: "/users/" + bobID + "/identities", token: admin, body: map[string]string{"provider": "nope"}}), 404, "unknown_provider")
	r = h.do(req{method: "POST", path: "/users/" + bobID + "/identities", token: admin, body: map[string]string{"provider": "corp"}})
	want(t, r, 201, "")
	if inv := r.body["identity"].(map[string]any); inv["pending"] != true || inv["email"] != opBob.Email {
		t.Fatalf("invitation %v", r.body)
	}
	b := h.browser(t)
	if page, q := b.signInCorp(t, opBob); page != "profile" {
		t.Fatalf("invited sign-in: back at %s?%s", page, q.Encode())
	}
	if _, s := h.msMe(b.session()); s.userID != bobID {
		t.Fatalf("invited sign-in opened %s, want %s", s.userID, bobID)
	}
	r = h.do(req{method: "GET", path: "/users/" + bobID + "/identities", token: admin})
	if ids, _ := r.body["identities"].([]any); len(ids) != 1 || ids[0].(map[string]any)["pending"] != false {
		t.Fatalf("after the claim: %v", r.body)
	}
}

func idpDomainNotAllowed(t *testing.T, h *idpHarness) {
	page, q := h.browser(t).signInCorp(t, opCarol)
	wantRefused(t, page, q, "signin", "identity_domain")
}

func idpUnverifiedEmail(t *testing.T, h *idpHarness) {
	page, q := h.browser(t).signInCorp(t, opDave)
	wantRefused(t, page, q, "signin", "identity_unverified")
}

func idpSignUpOff(t *testing.T, h *idpHarness) {
	h.gh.As("octo")
	page, q := console(t, h.browser(t).get(t, "http://"+gatewayHost+"/signin/oidc/github"))
	wantRefused(t, page, q, "signin", "identity_not_linked")
}

func idpStateOfAnotherBrowser(t *testing.T, h *idpHarness) {
	h.gh.As("octo")
	b := h.browser(t)
	b.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp := b.get(t, "http://"+gatewayHost+"/signin/oidc/github")
	resp.Body.Close()
	// The provider's redirect back, followed by another browser.
	resp = b.get(t, resp.Header.Get("Location"))
	resp.Body.Close()
	back := resp.Header.Get("Location")
	page, q := console(t, h.browser(t).get(t, back))
	wantRefused(t, page, q, "signin", "invalid_state")
}

func idpReplayedCallback(t *testing.T, h *idpHarness) {
	b := h.browser(t)
	var back string
	b.c.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		if r.URL.Host == gatewayHost && strings.HasSuffix(r.URL.Path, "/callback") {
			back = r.URL.String()
		}
		if r.URL.Host == gatewayHost && strings.HasPrefix(r.URL.Path, "/console") {
			return http.ErrUseLastResponse
		}
		return nil
	}
	if page, _ := b.signInCorp(t, opAlice); page != "profile" {
		t.Fatalf("sign-in ended at %s", page)
	}
	// The same answer again, from the same browser (its state
	// cookie is gone; put it back to show the state is spent too).
	u, _ := url.Parse(back)
	b.c.Jar.SetCookies(&url.URL{Scheme: "http", Host: gatewayHost, Path: "/signin/oidc/"},
		[]*http.Cookie{{Name: "idpState", Value: u.Query().Get("state"), Path: "/signin/oidc/"}})
	page, q := console(t, b.get(t, back))
	wantRefused(t, page, q, "signin", "invalid_state")
}

func idpDenied(t *testing.T, h *idpHarness) {
	h.gh.Deny()
	defer h.gh.As("octo")
	page, q := console(t, h.browser(t).get(t, "http://"+gatewayHost+"/signin/oidc/github"))
	wantRefused(t, page, q, "signin", "provider_refused")
}

func idpUnknownProvider(t *testing.T, h *idpHarness) {
	page, q := console(t, h.browser(t).get(t, "http://"+gatewayHost+"/signin/oidc/nope"))
	wantRefused(t, page, q, "signin", "unknown_provider")
}

func idpLinkAndUnlink(t *testing.T, h *idpHarness) {
	h.gh.As("octo")
	b := h.browser(t)
	admin, s := h.tokenFor(h.signIn(adminEmail, adminPassword))
	b.tok = admin
	r := h.do(req{method: "POST", path: "/me/identities/github/link", token: admin})
	want(t, r, 200, "")
	// The console's fetch got the state cookie; the browser goes to
	// the provider.
	start := r.body["url"].(string)
	for _, line := range r.header.Values("Set-Cookie") {
		if c, err := http.ParseSetCookie(line); err == nil && c.Name == "idpState" {
			b.c.Jar.SetCookies(&url.URL{Scheme: "http", Host: gatewayHost, Path: c.Path}, []*http.Cookie{c})
		}
	}
	page, q := console(t, b.get(t, start))
	if page != "profile" || q.Get("linked") != "github" {
		t.Fatalf("back at %s?%s, want the profile with linked=github", page, q.Encode())
	}
	// Now GitHub signs the administrator in.
	g := h.browser(t)
	if page, q := console(t, g.get(t, "http://"+gatewayHost+"/signin/oidc/github")); page != "profile" {
		t.Fatalf("GitHub sign-in ended at %s?%s", page, q.Encode())
	}
	if _, gs := h.msMe(g.session()); gs.userID != s.userID {
		t.Fatalf("GitHub signed in %s, want the administrator %s", gs.userID, s.userID)
	}
	// The administrator's view of the user.
	r = h.do(req{method: "GET", path: "/users/" + s.userID + "/identities", token: admin})
	want(t, r, 200, "")
	if ids, _ := r.body["identities"].([]any); len(ids) != 1 || ids[0].(map[string]any)["provider"] != "github" {
		t.Fatalf("admin view %v", r.body)
	}
	r = h.do(req{method: "GET", path: "/me/identities", token: admin})
	ids, _ := r.body["identities"].([]any)
	if len(ids) != 1 {
		t.Fatalf("identities %v", r.body)
	}
	id := ids[0].(map[string]any)["id"].(string)
	want(t, h.do(req{method: "DELETE", path: "/me/identities/" + id, token: admin}), 200, "")
	want(t, h.do(req{method: "DELETE", path: "/me/identities/" + id, token: admin}), 404, "identity_not_found")
	page, q = console(t, h.browser(t).get(t, "http://"+gatewayHost+"/signin/oidc/github"))
	wantRefused(t, page, q, "signin", "identity_not_linked")
}

func idpSecondFactor(t *testing.T, h *idpHarness) {
	// Alice turns TOTP on; a provider sign-in then asks for it,
	// unless the provider asserted a second factor (amr).
	b := h.browser(t)
	if page, _ := b.signInCorp(t, opAlice); page != "profile" {
		t.Fatalf("sign-in ended at %s", page)
	}
	tok, _ := h.tokenFor(b.session())
	r := h.do(req{method: "POST", path: "/me/mfa/totp", token: tok})
	want(t, r, 200, "")
	secret := r.body["secret"].(string)
	code := func(step int64) string {
		c, err := hotp.GenerateCodeCustom(secret, uint64(step), hotp.ValidateOpts{Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	step := time.Now().Unix() / 30
	want(t, h.do(req{method: "POST", path: "/me/mfa/totp/confirm", token: tok, body: map[string]string{"code": code(step)}}), 200, "")

	page, q := h.browser(t).signInCorp(t, opAlice)
	if page != "signin" || q.Get("challenge") == "" {
		t.Fatalf("back at %s?%s, want the sign-in page with a challenge", page, q.Encode())
	}
	r = h.do(req{method: "POST", path: "/signin/mfa", token: h.anonToken(), body: map[string]string{"challenge": q.Get("challenge"), "code": code(step + 1)}})
	want(t, r, 200, "")

	h.op.Spoil(func(c map[string]any) { c["amr"] = []string{"pwd", "mfa"} })
	defer h.op.Spoil(nil)
	if page, q := h.browser(t).signInCorp(t, opAlice); page != "profile" {
		t.Fatalf("with amr mfa: back at %s?%s, want the profile", page, q.Encode())
	}
}

func merge(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// TestProviderCallbackWithoutState: callbacks without the browser's state
// cookie (what any page can make a visitor's browser send, as images), ten
// times the address's failed sign-ins allowed, are refused invalid_state
// without counting: the address's password sign-ins still pass, and a
// real sign-in with the provider too. A callback bound to its browser
// whose state is spent still counts.
func TestProviderCallbackWithoutState(t *testing.T) {
	h := newIDPHarnessWith(t, map[string]string{"AUTH_THROTTLE_ADDRESS_MAX": "5"})
	for i := range 55 {
		b := h.browser(t)
		q := "state=x&code=y"
		if i%2 == 1 { // a cookie, but another state's
			b.c.Jar.SetCookies(&url.URL{Scheme: "http", Host: gatewayHost, Path: "/signin/oidc/"},
				[]*http.Cookie{{Name: "idpState", Value: "another", Path: "/signin/oidc/"}})
		}
		page, qv := console(t, b.get(t, "http://"+gatewayHost+"/signin/oidc/corp/callback?"+q))
		wantRefused(t, page, qv, "signin", "invalid_state")
	}
	h.signIn(adminEmail, adminPassword)
	if page, q := h.browser(t).signInCorp(t, opAlice); page != "profile" {
		t.Fatalf("a provider sign-in after the unbound callbacks: back at %s?%s", page, q.Encode())
	}
	// Bound to the browser (cookie = state) but not pending: these count,
	// and lock the address after 5.
	for range 7 {
		b := h.browser(t)
		b.c.Jar.SetCookies(&url.URL{Scheme: "http", Host: gatewayHost, Path: "/signin/oidc/"},
			[]*http.Cookie{{Name: "idpState", Value: "spent", Path: "/signin/oidc/"}})
		console(t, b.get(t, "http://"+gatewayHost+"/signin/oidc/corp/callback?state=spent&code=y"))
	}
	r := h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": adminEmail, "password": adminPassword}})
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("7 bound callbacks with a spent state: the address is not locked (%d)", r.status)
	}
}

// TestProviderBeginsBounded: provider sign-ins begun from one address are
// admitted like passkey sign-ins (one budget for both,
// AUTH_CEREMONY_THROTTLE_ADDRESS_MAX); refused ones go back to the console
// with error=throttled and store nothing; the unfinished flows of every
// address together are capped (AUTH_IDP_MAX_PENDING), finished ones give
// their slot back.
func TestProviderBeginsBounded(t *testing.T) {
	h := newIDPHarnessWith(t, map[string]string{"AUTH_CEREMONY_THROTTLE_ADDRESS_MAX": "6", "AUTH_IDP_MAX_PENDING": "4"})
	testkit.AllowScan(h.db.Name(), "account_tokens", "{}") // this test's own count
	stored := func() int64 {
		n, err := h.db.Collection("account_tokens").EstimatedDocumentCount(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	begin := func() (string, url.Values, *http.Response) {
		b := h.browser(t)
		b.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp := b.get(t, "http://"+gatewayHost+"/signin/oidc/corp")
		resp.Body.Close()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if loc.Path == "/console/" {
			page, q, _ := strings.Cut(loc.Fragment, "?")
			v, _ := url.ParseQuery(q)
			return page, v, resp
		}
		return "", nil, resp
	}
	before := stored()
	// The pending cap first: 4 unfinished flows, the fifth refused.
	for i := range 5 {
		page, q, resp := begin()
		switch {
		case i < 4 && page != "":
			t.Fatalf("begin %d refused: %s?%s", i+1, page, q.Encode())
		case i == 4:
			wantRefused(t, strings.TrimPrefix(page, "/"), q, "signin", "throttled")
		}
		if i < 4 && !strings.HasPrefix(resp.Header.Get("Location"), h.op.Issuer) {
			t.Fatalf("begin %d: %q", i+1, resp.Header.Get("Location"))
		}
	}
	if got := stored() - before; got != 4 {
		t.Fatalf("%d states stored, want the 4 admitted", got)
	}
	// A link is capped too (429 JSON: the console's fetch).
	admin, _ := h.tokenFor(h.signIn(adminEmail, adminPassword))
	want(t, h.do(req{method: "POST", path: "/me/identities/github/link", token: admin}), 429, "throttled")
	// The address's budget (6 per minute) is one with passkey begins: 4
	// provider begins admitted so far (the refused one counted nowhere), so
	// two passkey begins pass and the next is refused.
	want(t, h.do(req{method: "POST", path: "/signin/passkey/begin", token: h.anonToken()}), 200, "")
	want(t, h.do(req{method: "POST", path: "/signin/passkey/begin", token: h.anonToken()}), 200, "")
	want(t, h.do(req{method: "POST", path: "/signin/passkey/begin", token: h.anonToken()}), 429, "throttled")
	if got := stored() - before; got != 6 {
		t.Fatalf("%d states stored, want 4 flows and 2 ceremonies", got)
	}
}

// TestProviderFlowGivesItsPendingSlotBack: a flow whose state its callback
// took (here by signing in) no longer counts against AUTH_IDP_MAX_PENDING,
// so a begin refused at the cap is admitted once a flow has finished. It
// fails when the pending slot cannot be given back (a release without the
// store's mark of the hold deletes nothing).
func TestProviderFlowGivesItsPendingSlotBack(t *testing.T) {
	h := newIDPHarnessWith(t, map[string]string{"AUTH_IDP_MAX_PENDING": "2"})
	begin := func(b *browser) *http.Response {
		b.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp := b.get(t, "http://"+gatewayHost+"/signin/oidc/corp")
		resp.Body.Close()
		b.c.CheckRedirect = nil
		return resp
	}
	admitted := func(resp *http.Response) bool {
		return strings.HasPrefix(resp.Header.Get("Location"), h.op.Issuer)
	}
	if !admitted(begin(h.browser(t))) {
		t.Fatal("first flow refused")
	}
	h.browser(t).signInCorp(t, opAlice) // whatever its outcome, the callback takes the state
	// Two flows begun, one finished: one pending, so one more is admitted,
	// and then the cap refuses the next.
	if !admitted(begin(h.browser(t))) {
		t.Fatal("a begin after a flow finished was refused: the finished flow kept its pending slot")
	}
	if admitted(begin(h.browser(t))) {
		t.Fatal("a begin past AUTH_IDP_MAX_PENDING=2 with two flows pending was admitted")
	}
}
