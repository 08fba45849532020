// Package devenv is what `make run` (scripts/devstack) starts, as a library
// so that tests start the same: the backing servers (NATS with JetStream in
// this process, the MongoDB-wire server, MinIO and Mailpit as children),
// each requiring a credential, and the four services against them.
//
// Every credential is generated on the first start and kept in
// DATA_DIR/dev-secrets.json (mode 0600, in DATA_DIR of mode 0700):
//
//   - NATS: the users and permissions of deploy/nats.conf, the compose
//     deployment's file (auth, files, logs, gateway, publisher), each with
//     a generated password; every service logs in as its own user, so only
//     auth may publish user deletions (on which files erases a user's
//     files) and no service may subscribe to what is not its own.
//   - MongoDB wire: FerretDB's SCRAM authentication with one user
//     (embedded.FerretDBAuth), whose login every service gets as
//     MONGO_USER and MONGO_PASSWORD.
//   - MinIO: generated root keys, the files service's S3 keys.
//   - Mailpit: its web UI and API behind basic authentication, and its
//     SMTP server behind a login (auth's AUTH_SMTP_USER and
//     AUTH_SMTP_PASSWORD): anonymous mail is refused (530). Its API
//     listens on MailpitAddr (127.0.0.1:8025) or, when something else
//     holds that address (another stack's Mailpit), on a free port, which
//     the output and the banner name; its SMTP port is always a free one.
//   - auth's AUTH_MFA_KEY, which seals the TOTP secrets stored.
package devenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/scripts/stack"
	"github.com/nats-io/nats-server/v2/server"
)

// SubjectPrefix is the services' NATS subject prefix: deploy/nats.conf's
// permissions name their subjects after it.
const SubjectPrefix = "acme"

// NATSUsers are deploy/nats.conf's users: one per service, and publisher
// for the organisation's applications that send log records.
var NATSUsers = []string{"auth", "files", "logs", "gateway", "publisher"}

// Config of a platform.
type Config struct {
	DataDir     string // default "data"
	GatewayAddr string // default 127.0.0.1:8080; a :0 port picks one
	// MailpitAddr is where Mailpit's UI and API should listen, default
	// 127.0.0.1:8025; a :0 port picks one, and so does a taken address.
	MailpitAddr string
	// Getenv reads ADMIN_EMAIL, ADMIN_PASSWORD (first start only),
	// MONGO_SYNCHRONOUS, and LOG_LEVEL, GATEWAY_PPROF, GODEBUG (handed to
	// every service). nil reads nothing.
	Getenv func(string) string
	Out    io.Writer // progress and the services' output
	Log    io.Writer // the MongoDB-wire server's output; nil is os.Stderr
}

// Secrets are a platform's generated secrets, DATA_DIR/dev-secrets.json.
type Secrets struct {
	stack.Secrets
	MinIOAccess string `json:"minioAccess"`
	MinIOSecret string `json:"minioSecret"`
	// MongoUser logs in to the MongoDB-wire server (authSource
	// embedded.FerretDBAuthSource).
	MongoUser     string `json:"mongoUser"`
	MongoPassword string `json:"mongoPassword"`
	// NATSPasswords by user name (NATSUsers).
	NATSPasswords map[string]string `json:"natsPasswords"`
	// Mailpit's web UI and API login.
	MailpitUser     string `json:"mailpitUser"`
	MailpitPassword string `json:"mailpitPassword"`
	// Mailpit's SMTP login, auth's AUTH_SMTP_USER and AUTH_SMTP_PASSWORD.
	MailpitSMTPUser     string `json:"mailpitSmtpUser"`
	MailpitSMTPPassword string `json:"mailpitSmtpPassword"`
	// MFAKey is auth's AUTH_MFA_KEY.
	MFAKey string `json:"mfaKey"`
}

// Servers are the running backing servers of a platform.
type Servers struct {
	NATS    *server.Server
	Mongo   *embedded.FerretDBProc
	MinIO   *embedded.MinIO
	Mailpit *embedded.Mailpit
	Secrets Secrets
	// SecretsFile is where Secrets are kept.
	SecretsFile string
	// NATSURL is the NATS server's URL, without a login.
	NATSURL string
	// MongoURL is the MongoDB-wire server's URL without the login (it
	// names the authSource).
	MongoURL string
	cfg      Config
}

func (c *Config) defaults() {
	if c.DataDir == "" {
		c.DataDir = "data"
	}
	if c.GatewayAddr == "" {
		c.GatewayAddr = "127.0.0.1:8080"
	}
	if c.MailpitAddr == "" {
		c.MailpitAddr = "127.0.0.1:8025"
	}
	if c.Getenv == nil {
		c.Getenv = func(string) string { return "" }
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
}

// Start loads (or creates) the secrets and starts the backing servers.
// Stop stops them.
func Start(ctx context.Context, cfg Config) (_ *Servers, err error) {
	cfg.defaults()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	// Everything under DATA_DIR (the SQLite files, MinIO's objects,
	// JetStream's store, the secrets) is this user's only.
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	s := &Servers{cfg: cfg, SecretsFile: filepath.Join(cfg.DataDir, "dev-secrets.json")}
	if s.Secrets, err = LoadSecrets(s.SecretsFile, cfg.Getenv); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	root, err := stack.Root()
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(cfg.Out, "starting NATS (JetStream) and the MongoDB-wire server (FerretDB on SQLite)...")
	s.NATS, err = embedded.NATSWithUsers(embedded.NATSUsersOptions{
		Config: filepath.Join(root, "deploy", "nats.conf"), Passwords: s.Secrets.NATSPasswords,
		Dir: filepath.Join(cfg.DataDir, "nats"), Host: "127.0.0.1",
	})
	if err != nil {
		return nil, err
	}
	s.NATSURL = s.NATS.ClientURL()
	// MONGO_SYNCHRONOUS=full makes SQLite fsync every commit (docs/configuration.md).
	s.Mongo, err = embedded.StartFerretDB(ctx, embedded.FerretDBOptions{
		Dir: filepath.Join(cfg.DataDir, "mongo"), Log: cfg.Log, Synchronous: cfg.Getenv("MONGO_SYNCHRONOUS"),
		Auth: &embedded.FerretDBAuth{User: s.Secrets.MongoUser, Password: s.Secrets.MongoPassword},
	})
	if err != nil && strings.Contains(err.Error(), "AuthenticationFailed") {
		mongoDir := filepath.Join(cfg.DataDir, "mongo")
		return nil, fmt.Errorf("%w\n(the MongoDB-wire server keeps the login created on the first start of %s: if %s was replaced since, restore it, or remove %s)",
			err, mongoDir, s.SecretsFile, mongoDir)
	}
	if err != nil {
		return nil, err
	}
	s.MongoURL = (&url.URL{Scheme: "mongodb", Host: s.Mongo.Addr, Path: "/",
		RawQuery: url.Values{"authSource": {embedded.FerretDBAuthSource}}.Encode()}).String()

	fmt.Fprintln(cfg.Out, "starting MinIO (if it is not built yet, the build from source takes a few minutes, once)...")
	s.MinIO, err = embedded.StartMinIO(ctx, embedded.MinIOOptions{
		Dir: filepath.Join(cfg.DataDir, "minio"), AccessKey: s.Secrets.MinIOAccess, SecretKey: s.Secrets.MinIOSecret, Log: cfg.Out,
	})
	if err != nil {
		return nil, err
	}
	// A local mail catcher: the auth service's mail (password reset,
	// address verification) is caught here instead of delivered.
	fmt.Fprintln(cfg.Out, "starting Mailpit, the mail catcher (built once from its module)...")
	mailpitAddr := cfg.MailpitAddr
	if _, port, err := net.SplitHostPort(mailpitAddr); err == nil && port == "0" {
		mailpitAddr = "" // a free port
	} else if !embedded.AddrFree(mailpitAddr) {
		fmt.Fprintf(cfg.Out, "%s is taken (another stack's Mailpit?): this Mailpit takes a free port, named in the banner\n", mailpitAddr)
		mailpitAddr = ""
	}
	o := embedded.MailpitOptions{HTTPAddr: mailpitAddr, Log: cfg.Out,
		UIUser: s.Secrets.MailpitUser, UIPassword: s.Secrets.MailpitPassword,
		SMTPUser: s.Secrets.MailpitSMTPUser, SMTPPassword: s.Secrets.MailpitSMTPPassword}
	s.Mailpit, err = embedded.StartMailpit(ctx, o)
	if errors.Is(err, embedded.ErrAddrTaken) && mailpitAddr != "" {
		// Taken between the look and the start: once more, on free ports.
		fmt.Fprintf(cfg.Out, "%v: this Mailpit takes a free port, named in the banner\n", err)
		o.HTTPAddr = ""
		s.Mailpit, err = embedded.StartMailpit(ctx, o)
	}
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Out, "Mailpit: API %s, SMTP %s:%d (with a login)\n", s.Mailpit.API, s.Mailpit.SMTPHost, s.Mailpit.SMTPPort)
	return s, nil
}

// StackServers are the servers as stack.Launch takes them, with the
// services' logins.
func (s *Servers) StackServers() stack.Servers {
	return stack.Servers{
		MongoURL: s.MongoURL, MongoDB: "acme", MongoUser: s.Secrets.MongoUser, MongoPassword: s.Secrets.MongoPassword,
		NATSURL: s.NATSURL, SubjectPrefix: SubjectPrefix, NATSPasswords: s.Secrets.NATSPasswords,
		S3Endpoint: s.MinIO.Endpoint, S3Access: s.Secrets.MinIOAccess, S3Secret: s.Secrets.MinIOSecret, S3Bucket: "acme-files",
	}
}

// Launch starts the four services (bins from stack.Build) against the
// servers.
func (s *Servers) Launch(bins map[string]string) (*stack.Platform, error) {
	env := map[string]string{
		"AUTH_COOKIE_SECURE": "false",
		"AUTH_SMTP_HOST":     s.Mailpit.SMTPHost, "AUTH_SMTP_PORT": strconv.Itoa(s.Mailpit.SMTPPort), "AUTH_SMTP_TLS": "none",
	}
	if _, port, err := net.SplitHostPort(s.cfg.GatewayAddr); err == nil && port != "0" {
		env["AUTH_PUBLIC_URL"] = "http://" + s.cfg.GatewayAddr
	}
	for _, k := range append([]string{"LOG_LEVEL", "GATEWAY_PPROF", "GODEBUG"}, providerVariables(s.cfg.Getenv)...) {
		if v := s.cfg.Getenv(k); v != "" {
			env[k] = v
		}
	}
	return stack.Launch(stack.Options{Bins: bins, GatewayAddr: s.cfg.GatewayAddr, Env: env, Out: s.cfg.Out,
		ServiceEnv: map[string]map[string]string{"auth": {"AUTH_MFA_KEY": s.Secrets.MFAKey,
			"AUTH_SMTP_USER": s.Mailpit.SMTPUser, "AUTH_SMTP_PASSWORD": s.Mailpit.SMTPPassword}}},
		s.StackServers(), s.Secrets.Secrets)
}

// Stop stops the servers that are running.
func (s *Servers) Stop() {
	if s.Mailpit != nil {
		s.Mailpit.Stop()
	}
	if s.MinIO != nil {
		s.MinIO.Stop()
	}
	if s.Mongo != nil {
		s.Mongo.Stop()
	}
	if s.NATS != nil {
		s.NATS.Shutdown()
		s.NATS.WaitForShutdown()
	}
}

// LoadSecrets reads path, generating what it lacks (all of it on the first
// start; a newer secret an older file does not hold), and writes it back
// (mode 0600) when it added any.
func LoadSecrets(path string, getenv func(string) string) (Secrets, error) {
	var p Secrets
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &p); err != nil {
			return p, fmt.Errorf("%s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
		email := getenv("ADMIN_EMAIL")
		if email == "" {
			email = "admin@acme.local"
		}
		if p.Secrets, err = stack.NewSecrets(email, getenv("ADMIN_PASSWORD")); err != nil {
			return p, err
		}
	default:
		return p, err
	}
	added := false
	fill := func(v *string, gen func() string) {
		if *v == "" {
			*v, added = gen(), true
		}
	}
	fill(&p.MinIOAccess, func() string { return "acme-" + stack.Secret(6) })
	fill(&p.MinIOSecret, func() string { return stack.Secret(24) })
	fill(&p.MongoUser, func() string { return "acme" })
	fill(&p.MongoPassword, func() string { return stack.Secret(24) })
	if p.NATSPasswords == nil {
		p.NATSPasswords = map[string]string{}
	}
	for _, u := range NATSUsers {
		pw := p.NATSPasswords[u]
		fill(&pw, func() string { return stack.Secret(24) })
		p.NATSPasswords[u] = pw
	}
	fill(&p.MailpitUser, func() string { return "acme" })
	fill(&p.MailpitPassword, func() string { return stack.Secret(18) })
	fill(&p.MailpitSMTPUser, func() string { return "acme-auth" })
	fill(&p.MailpitSMTPPassword, func() string { return stack.Secret(18) })
	fill(&p.MFAKey, func() string { return stack.Secret(32) })
	if err == nil && !added {
		return p, nil
	}
	out, _ := json.MarshalIndent(p, "", "  ")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return p, err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return p, err
	}
	return p, os.Rename(tmp, path)
}

// providerVariables are auth's identity-provider settings (docs/auth.md,
// "Sign in with an identity provider") and AUTH_PUBLIC_URL, which the
// environment of `make run` passes on: setting one provider's variables
// adds its button to the console's sign-in page.
func providerVariables(getenv func(string) string) []string {
	keys := []string{"AUTH_PUBLIC_URL", "AUTH_OIDC_PROVIDERS", "AUTH_IDP_FLOW_TTL",
		"AUTH_GITHUB_CLIENT_ID", "AUTH_GITHUB_CLIENT_SECRET", "AUTH_GITHUB_CLIENT_SECRET_FILE",
		"AUTH_GITHUB_SIGNUP", "AUTH_GITHUB_ALLOWED_DOMAINS", "AUTH_GITHUB_URL", "AUTH_GITHUB_API_URL"}
	for _, name := range strings.Split(getenv("AUTH_OIDC_PROVIDERS"), ",") {
		name = strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(name), "-", "_"))
		if name == "" {
			continue
		}
		for _, k := range []string{"ISSUER", "CLIENT_ID", "CLIENT_SECRET", "CLIENT_SECRET_FILE", "DISPLAY_NAME",
			"SCOPES", "SIGNUP", "ALLOWED_DOMAINS", "MFA_AMR"} {
			keys = append(keys, "AUTH_OIDC_"+name+"_"+k)
		}
	}
	return keys
}
