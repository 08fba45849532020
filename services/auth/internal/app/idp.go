package app

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/httpapi"
	"github.com/acme/platform/services/auth/internal/idp"
	"github.com/acme/platform/services/auth/internal/mongostore"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// ProviderKey is the <NAME> of a provider's settings: upper case, dashes
// as underscores.
func ProviderKey(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ProviderSettings are the settings of the OpenID Connect provider whose
// ProviderKey is key (`AUTH_OIDC_<key>_ISSUER`...).
func ProviderSettings(key string) config.Table {
	p := "OIDC_" + key + "_"
	return config.Table{
		{Key: p + "ISSUER", Doc: "the provider's issuer URL (its discovery document is `<issuer>/.well-known/openid-configuration`); required"},
		{Key: p + "CLIENT_ID", Doc: "this platform's client id at the provider; required"},
		{Key: p + "CLIENT_SECRET", File: true, Secret: true, Doc: "its client secret; required"},
		{Key: p + "DISPLAY_NAME", DefaultDoc: "the provider's name", Doc: "the name on the console's button"},
		{Key: p + "SCOPES", Kind: config.List, Doc: "scopes asked for besides `openid`, `email` and `profile`"},
		{Key: p + "SIGNUP", Kind: config.Bool, Default: "false", Doc: "a subject no user is linked to gets a new user (its address verified by the provider, in the allowed domains); false: only linked identities sign in"},
		{Key: p + "ALLOWED_DOMAINS", Kind: config.List, Doc: "e-mail domains that may sign up (empty: any)"},
		{Key: p + "MFA_AMR", Kind: config.List, Default: strings.Join(idp.DefaultMFAValues, ","), Doc: "values of the ID token's `amr` claim that count as a second factor (an account with TOTP is then not asked for its code)"},
	}
}

// IdentityProviders is the providers' configuration.
type IdentityProviders struct {
	Providers  []idp.Provider
	FlowTTL    time.Duration
	MaxPending int // flows begun and not finished per FlowTTL
}

// loadIdentityProviders reads GitHub's settings through r and each named
// OpenID Connect provider's through a reader of its own table (their names
// depend on the provider's). It returns the problems found.
func loadIdentityProviders(r *config.Reader, getenv config.Getenv) (IdentityProviders, []*config.Reader, []string) {
	out := IdentityProviders{FlowTTL: r.Duration("IDP_FLOW_TTL"), MaxPending: r.Int("IDP_MAX_PENDING")}
	var problems []string
	var readers []*config.Reader
	for _, name := range r.List("OIDC_PROVIDERS") {
		name = strings.TrimSpace(name)
		if !idp.ValidName(name) || name == idp.KindGitHub {
			problems = append(problems, fmt.Sprintf("AUTH_OIDC_PROVIDERS: %q is not a provider name (lower-case letters, digits, dashes; not github)", name))
			continue
		}
		key := ProviderKey(name)
		pr := config.New(Prefix, getenv, ProviderSettings(key))
		readers = append(readers, pr)
		p := "OIDC_" + key + "_"
		prov := idp.Provider{Name: name, Kind: idp.KindOIDC, Issuer: pr.String(p + "ISSUER"),
			ClientID: pr.String(p + "CLIENT_ID"), ClientSecret: pr.String(p + "CLIENT_SECRET"),
			DisplayName: pr.String(p + "DISPLAY_NAME"), Scopes: pr.List(p + "SCOPES"), MFAValues: pr.List(p + "MFA_AMR"),
			Policy: account.ProviderPolicy{SignUp: pr.Bool(p + "SIGNUP"), AllowedDomains: pr.List(p + "ALLOWED_DOMAINS")}}
		if prov.DisplayName == "" {
			prov.DisplayName = name
		}
		if err := pr.Err(); err != nil {
			problems = append(problems, err.Error())
		}
		out.Providers = append(out.Providers, prov)
	}
	id, secret := r.String("GITHUB_CLIENT_ID"), r.String("GITHUB_CLIENT_SECRET")
	gh := idp.Provider{Name: idp.KindGitHub, DisplayName: "GitHub", Kind: idp.KindGitHub, ClientID: id, ClientSecret: secret,
		Issuer: r.String("GITHUB_URL"), APIURL: r.String("GITHUB_API_URL"),
		Policy: account.ProviderPolicy{SignUp: r.Bool("GITHUB_SIGNUP"), AllowedDomains: r.List("GITHUB_ALLOWED_DOMAINS")}}
	switch {
	case id != "" && secret != "":
		out.Providers = append(out.Providers, gh)
	case id != "" || secret != "":
		problems = append(problems, "AUTH_GITHUB_CLIENT_ID and AUTH_GITHUB_CLIENT_SECRET are set together or not at all")
	}
	// The providers' own checks (URLs, required values).
	if _, err := idp.New(out.Providers, nil, idp.Options{}); err != nil {
		problems = append(problems, err.Error())
	}
	if u, err := url.Parse(r.String("PUBLIC_URL")); len(out.Providers) > 0 && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		problems = append(problems, "AUTH_PUBLIC_URL must be an absolute http(s) URL: the providers send the browser back to it")
	}
	return out, readers, problems
}

// newIdentityProviders builds the provider sign-in over svc: the flows'
// state in the account token store, the identities in their collection.
// It serves the routes with no provider configured too (an empty list of
// buttons).
func newIdentityProviders(cfg Config, svc *account.Service, db *mongo.Database, log *slog.Logger) (*httpapi.IdentityOptions, error) {
	ids := account.NewIdentities(svc, mongostore.NewIdentities(db))
	ids.SetLimits(account.FlowLimits{StartAddress: cfg.Passkeys.StartAddress,
		MaxPending: cfg.IdentityProviders.MaxPending, TTL: cfg.IdentityProviders.FlowTTL})
	flow, err := idp.New(cfg.IdentityProviders.Providers, mongostore.NewTokens(db), idp.Options{
		PublicURL: cfg.Mail.PublicURL, TTL: cfg.IdentityProviders.FlowTTL, Finished: ids.Finished})
	if err != nil {
		return nil, err
	}
	for _, p := range flow.Providers() {
		log.Info("identity provider", "name", p.Name, "kind", p.Kind, "callback", flow.CallbackURL(p.Name))
	}
	return &httpapi.IdentityOptions{Flow: flow, Identities: ids,
		PublicURL: cfg.Mail.PublicURL, Log: log}, nil
}
