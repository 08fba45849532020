// Package idp signs people in with identity providers: OpenID Connect
// providers found by discovery (Keycloak, Microsoft Entra ID, Google,
// Authentik, GitLab...) and GitHub (OAuth2 and its API). It runs the
// authorization code flow with state, nonce and PKCE, keeps each flow's
// secrets as a single-use token, verifies what the provider answers, and
// hands the account package the identity the provider asserted. It knows
// nothing of HTTP routes or sessions.
package idp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"golang.org/x/oauth2"
)

// Kinds of provider.
const (
	KindOIDC   = "oidc"
	KindGitHub = "github"
)

// Purposes of a flow.
const (
	PurposeSignIn = "signin" // open a session
	PurposeLink   = "link"   // link the identity to the signed-in user
)

// tokenPurpose is the purpose of a flow's token in the account token store.
const tokenPurpose = "idp"

// Provider is one configured identity provider.
type Provider struct {
	Name         string // in URLs: /signin/oidc/<Name>
	DisplayName  string // on the console's button
	Kind         string // KindOIDC or KindGitHub
	Issuer       string // OIDC: the issuer URL (discovery); GitHub: the web URL (https://github.com)
	APIURL       string // GitHub only: https://api.github.com
	ClientID     string
	ClientSecret string
	Scopes       []string // beyond openid (OIDC) or the default ones
	// MFAValues are the `amr` values that count as a second factor.
	MFAValues []string
	Policy    account.ProviderPolicy
}

// Info is what the console shows of a provider.
type Info struct {
	Name        string `json:"name"`
	DisplayName string `json:"displayName"`
	Kind        string `json:"kind"`
}

// DefaultMFAValues are RFC 8176's `amr` values that mean more than one
// factor, or a factor that is a possession proven with a key.
var DefaultMFAValues = []string{"mfa", "otp", "hwk", "swk", "sc", "fido"}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// ValidName reports whether name can name a provider (lower-case letters,
// digits and dashes, at most 32).
func ValidName(name string) bool { return nameRE.MatchString(name) }

// connector is one provider's protocol.
type connector interface {
	authURL(ctx context.Context, redirect, state, nonce, verifier string) (string, error)
	exchange(ctx context.Context, redirect, code, verifier, nonce string) (account.ExternalIdentity, error)
}

// Flow runs sign-ins with the configured providers.
type Flow struct {
	providers map[string]*provider
	order     []string
	tokens    account.TokenStore
	base      string // public URL of the gateway; callbacks are base + /signin/oidc/<name>/callback
	ttl       time.Duration
	client    *http.Client
	finished  func(ctx context.Context, slot string)
	now       func() time.Time
}

type provider struct {
	Provider
	conn connector
}

// Options configure a Flow.
type Options struct {
	PublicURL string        // the gateway's public address
	TTL       time.Duration // how long a flow may take at the provider (default 10m)
	Client    *http.Client  // for the provider's endpoints (default: 15s timeout)
	// Finished is told the slot a flow's state kept (Begin's slot) once
	// its callback took the state; nil: slots are not given back.
	Finished func(ctx context.Context, slot string)
}

// New returns a Flow over providers; tokens keeps each flow's secrets.
func New(providers []Provider, tokens account.TokenStore, o Options) (*Flow, error) {
	if o.TTL <= 0 {
		o.TTL = 10 * time.Minute
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 15 * time.Second}
	}
	f := &Flow{providers: map[string]*provider{}, tokens: tokens, base: strings.TrimRight(o.PublicURL, "/"),
		ttl: o.TTL, client: o.Client, finished: o.Finished, now: func() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }}
	for _, p := range providers {
		if err := p.check(); err != nil {
			return nil, err
		}
		if _, dup := f.providers[p.Name]; dup {
			return nil, fmt.Errorf("identity provider %q is configured twice", p.Name)
		}
		if len(p.MFAValues) == 0 {
			p.MFAValues = DefaultMFAValues
		}
		var conn connector
		switch p.Kind {
		case KindGitHub:
			conn = newGitHub(p)
		default:
			conn = newOIDC(p)
		}
		f.providers[p.Name] = &provider{Provider: p, conn: conn}
		f.order = append(f.order, p.Name)
	}
	return f, nil
}

func (p Provider) check() error {
	if !ValidName(p.Name) {
		return fmt.Errorf("identity provider name %q: use 1 to 32 lower-case letters, digits or dashes", p.Name)
	}
	if p.Kind != KindOIDC && p.Kind != KindGitHub {
		return fmt.Errorf("identity provider %q: kind must be %s or %s", p.Name, KindOIDC, KindGitHub)
	}
	for _, u := range []string{p.Issuer, p.APIURL} {
		if u == "" && p.Kind == KindOIDC {
			continue
		}
		if v, err := url.Parse(u); u != "" && (err != nil || (v.Scheme != "https" && v.Scheme != "http") || v.Host == "") {
			return fmt.Errorf("identity provider %q: %q is not an absolute http(s) URL", p.Name, u)
		}
	}
	if p.Kind == KindOIDC && p.Issuer == "" {
		return fmt.Errorf("identity provider %q: the issuer URL is required", p.Name)
	}
	if p.ClientID == "" || p.ClientSecret == "" {
		return fmt.Errorf("identity provider %q: the client id and secret are required", p.Name)
	}
	return nil
}

// Providers lists the configured providers in configuration order.
func (f *Flow) Providers() []Info {
	out := make([]Info, 0, len(f.order))
	for _, n := range f.order {
		p := f.providers[n]
		out = append(out, Info{Name: p.Name, DisplayName: p.DisplayName, Kind: p.Kind})
	}
	return out
}

// Policy returns the sign-up policy of a provider.
func (f *Flow) Policy(name string) (account.ProviderPolicy, bool) {
	p, ok := f.providers[name]
	if !ok {
		return account.ProviderPolicy{}, false
	}
	return p.Policy, true
}

// CallbackURL is where the provider sends the browser back.
func (f *Flow) CallbackURL(name string) string {
	return f.base + "/signin/oidc/" + name + "/callback"
}

// TTL is how long a flow may take at the provider (the state cookie's
// lifetime).
func (f *Flow) TTL() time.Duration { return f.ttl }

// flowData is what a flow keeps server-side, under the hash of its state.
type flowData struct {
	Provider string `json:"provider"`
	Purpose  string `json:"purpose"`
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"`
}

// Begun is a flow that started: send the browser to URL, and bind State to
// it (a cookie) until it comes back.
type Begun struct {
	URL       string
	State     string
	ExpiresAt time.Time
}

func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Known reports whether a provider of this name is configured.
func (f *Flow) Known(name string) bool {
	_, ok := f.providers[name]
	return ok
}

// Begin starts a flow with provider name; userID is the signed-in user for
// PurposeLink. slot (may be empty) is kept with the flow's state and handed
// to Options.Finished when the callback takes it.
func (f *Flow) Begin(ctx context.Context, name, purpose, userID, slot string) (Begun, error) {
	p, ok := f.providers[name]
	if !ok {
		return Begun{}, errUnknownProvider
	}
	if purpose == PurposeLink && userID == "" {
		return Begun{}, errors.New("idp: a link needs the signed-in user")
	}
	d := flowData{Provider: name, Purpose: purpose, Nonce: random(), Verifier: oauth2.GenerateVerifier()}
	state := random()
	u, err := p.conn.authURL(f.ctx(ctx), f.CallbackURL(name), state, d.Nonce, d.Verifier)
	if err != nil {
		return Begun{}, err
	}
	data, err := json.Marshal(d)
	if err != nil {
		return Begun{}, err
	}
	t := f.now()
	exp := t.Add(f.ttl)
	if err := f.tokens.Create(ctx, account.Token{ID: account.HashSecret(state), Purpose: tokenPurpose, UserID: userID,
		CreatedAt: t, ExpiresAt: exp, Data: data, Slot: slot}); err != nil {
		return Begun{}, err
	}
	return Begun{URL: u, State: state, ExpiresAt: exp}, nil
}

// Callback is what the provider sent back in the query string.
type Callback struct {
	State            string
	Code             string
	Error            string
	ErrorDescription string
}

// Result is a finished flow.
type Result struct {
	Identity account.ExternalIdentity
	Policy   account.ProviderPolicy
	Purpose  string
	UserID   string // PurposeLink: who began it
}

// Finish ends a flow: the state must be the one bound to this browser
// (boundState, from its cookie) and still pending (it is spent here,
// whatever happens next), then the code is exchanged and the provider's
// answer verified. Refusals are *Error; the Result's Purpose is set as
// soon as the state is known, also with an error.
func (f *Flow) Finish(ctx context.Context, name, boundState string, cb Callback) (Result, error) {
	p, ok := f.providers[name]
	if !ok {
		return Result{}, errUnknownProvider
	}
	if cb.State == "" || boundState == "" || subtle.ConstantTimeCompare([]byte(cb.State), []byte(boundState)) != 1 {
		return Result{}, errUnbound
	}
	tok, err := f.tokens.Take(ctx, account.HashSecret(cb.State), tokenPurpose, f.now())
	if errors.Is(err, account.ErrInvalidToken) {
		return Result{}, errState
	}
	if err != nil {
		return Result{}, err
	}
	if tok.Slot != "" && f.finished != nil { // no longer pending
		f.finished(ctx, tok.Slot)
	}
	var d flowData
	if err := json.Unmarshal(tok.Data, &d); err != nil || d.Provider != name {
		return Result{}, errState
	}
	res := Result{Policy: p.Policy, Purpose: d.Purpose, UserID: tok.UserID}
	if cb.Error != "" {
		return res, providerRefused(cb.Error, cb.ErrorDescription)
	}
	if cb.Code == "" {
		return res, errNoCode
	}
	ext, err := p.conn.exchange(f.ctx(ctx), f.CallbackURL(name), cb.Code, d.Verifier, d.Nonce)
	if err != nil {
		return res, err
	}
	ext.Provider = name
	res.Identity = ext
	return res, nil
}

// ctx makes the providers' libraries use the Flow's HTTP client.
func (f *Flow) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, f.client)
}
