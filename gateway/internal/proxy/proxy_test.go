package proxy

import (
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/golang-jwt/jwt/v5"
)

func TestTokenReuseOnlyForIdenticalClaims(t *testing.T) {
	pub, priv, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Signer: identity.NewSigner(priv, 30*time.Second), TokenTTL: 30 * time.Second})
	base := identity.Claims{Role: "user", SessionID: "s1", ClientIP: "10.0.0.1", RegisteredClaims: jwt.RegisteredClaims{Subject: "u1"}}
	first, _ := h.token(base, "files")
	again, _ := h.token(base, "files")
	if first != again {
		t.Fatal("identical claims were signed twice")
	}
	v := identity.NewVerifier(pub, "logs")
	for name, mutate := range map[string]func(*identity.Claims){
		"role":    func(c *identity.Claims) { c.Role = "admin" },
		"session": func(c *identity.Claims) { c.SessionID = "s2" },
		"address": func(c *identity.Claims) { c.ClientIP = "10.0.0.2" },
		"user":    func(c *identity.Claims) { c.Subject = "u2" },
	} {
		c := base
		mutate(&c)
		tok, _ := h.token(c, "files")
		if tok == first {
			t.Errorf("a change of %s reused the token", name)
		}
	}
	logsTok, _ := h.token(base, "logs")
	if logsTok == first {
		t.Fatal("another audience reused the token")
	}
	if c, err := v.Verify(logsTok); err != nil || c.Role != "user" {
		t.Fatalf("%v %v", c, err)
	}
}

func TestMatchRoutes(t *testing.T) {
	for path, want := range map[string]string{
		"/me": "auth", "/me/sessions": "auth", "/ms/me": "auth", "/signin": "auth", "/users/1": "auth",
		"/password/forgot": "auth", "/password/reset": "auth", "/email/verify": "auth", "/me/email/verification": "auth",
		"/upload/file": "files", "/images/x": "files", "/files": "files", "/log": "logs", "/log/log/1/APP": "logs",
		"/me/usage": "files", "/s/tok": "files", "/usage/u1": "files", "/files/x/links": "files", "/me/usage/x": "auth",
		"/uploads": "files", "/uploads/x+y": "files",
	} {
		r, ok := match(path)
		if !ok || r.Service != want {
			t.Errorf("%s: got %v %v, want %s", path, r.Service, ok, want)
		}
	}
	for _, path := range []string{"/", "/mee", "/signin/x", "/logs", "/ms/me/x", "/uploadsx", "/share", "/usages"} {
		if r, ok := match(path); ok {
			t.Errorf("%s matched %v", path, r)
		}
	}
}

func TestAPIScope(t *testing.T) {
	for _, c := range []struct{ service, method, want string }{
		{"files", "GET", "files:read"}, {"files", "HEAD", "files:read"}, {"files", "POST", "files:write"},
		{"files", "DELETE", "files:write"}, {"logs", "GET", "logs:read"}, {"logs", "POST", "logs:write"},
		{"auth", "GET", ""}, {"auth", "POST", ""},
	} {
		if got := APIScope(c.service, c.method); got != c.want {
			t.Errorf("APIScope(%s, %s) = %q, want %q", c.service, c.method, got, c.want)
		}
	}
}
