package idp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/auth/internal/idp"
	"github.com/acme/platform/services/auth/internal/idp/idptest"
	"github.com/acme/platform/services/auth/internal/mongostore"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// publicURL is where the flows say the gateway is; the tests never go
// there, they read the provider's redirect to it.
const publicURL = "http://gateway.test"

var alice = idptest.User{ID: "sub-alice", Username: "alice", Password: "alice-secret", Email: "alice@example.com",
	EmailVerified: true, FirstName: "Alice", LastName: "Liddell"}

type fixture struct {
	flow *idp.Flow
	op   *idptest.OP
	gh   *idptest.GitHub
	// finished are the slots Options.Finished was told of.
	finished chan string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s := testkit.Get(t, testkit.Mongo)
	tokens := mongostore.NewTokens(s.Mongo.Database(s.Database(t)))
	op := idptest.StartOP(t, []idptest.Client{{ID: "platform", Secret: "platform-secret",
		RedirectURIs: []string{publicURL + "/signin/oidc/corp/callback"}}}, []idptest.User{alice})
	gh := idptest.StartGitHub(t, "gh-client", "gh-secret",
		idptest.GitHubUser{ID: 4242, Login: "octo", Name: "Octo Cat", Emails: []idptest.GitHubEmail{
			{Email: "octo@users.example", Primary: true, Verified: true}, {Email: "other@example.com"}}},
		idptest.GitHubUser{ID: 7, Login: "unverified", Emails: []idptest.GitHubEmail{{Email: "u@example.com", Primary: true}}})
	finished := make(chan string, 100)
	f, err := idp.New([]idp.Provider{
		{Name: "corp", DisplayName: "Corp SSO", Kind: idp.KindOIDC, Issuer: op.Issuer, ClientID: "platform", ClientSecret: "platform-secret"},
		{Name: "github", DisplayName: "GitHub", Kind: idp.KindGitHub, Issuer: gh.URL, APIURL: gh.URL, ClientID: "gh-client", ClientSecret: "gh-secret"},
	}, tokens, idp.Options{PublicURL: publicURL, Finished: func(_ context.Context, slot string) { finished <- slot }})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{flow: f, op: op, gh: gh, finished: finished}
}

// browser follows redirects except the one back to the gateway.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if req.URL.Host == "gateway.test" {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

// callback is the provider's redirect back to the gateway.
func callback(t *testing.T, resp *http.Response) idp.Callback {
	t.Helper()
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || loc.Host != "gateway.test" {
		t.Fatalf("not a redirect back: %s %q", resp.Status, resp.Header.Get("Location"))
	}
	q := loc.Query()
	return idp.Callback{State: q.Get("state"), Code: q.Get("code"), Error: q.Get("error"), ErrorDescription: q.Get("error_description")}
}

// signInAtOP begins a flow and signs alice in at the provider.
func (fx *fixture) signInAtOP(t *testing.T) (idp.Begun, idp.Callback) {
	t.Helper()
	b, err := fx.flow.Begin(context.Background(), "corp", idp.PurposeSignIn, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	page, err := c.Get(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	cb := callback(t, fx.op.SignIn(t, c, page, alice.Username, alice.Password))
	if cb.State != b.State {
		t.Fatalf("the provider returned state %q, want the flow's", cb.State)
	}
	return b, cb
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var e *idp.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("got %v, want an idp.Error %s", err, code)
	}
}

// The whole flow against a real OpenID Provider, then each refusal.
func TestOIDC(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()

	t.Run("signin", func(t *testing.T) {
		b, cb := fx.signInAtOP(t)
		res, err := fx.flow.Finish(ctx, "corp", b.State, cb)
		if err != nil {
			t.Fatal(err)
		}
		id := res.Identity
		if id.Provider != "corp" || id.Issuer != fx.op.Issuer || id.Subject != alice.ID || id.Email != alice.Email || !id.EmailVerified || id.MFA ||
			id.FullName != "Alice Liddell" {
			t.Fatalf("identity %+v", id)
		}
		if res.Purpose != idp.PurposeSignIn {
			t.Fatalf("purpose %q", res.Purpose)
		}
		// The state is spent: the same answer again is refused (bound to
		// the browser, so not IsUnbound: it counts as a failed sign-in).
		_, err = fx.flow.Finish(ctx, "corp", b.State, cb)
		wantCode(t, err, idp.CodeState)
		if idp.IsUnbound(err) {
			t.Fatalf("a spent state of this browser is IsUnbound")
		}
	})
	t.Run("stateNotBound", func(t *testing.T) {
		_, cb := fx.signInAtOP(t)
		_, err := fx.flow.Finish(ctx, "corp", "another-browser-state", cb)
		wantCode(t, err, idp.CodeState)
		if !idp.IsUnbound(err) {
			t.Fatalf("another browser's callback: not IsUnbound")
		}
		_, err = fx.flow.Finish(ctx, "corp", "", cb)
		wantCode(t, err, idp.CodeState)
		if !idp.IsUnbound(err) {
			t.Fatalf("a callback without the cookie: not IsUnbound")
		}
		// The state was not spent by them: the bound callback finishes.
		if _, err := fx.flow.Finish(ctx, "corp", cb.State, cb); err != nil {
			t.Fatalf("the bound callback after unbound ones: %v", err)
		}
	})
	t.Run("slotGivenBack", func(t *testing.T) {
		b, err := fx.flow.Begin(ctx, "corp", idp.PurposeSignIn, "", "slot-7")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fx.flow.Finish(ctx, "corp", b.State, idp.Callback{State: b.State}); err == nil {
			t.Fatal("a callback without code finished")
		}
		select {
		case got := <-fx.finished:
			if got != "slot-7" {
				t.Fatalf("Finished told %q, want slot-7", got)
			}
		default:
			t.Fatal("the state was taken but its slot not given back")
		}
	})
	t.Run("otherProvider", func(t *testing.T) {
		b, cb := fx.signInAtOP(t)
		_, err := fx.flow.Finish(ctx, "github", b.State, cb)
		wantCode(t, err, idp.CodeState)
	})
	t.Run("replayedCode", func(t *testing.T) {
		b, cb := fx.signInAtOP(t)
		if _, err := fx.flow.Finish(ctx, "corp", b.State, cb); err != nil {
			t.Fatal(err)
		}
		// A new flow of this browser, answered with the spent code.
		b2, err := fx.flow.Begin(ctx, "corp", idp.PurposeSignIn, "", "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = fx.flow.Finish(ctx, "corp", b2.State, idp.Callback{State: b2.State, Code: cb.Code})
		wantCode(t, err, idp.CodeCodeRejected)
	})
	t.Run("denied", func(t *testing.T) {
		b, err := fx.flow.Begin(ctx, "corp", idp.PurposeSignIn, "", "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = fx.flow.Finish(ctx, "corp", b.State, idp.Callback{State: b.State, Error: "access_denied"})
		wantCode(t, err, idp.CodeProviderRefused)
	})
	spoiled := map[string]func(map[string]any){
		"otherAudience": func(c map[string]any) { c["aud"] = []string{"another-client"} },
		"expired":       func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() },
		"otherNonce":    func(c map[string]any) { c["nonce"] = "not-this-flows" },
		"otherIssuer":   func(c map[string]any) { c["iss"] = "http://evil.example" },
	}
	for name, spoil := range spoiled {
		t.Run(name, func(t *testing.T) {
			fx.op.Spoil(spoil)
			defer fx.op.Spoil(nil)
			b, cb := fx.signInAtOP(t)
			_, err := fx.flow.Finish(ctx, "corp", b.State, cb)
			wantCode(t, err, idp.CodeTokenInvalid)
		})
	}
	t.Run("unspoiledResigned", func(t *testing.T) {
		// The re-signing itself is accepted: the refusals above are
		// the claims', not the key's.
		fx.op.Spoil(func(c map[string]any) { c["amr"] = []string{"pwd", "mfa"} })
		defer fx.op.Spoil(nil)
		b, cb := fx.signInAtOP(t)
		res, err := fx.flow.Finish(ctx, "corp", b.State, cb)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Identity.MFA {
			t.Fatal("amr mfa was not taken as a second factor")
		}
	})
	t.Run("unpublishedKey", func(t *testing.T) {
		fx.op.SignWithUnpublishedKey()
		defer fx.op.Spoil(nil)
		b, cb := fx.signInAtOP(t)
		_, err := fx.flow.Finish(ctx, "corp", b.State, cb)
		wantCode(t, err, idp.CodeTokenInvalid)
	})
	t.Run("unknownProvider", func(t *testing.T) {
		_, err := fx.flow.Begin(ctx, "nope", idp.PurposeSignIn, "", "")
		wantCode(t, err, idp.CodeUnknownProvider)
	})
}

// GitHub's flow against the fake of its documented endpoints.
func TestGitHub(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	run := func(t *testing.T, purpose, user string) (idp.Result, error) {
		t.Helper()
		b, err := fx.flow.Begin(ctx, "github", purpose, user, "")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := browser(t).Get(b.URL)
		if err != nil {
			t.Fatal(err)
		}
		return fx.flow.Finish(ctx, "github", b.State, callback(t, resp))
	}
	fx.gh.As("octo")
	res, err := run(t, idp.PurposeLink, "user-1")
	if err != nil {
		t.Fatal(err)
	}
	if id := res.Identity; id.Issuer != fx.gh.URL || id.Subject != "4242" || id.Email != "octo@users.example" || !id.EmailVerified || id.FullName != "Octo Cat" {
		t.Fatalf("identity %+v", id)
	}
	if res.Purpose != idp.PurposeLink || res.UserID != "user-1" {
		t.Fatalf("result %+v", res)
	}
	fx.gh.As("unverified")
	if res, err := run(t, idp.PurposeSignIn, ""); err != nil || res.Identity.EmailVerified || res.Identity.Email != "u@example.com" {
		t.Fatalf("unverified: %+v %v", res.Identity, err)
	}
	fx.gh.Deny()
	_, err = run(t, idp.PurposeSignIn, "")
	wantCode(t, err, idp.CodeProviderRefused)
}

func TestProviderConfig(t *testing.T) {
	for name, p := range map[string]idp.Provider{
		"badName":   {Name: "Bad Name", Kind: idp.KindOIDC, Issuer: "https://id.example", ClientID: "a", ClientSecret: "b"},
		"noIssuer":  {Name: "corp", Kind: idp.KindOIDC, ClientID: "a", ClientSecret: "b"},
		"badIssuer": {Name: "corp", Kind: idp.KindOIDC, Issuer: "id.example", ClientID: "a", ClientSecret: "b"},
		"noSecret":  {Name: "corp", Kind: idp.KindOIDC, Issuer: "https://id.example", ClientID: "a"},
		"badKind":   {Name: "corp", Kind: "saml", Issuer: "https://id.example", ClientID: "a", ClientSecret: "b"},
	} {
		if _, err := idp.New([]idp.Provider{p}, nil, idp.Options{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := idp.Provider{Name: "github", Kind: idp.KindGitHub, ClientID: "a", ClientSecret: "b"}
	if _, err := idp.New([]idp.Provider{ok, ok}, nil, idp.Options{}); err == nil {
		t.Error("a provider configured twice was accepted")
	}
	if f, err := idp.New([]idp.Provider{ok}, nil, idp.Options{}); err != nil || len(f.Providers()) != 1 {
		t.Errorf("github alone: %v", err)
	}
}
