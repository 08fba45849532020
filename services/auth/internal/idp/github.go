package idp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/acme/platform/services/auth/internal/account"
	"golang.org/x/oauth2"
)

// GitHub's public endpoints, the defaults of a github provider.
const (
	GitHubURL    = "https://github.com"
	GitHubAPIURL = "https://api.github.com"
)

// githubConn is GitHub: OAuth2 (not OpenID Connect), the person from
// GET /user and the verified address from GET /user/emails. The subject is
// GitHub's numeric user id (a login can be renamed and reused).
type githubConn struct {
	p   Provider
	cfg oauth2.Config
}

func newGitHub(p Provider) *githubConn {
	if p.Issuer == "" {
		p.Issuer = GitHubURL
	}
	if p.APIURL == "" {
		p.APIURL = GitHubAPIURL
	}
	p.Issuer, p.APIURL = strings.TrimRight(p.Issuer, "/"), strings.TrimRight(p.APIURL, "/")
	scopes := []string{"read:user", "user:email"}
	for _, s := range p.Scopes {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	return &githubConn{p: p, cfg: oauth2.Config{ClientID: p.ClientID, ClientSecret: p.ClientSecret, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: p.Issuer + "/login/oauth/authorize", TokenURL: p.Issuer + "/login/oauth/access_token",
			AuthStyle: oauth2.AuthStyleInParams}}}
}

func (c *githubConn) authURL(_ context.Context, redirect, state, _, verifier string) (string, error) {
	cfg := c.cfg
	cfg.RedirectURL = redirect
	return cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), nil
}

type githubUser struct {
	ID    int64  `json:"id"`
	Login string `json:"login"`
	Name  string `json:"name"`
}

type githubEmail struct {
	Email    string `json:"email"`
	Primary  bool   `json:"primary"`
	Verified bool   `json:"verified"`
}

func (c *githubConn) exchange(ctx context.Context, redirect, code, verifier, _ string) (account.ExternalIdentity, error) {
	cfg := c.cfg
	cfg.RedirectURL = redirect
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return account.ExternalIdentity{}, exchangeError(err)
	}
	client := oauth2.NewClient(ctx, oauth2.StaticTokenSource(tok))
	var u githubUser
	if err := c.get(ctx, client, "/user", &u); err != nil {
		return account.ExternalIdentity{}, err
	}
	if u.ID <= 0 {
		return account.ExternalIdentity{}, tokenInvalid(errors.New("GitHub's /user has no id"))
	}
	var emails []githubEmail
	if err := c.get(ctx, client, "/user/emails", &emails); err != nil {
		return account.ExternalIdentity{}, err
	}
	ext := account.ExternalIdentity{Issuer: c.p.Issuer, Subject: strconv.FormatInt(u.ID, 10), FullName: u.Name}
	if ext.FullName == "" {
		ext.FullName = u.Login
	}
	// The primary address, verified or not; an unverified one cannot
	// sign up (the account package refuses it).
	for _, e := range emails {
		if e.Primary {
			ext.Email, ext.EmailVerified = e.Email, e.Verified
		}
	}
	return ext, nil
}

// get reads one of GitHub's API resources as JSON (at most 1 MiB).
func (c *githubConn) get(ctx context.Context, client *http.Client, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.p.APIURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := client.Do(req)
	if err != nil {
		return unavailable(fmt.Errorf("GitHub %s: %w", path, err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return unavailable(fmt.Errorf("GitHub %s: %w", path, err))
	}
	if resp.StatusCode != http.StatusOK {
		return unavailable(fmt.Errorf("GitHub %s: %s", path, resp.Status))
	}
	if err := json.Unmarshal(body, into); err != nil {
		return tokenInvalid(fmt.Errorf("GitHub %s: %w", path, err))
	}
	return nil
}
