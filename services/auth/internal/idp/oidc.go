package idp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// oidcConn is an OpenID Connect provider. Discovery runs at the first
// sign-in and is kept once it succeeds, so that the service starts while
// a provider is down.
type oidcConn struct {
	p    Provider
	mu   sync.Mutex
	prov *oidc.Provider
}

func newOIDC(p Provider) *oidcConn { return &oidcConn{p: p} }

func (c *oidcConn) provider(ctx context.Context) (*oidc.Provider, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prov != nil {
		return c.prov, nil
	}
	p, err := oidc.NewProvider(ctx, c.p.Issuer)
	if err != nil {
		return nil, unavailable(fmt.Errorf("discovery of %s: %w", c.p.Issuer, err))
	}
	c.prov = p
	return p, nil
}

func (c *oidcConn) config(p *oidc.Provider, redirect string) *oauth2.Config {
	scopes := []string{oidc.ScopeOpenID, "email", "profile"}
	for _, s := range c.p.Scopes {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	return &oauth2.Config{ClientID: c.p.ClientID, ClientSecret: c.p.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: redirect, Scopes: scopes}
}

func (c *oidcConn) authURL(ctx context.Context, redirect, state, nonce, verifier string) (string, error) {
	p, err := c.provider(ctx)
	if err != nil {
		return "", err
	}
	return c.config(p, redirect).AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), nil
}

// idClaims are the ID token's claims this service reads.
type idClaims struct {
	Email         string   `json:"email"`
	EmailVerified any      `json:"email_verified"` // a boolean, or "true" from some providers
	Name          string   `json:"name"`
	AMR           []string `json:"amr"`
}

func verifiedFlag(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		b, _ := strconv.ParseBool(v)
		return b
	}
	return false
}

// exchange redeems the code (with the PKCE verifier) and verifies the ID
// token: signature by a key of the provider's key set, issuer, audience
// (this client), expiry and the flow's nonce.
func (c *oidcConn) exchange(ctx context.Context, redirect, code, verifier, nonce string) (account.ExternalIdentity, error) {
	p, err := c.provider(ctx)
	if err != nil {
		return account.ExternalIdentity{}, err
	}
	cfg := c.config(p, redirect)
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return account.ExternalIdentity{}, exchangeError(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return account.ExternalIdentity{}, tokenInvalid(errors.New("the token response has no id_token"))
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: c.p.ClientID}).Verify(ctx, raw)
	if err != nil {
		return account.ExternalIdentity{}, tokenInvalid(err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return account.ExternalIdentity{}, tokenInvalid(errors.New("the ID token's nonce is not this flow's"))
	}
	var cl idClaims
	if err := idt.Claims(&cl); err != nil {
		return account.ExternalIdentity{}, tokenInvalid(err)
	}
	ext := account.ExternalIdentity{Issuer: idt.Issuer, Subject: idt.Subject, Email: cl.Email,
		EmailVerified: verifiedFlag(cl.EmailVerified), FullName: cl.Name}
	for _, v := range cl.AMR {
		if slices.Contains(c.p.MFAValues, v) {
			ext.MFA = true
		}
	}
	if ext.Email == "" && p.UserInfoEndpoint() != "" {
		// Some providers put the address in userinfo only.
		ui, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok))
		if err != nil {
			return account.ExternalIdentity{}, unavailable(fmt.Errorf("userinfo: %w", err))
		}
		if ui.Subject == idt.Subject {
			ext.Email, ext.EmailVerified = ui.Email, ui.EmailVerified
			var more struct {
				Name string `json:"name"`
			}
			if ext.FullName == "" && ui.Claims(&more) == nil {
				ext.FullName = more.Name
			}
		}
	}
	return ext, nil
}

// exchangeError tells a refused code (the provider answered with an OAuth2
// error) from a provider that could not be reached.
func exchangeError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return codeRejected(err)
	}
	return unavailable(err)
}
