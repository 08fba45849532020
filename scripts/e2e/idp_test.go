package e2e

// Sign-in with an OpenID Connect provider through the gateway, by API and
// in Chromium: the console's button, the provider's own login page filled
// in, and back in the console signed in. The provider is the test OpenID Provider of
// services/auth/internal/idp/idptest, run as a process (testop).

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/scripts/stack"
)

// startTestOP builds and starts testop for one client and user; it returns
// the issuer.
func startTestOP(t *testing.T, redirect, secret, user, password, email string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "testop")
	build := exec.Command("go", "build", "-o", bin, "./internal/idp/idptest/testop")
	build.Dir = filepath.Join(root, "services", "auth")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build testop: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-redirect", redirect, "-client", "platform", "-secret", secret,
		"-user", user, "-password", password, "-email", email, "-name", "Ada")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	issuer := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			issuer <- strings.TrimSpace(s.Text())
		}
		close(issuer)
	}()
	select {
	case iss, ok := <-issuer:
		if !ok || !strings.HasPrefix(iss, "http://") {
			t.Fatalf("testop did not print its issuer (%q)", iss)
		}
		return iss
	case <-time.After(time.Minute):
		t.Fatal("testop did not start within a minute")
	}
	return ""
}

// providerSignIn signs in at the test OpenID Provider with c, from the
// gateway's /signin/oidc/corp, and returns where the gateway sent the
// browser back (the console's fragment: page and query).
func providerSignIn(t *testing.T, c *client, issuer, user, password string) (string, url.Values) {
	t.Helper()
	gw, _ := url.Parse(c.base)
	c.http.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		if r.URL.Host == gw.Host && strings.HasPrefix(r.URL.Path, "/console") {
			return http.ErrUseLastResponse // the console is the browser's business
		}
		return nil
	}
	page, err := c.http.Get(c.base + "/signin/oidc/corp")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	id := page.Request.URL.Query().Get("authRequestID")
	if page.StatusCode != 200 || id == "" {
		t.Fatalf("not the provider's login page: %s %s", page.Status, page.Request.URL)
	}
	resp, err := c.http.PostForm(issuer+"/login/username", url.Values{"id": {id}, "username": {user}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || loc.Path != "/console/" {
		t.Fatalf("not sent back to the console: %s %q", resp.Status, resp.Header.Get("Location"))
	}
	path, query, _ := strings.Cut(loc.Fragment, "?")
	q, _ := url.ParseQuery(query)
	return path, q
}

// TestProviderSignIn: sign-in with an OpenID Connect provider through the
// gateway. With a client checked against the OpenAPI document: the
// providers, the redirect, the provider's login, the callback, the linked
// identities, a link begun, the last way in kept, the administrator's view,
// invitation and removal. Then in Chromium: the sign-in page offers the
// provider; its button leads to the provider's login page, and the
// provider's answer opens a session; a forged answer is a sentence.
func TestProviderSignIn(t *testing.T) {
	artifacts := browserArtifacts(t)
	addr, err := embedded.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	base := "http://127.0.0.1:" + port
	const secret, user, pw, email = "testop-client-secret", "ada", "ada-password", "ada@corp.example"
	issuer := startTestOP(t, base+"/signin/oidc/corp/callback", secret, user, pw, email)
	p, sec, _ := platformWith(t, map[string]string{
		"AUTH_PUBLIC_URL":                base,
		"AUTH_OIDC_PROVIDERS":            "corp",
		"AUTH_OIDC_CORP_ISSUER":          issuer,
		"AUTH_OIDC_CORP_CLIENT_ID":       "platform",
		"AUTH_OIDC_CORP_CLIENT_SECRET":   secret,
		"AUTH_OIDC_CORP_DISPLAY_NAME":    "Corp SSO",
		"AUTH_OIDC_CORP_SIGNUP":          "true",
		"AUTH_OIDC_CORP_ALLOWED_DOMAINS": "corp.example",
	}, stack.Options{GatewayAddr: addr})
	if p.GatewayURL != base {
		t.Fatalf("the gateway is at %s, want %s", p.GatewayURL, base)
	}

	t.Run("api", func(t *testing.T) {
		ada := newClient(t, base)
		list := ada.mustStatus(200, "GET", "/signin/oidc", nil)
		if ps, _ := list["providers"].([]any); len(ps) != 1 || ps[0].(map[string]any)["displayName"] != "Corp SSO" {
			t.Fatalf("providers: %v", list)
		}
		if page, q := providerSignIn(t, ada, issuer, user, pw); page != "/profile" || len(q) != 0 {
			t.Fatalf("back at %s?%s, want the profile", page, q.Encode())
		}
		me := ada.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)
		if me["email"] != email || me["emailVerified"] != true {
			t.Fatalf("signed up as %v", me)
		}
		ids := ada.mustStatus(200, "GET", "/me/identities", nil)["identities"].([]any)
		if len(ids) != 1 {
			t.Fatalf("identities: %v", ids)
		}
		id := ids[0].(map[string]any)["id"].(string)
		// No password, no passkey: the identity is the only way in.
		ada.mustStatus(409, "DELETE", "/me/identities/"+id, nil)
		if u, _ := ada.mustStatus(200, "POST", "/me/identities/corp/link", nil)["url"].(string); !strings.HasPrefix(u, issuer+"/") {
			t.Fatalf("link url %q", u)
		}
		ada.mustStatus(404, "POST", "/me/identities/nope/link", nil)

		admin := signIn(t, base, sec.AdminEmail, sec.AdminPassword)
		uid := me["id"].(string)
		if got := admin.mustStatus(200, "GET", "/users/"+uid+"/identities", nil)["identities"].([]any); len(got) != 1 {
			t.Fatalf("admin view: %v", got)
		}
		inv := admin.mustStatus(201, "POST", "/users/"+uid+"/identities", map[string]string{"provider": "corp"})["identity"].(map[string]any)
		admin.mustStatus(200, "DELETE", "/users/"+uid+"/identities/"+inv["id"].(string), nil)
		admin.mustStatus(404, "DELETE", "/users/"+uid+"/identities/"+inv["id"].(string), nil)

		// An answer this client did not ask for.
		st, _, h := ada.do("GET", "/signin/oidc/corp/callback?state=forged&code=x", nil)
		if st != http.StatusFound || !strings.HasSuffix(h.Get("Location"), "/console/#/signin?error=invalid_state") {
			t.Fatalf("forged callback: %d %q", st, h.Get("Location"))
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := startBrowser(ctx, t, artifacts)
	pg := b.newTab("provider", 1280, 900)
	b.step("sign in with the provider", pg, func() {
		pg.goTo(base + "/console/#/signin")
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.shot("60-provider-button")
		pg.click(doc.role("link", "Sign in with Corp SSO"))
		// The provider's own page.
		pg.waitFor(doc.label("Username:"))
		pg.fill(doc.label("Username:"), user)
		pg.fill(doc.label("Password:"), pw)
		pg.shot("61-provider-login")
		pg.click(doc.role("button", "Login"))
		pg.waitFor(doc.role("h1", "Profile"))
		if got := pg.value(doc.label("E-mail")); got != email {
			t.Fatalf("signed in with e-mail %q, want %q", got, email)
		}
		pg.waitFor(doc.role("button", "Unlink"))
		pg.shot("62-provider-signed-in")
	})
	b.step("a refusal is a sentence", pg, func() {
		pg.click(doc.role("button", "Sign out"))
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.goTo(base + "/signin/oidc/corp/callback?state=forged&code=x")
		pg.waitFor(doc.role("alert", "The sign-in did not start in this browser, took too long or was already finished. Start again."))
	})
}
