package identity

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// fuzzKey is fixed so the seed corpus holds tokens this key really signed.
var fuzzKey = ed25519.NewKeyFromSeed([]byte("acme-identity-fuzz-seed-32-bytes"))

// FuzzVerify feeds arbitrary strings to a service's verifier: it must never
// panic, and it must accept nothing but a token signed with the key, for its
// audience, by the gateway's issuer, with a known role. Every accepted token
// is re-checked against those rules, so a parser accepting a forgery fails.
func FuzzVerify(f *testing.F) {
	s := NewSigner(fuzzKey, time.Hour)
	good, _ := s.Sign(Claims{Role: RoleAdmin, SessionID: "0123456789abcdef0123456789abcdef", RegisteredClaims: registered("u1")}, "auth")
	f.Add(good)
	other, _ := s.Sign(Claims{Role: RoleUser}, "files")
	f.Add(other)
	f.Add("")
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJhdWQiOiJhdXRoIn0.")
	f.Add(strings.Repeat("A", 5000))
	parts := strings.Split(good, ".")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + parts[1] + "." + parts[2])
	v := NewVerifier(fuzzKey.Public().(ed25519.PublicKey), "auth")
	f.Fuzz(func(t *testing.T, token string) {
		c, err := v.Verify(token)
		if err != nil {
			if c != nil {
				t.Fatal("claims returned with an error")
			}
			return
		}
		if c.Issuer != Issuer {
			t.Fatalf("accepted issuer %q", c.Issuer)
		}
		if len(c.Audience) == 0 || !contains(c.Audience, "auth") {
			t.Fatalf("accepted audience %v", c.Audience)
		}
		if c.ExpiresAt == nil {
			t.Fatal("accepted a token without expiry")
		}
		if c.Subject != "" && c.Role != RoleUser && c.Role != RoleAdmin {
			t.Fatalf("accepted role %q", c.Role)
		}
		// It verified, so its signature is the key's: changing any
		// character of the signature must make it fail.
		i := strings.LastIndexByte(token, '.')
		if i < 0 || i == len(token)-1 {
			t.Fatalf("accepted a token without signature: %q", token)
		}
		sig := []byte(token)
		j := i + 1 + (len(token)-i-1)/2
		sig[j] = flip(sig[j])
		if _, err := v.Verify(string(sig)); err == nil && string(sig) != token {
			t.Fatalf("a token with a changed signature still verifies: %q", sig)
		}
	})
}

// FuzzSignVerifyRoundTrip signs arbitrary claims and checks they come back
// unchanged, and that the token is refused for another audience.
func FuzzSignVerifyRoundTrip(f *testing.F) {
	f.Add("u1", RoleUser, "0123456789abcdef", "127.0.0.1")
	f.Add("", "", "", "")
	f.Add("ünï\x00code", RoleAdmin, "\"}", "::1")
	s := NewSigner(fuzzKey, time.Minute)
	pub := fuzzKey.Public().(ed25519.PublicKey)
	auth, files := NewVerifier(pub, "auth"), NewVerifier(pub, "files")
	f.Fuzz(func(t *testing.T, sub, role, sid, ip string) {
		tok, err := s.Sign(Claims{Role: role, SessionID: sid, ClientIP: ip, RegisteredClaims: registered(sub)}, "auth")
		if err != nil {
			t.Fatal(err)
		}
		c, err := auth.Verify(tok)
		validRole := sub == "" || role == RoleUser || role == RoleAdmin
		if !validRole {
			if err == nil {
				t.Fatalf("role %q accepted", role)
			}
			return
		}
		if len(tok) > 4096 {
			return // refused by length, by design
		}
		if err != nil {
			t.Fatalf("own token refused: %v", err)
		}
		if c.Subject != sub || c.Role != role || c.SessionID != sid || c.ClientIP != ip {
			if !validUTF8All(sub, role, sid, ip) {
				return // JSON replaces invalid UTF-8 with U+FFFD
			}
			t.Fatalf("claims changed: %+v", c)
		}
		if _, err := files.Verify(tok); err == nil {
			t.Fatal("token for auth accepted by files")
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func flip(b byte) byte {
	if b == 'A' {
		return 'B'
	}
	return 'A'
}

func registered(sub string) jwt.RegisteredClaims { return jwt.RegisteredClaims{Subject: sub} }

func validUTF8All(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}
