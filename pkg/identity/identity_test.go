package identity

import (
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"
)

func keys(t *testing.T) (string, string) {
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := EncodePublicKey(pub)
	b, _ := EncodePrivateKey(priv)
	return a, b
}

func TestKeysParseFromPEMAndOneLineEnvForm(t *testing.T) {
	pubPEM, privPEM := keys(t)
	for _, form := range []func(string) string{
		func(s string) string { return s },
		func(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", `\n`) },
	} {
		priv, err := ParsePrivateKey(form(privPEM))
		if err != nil {
			t.Fatal(err)
		}
		pub, err := ParsePublicKey(form(pubPEM))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := NewSigner(priv, time.Minute).Sign(Claims{Role: RoleUser, RegisteredClaims: jwt.RegisteredClaims{Subject: "u"}}, "auth")
		if err != nil {
			t.Fatal(err)
		}
		if c, err := NewVerifier(pub, "auth").Verify(tok); err != nil || c.UserID() != "u" {
			t.Fatalf("%v %v", c, err)
		}
	}
	if _, err := ParsePublicKey("not a key"); err == nil {
		t.Fatal("garbage accepted as a public key")
	}
}

func TestVerifyRefuses(t *testing.T) {
	pubPEM, privPEM := keys(t)
	priv, _ := ParsePrivateKey(privPEM)
	pub, _ := ParsePublicKey(pubPEM)
	v := NewVerifier(pub, "files")
	s := NewSigner(priv, time.Second)
	s.now = func() time.Time { return time.Now().Add(-time.Minute) }
	expired, _ := s.Sign(Claims{}, "files")
	badRole, _ := NewSigner(priv, time.Minute).Sign(Claims{Role: "root", RegisteredClaims: jwt.RegisteredClaims{Subject: "u"}}, "files")
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u", "aud": "files", "iss": Issuer, "exp": time.Now().Add(time.Minute).Unix()}).SignedString([]byte(pubPEM))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "u", "aud": "files", "iss": Issuer, "exp": time.Now().Add(time.Minute).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for name, tok := range map[string]string{"expired": expired, "badRole": badRole, "hs256": hs, "none": none, "empty": "", "garbage": "a.b.c"} {
		if _, err := v.Verify(tok); err == nil {
			t.Errorf("%s token accepted", name)
		}
	}
}

// Verify remembers the tokens it verified, but only as what they are: a
// remembered token expires on time, and a token differing from a
// remembered one in any byte (its signature, say) is checked afresh.
func TestVerifiedTokensExpireAndAreExact(t *testing.T) {
	pubPEM, privPEM := keys(t)
	priv, _ := ParsePrivateKey(privPEM)
	pub, _ := ParsePublicKey(pubPEM)
	v := NewVerifier(pub, "logs")
	now := time.Now()
	v.now = func() time.Time { return now }
	tok, err := NewSigner(priv, 10*time.Second).Sign(Claims{Role: RoleAdmin, RegisteredClaims: jwt.RegisteredClaims{Subject: "u1"}}, "logs")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		c, err := v.Verify(tok)
		if err != nil || c.Subject != "u1" || !c.IsAdmin() {
			t.Fatalf("valid token: %+v %v", c, err)
		}
		c.Role = RoleUser // callers get a copy
	}
	if c, _ := v.Verify(tok); !c.IsAdmin() {
		t.Fatal("a caller changed the remembered claims")
	}
	// The same claims, another signature (one character changed).
	i := len(tok) - 5
	sub := byte('A')
	if tok[i] == 'A' {
		sub = 'B'
	}
	if _, err := v.Verify(tok[:i] + string(sub) + tok[i+1:]); err == nil {
		t.Fatal("a token with a changed signature accepted")
	}
	now = now.Add(10*time.Second + leeway)
	if _, err := v.Verify(tok); err == nil {
		t.Fatal("a remembered token accepted after it expired")
	}
	if len(v.verified) != 0 {
		t.Fatalf("expired token still remembered: %d", len(v.verified))
	}
}

// The token a server passes may point into a request buffer it reuses for
// the next request (Fiber's c.Get does): what Verify remembers must not
// change with it, or the next request's token would find the claims of the
// previous one.
func TestVerifiedTokenKeysAreCopies(t *testing.T) {
	pubPEM, privPEM := keys(t)
	priv, _ := ParsePrivateKey(privPEM)
	pub, _ := ParsePublicKey(pubPEM)
	v := NewVerifier(pub, "auth")
	sign := func(sub string) string {
		tok, err := NewSigner(priv, time.Minute).Sign(Claims{Role: RoleUser, RegisteredClaims: jwt.RegisteredClaims{Subject: sub}}, "auth")
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	first, second := sign("user-1"), sign("user-2")
	if len(first) != len(second) {
		t.Skip("tokens of different lengths")
	}
	buf := []byte(first)
	if c, err := v.Verify(unsafe.String(&buf[0], len(buf))); err != nil || c.Subject != "user-1" {
		t.Fatalf("first: %+v %v", c, err)
	}
	copy(buf, second) // the buffer now holds the next request
	v.mu.Lock()
	c, ok := v.verified[first]
	v.mu.Unlock()
	if !ok || c.Subject != "user-1" {
		t.Fatal("the remembered token changed with the request buffer")
	}
	if c, err := v.Verify(unsafe.String(&buf[0], len(buf))); err != nil || c.Subject != "user-2" {
		t.Fatalf("second token read as %+v (%v), want user-2", c, err)
	}
	if c, err := v.Verify(first); err != nil || c.Subject != "user-1" {
		t.Fatalf("first again: %+v %v", c, err)
	}
}
