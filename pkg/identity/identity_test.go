package identity

import (
	"strings"
	"testing"
	"time"

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
