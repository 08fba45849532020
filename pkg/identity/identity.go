// Package identity is the contract between the gateway and the services: a
// short-lived token, signed by the gateway with an Ed25519 private key and
// verified by each service with the public key, that says who is calling.
//
// Services hold only the public key, so neither a compromised service nor a
// leaked service key file can mint identities. Every request the gateway
// forwards carries a token, also for anonymous callers (Subject empty), so a
// service can refuse anything that did not come through a gateway.
package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Header carries the token from the gateway to a service. The gateway removes
// any header of this name that a client sent.
const Header = "X-Acme-Identity"

// Issuer is the iss claim of every token.
const Issuer = "acme-gateway"

// Roles.
const (
	RoleUser  = "user"
	RoleAdmin = "admin"
)

// Claims are what a service learns about the caller.
type Claims struct {
	Role      string `json:"role,omitempty"`
	SessionID string `json:"sid,omitempty"` // public id of the session, never the secret
	ClientIP  string `json:"ip,omitempty"`
	jwt.RegisteredClaims
}

// UserID is the subject: the user's id, empty for anonymous callers.
func (c *Claims) UserID() string { return c.Subject }

// Authenticated reports whether the caller has a session.
func (c *Claims) Authenticated() bool { return c.Subject != "" }

// IsAdmin reports whether the caller is an administrator.
func (c *Claims) IsAdmin() bool { return c.Subject != "" && c.Role == RoleAdmin }

// Signer mints tokens; only the gateway has one.
type Signer struct {
	key ed25519.PrivateKey
	ttl time.Duration
	now func() time.Time
}

// NewSigner returns a Signer whose tokens live for ttl (seconds, not minutes).
func NewSigner(key ed25519.PrivateKey, ttl time.Duration) *Signer {
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	return &Signer{key: key, ttl: ttl, now: time.Now}
}

// Sign returns a token for the given audience (the target service name).
func (s *Signer) Sign(c Claims, audience string) (string, error) {
	now := s.now()
	c.Issuer = Issuer
	c.Audience = jwt.ClaimStrings{audience}
	c.IssuedAt = jwt.NewNumericDate(now)
	c.ExpiresAt = jwt.NewNumericDate(now.Add(s.ttl))
	return jwt.NewWithClaims(jwt.SigningMethodEdDSA, &c).SignedString(s.key)
}

// Verifier checks tokens for one audience.
//
// The gateway reuses a token for the same claims during the first half of
// its lifetime, so a service sees the same token many times; Verify keeps
// the claims of tokens it verified, keyed by the whole token, until they
// expire, and checks the signature of a token once (an Ed25519
// verification costs more than the rest of a small request).
type Verifier struct {
	key    ed25519.PublicKey
	parser *jwt.Parser
	now    func() time.Time

	mu       sync.Mutex
	verified map[string]Claims
}

// leeway is the clock skew allowed between the gateway and a service.
const leeway = 2 * time.Second

// maxVerified bounds the verified-token cache.
const maxVerified = 10000

// ErrInvalid is returned for any token that must not be trusted.
var ErrInvalid = errors.New("invalid identity token")

// NewVerifier returns a Verifier accepting only tokens for audience.
func NewVerifier(key ed25519.PublicKey, audience string) *Verifier {
	v := &Verifier{key: key, now: time.Now, verified: map[string]Claims{}}
	v.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithAudience(audience),
		jwt.WithIssuer(Issuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(func() time.Time { return v.now() }),
	)
	return v
}

// Verify parses and checks a token.
func (v *Verifier) Verify(token string) (*Claims, error) {
	if token == "" || len(token) > 4096 {
		return nil, ErrInvalid
	}
	now := v.now()
	v.mu.Lock()
	c, ok := v.verified[token]
	v.mu.Unlock()
	if ok {
		if now.Before(c.ExpiresAt.Add(leeway)) {
			return &c, nil // a copy: callers cannot change the cached claims
		}
		v.mu.Lock()
		delete(v.verified, token)
		v.mu.Unlock()
	}
	c = Claims{}
	_, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.key, nil })
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if c.Subject != "" && c.Role != RoleUser && c.Role != RoleAdmin {
		return nil, fmt.Errorf("%w: unknown role", ErrInvalid)
	}
	v.mu.Lock()
	if len(v.verified) >= maxVerified {
		for k, x := range v.verified {
			if !now.Before(x.ExpiresAt.Add(leeway)) {
				delete(v.verified, k)
			}
		}
		if len(v.verified) >= maxVerified {
			clear(v.verified)
		}
	}
	// A copy: token may point into a request buffer the server reuses
	// (Fiber's c.Get), which would change the key under the map.
	v.verified[strings.Clone(token)] = c
	v.mu.Unlock()
	return &c, nil
}

// GenerateKey makes a new Ed25519 key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// EncodePrivateKey returns the key as PKCS#8 PEM.
func EncodePrivateKey(k ed25519.PrivateKey) (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// EncodePublicKey returns the key as PKIX PEM.
func EncodePublicKey(k ed25519.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// ParsePrivateKey accepts PKCS#8 PEM or a base64 (std or URL) 32-byte seed.
func ParsePrivateKey(s string) (ed25519.PrivateKey, error) {
	s = unescapePEM(s)
	if b, _ := pem.Decode([]byte(s)); b != nil {
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("identity private key: %w", err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, errors.New("identity private key: not Ed25519")
		}
		return ek, nil
	}
	seed, err := decodeB64(s)
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, errors.New("identity private key: want PKCS#8 PEM or a base64 32-byte seed")
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// ParsePublicKey accepts PKIX PEM or base64 of the 32 raw bytes.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	s = unescapePEM(s)
	if b, _ := pem.Decode([]byte(s)); b != nil {
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("identity public key: %w", err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, errors.New("identity public key: not Ed25519")
		}
		return ek, nil
	}
	raw, err := decodeB64(s)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, errors.New("identity public key: want PKIX PEM or base64 of 32 bytes")
	}
	return ed25519.PublicKey(raw), nil
}

func decodeB64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// unescapePEM accepts PEM written on one line with literal \n, as env files
// often carry it.
func unescapePEM(s string) string {
	return strings.TrimSpace(strings.ReplaceAll(s, `\n`, "\n"))
}
