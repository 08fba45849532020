package app

import (
	"fmt"
	"math"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/idp"
	"github.com/acme/platform/services/auth/internal/mailer"
	"github.com/acme/platform/services/auth/internal/password"
)

// Prefix is the prefix of auth's own settings (AUTH_SESSION_TTL).
const Prefix = "AUTH"

// Settings is every setting auth reads besides the shared ones, each
// defined here once; LoadConfig reads through it and docs/configuration.md
// is generated from it.
var Settings = config.Table{
	{Key: "ADDR", Default: "127.0.0.1:8081", Doc: "listen address"},
	{Key: "MONGO_SELECT_TIMEOUT", Kind: config.Duration, Default: "5s", Doc: "how long a request waits for MongoDB before 503"},
	{Key: "SERVICE_CREDENTIALS", File: true, Secret: true, Doc: "comma-separated credentials accepted on `/ms/me`, besides `SERVICE_CREDENTIAL`; at least one of the two is required"},
	{Key: "COOKIE_SECURE", Kind: config.Bool, Default: "true", Doc: "`Secure` cookie attribute (`make run` over plain HTTP sets false)"},
	{Key: "ADMIN_EMAIL", Default: "admin@acme.local", Shared: true, Doc: "first administrator, created at start-up if no user has this e-mail"},
	{Key: "ADMIN_PASSWORD", Shared: true, File: true, Secret: true, DefaultDoc: "generated, printed once", Doc: "its password (8..1024 bytes)"},
	{Key: "ARGON2_MEMORY_KIB", Kind: config.Int, Default: strconv.Itoa(int(password.OWASP.MemoryKiB)), Doc: "argon2id memory (KiB)"},
	{Key: "ARGON2_TIME", Kind: config.Int, Default: strconv.Itoa(int(password.OWASP.Time)), Doc: "argon2id passes"},
	{Key: "ARGON2_THREADS", Kind: config.Int, Default: strconv.Itoa(int(password.OWASP.Threads)), Doc: "argon2id parallelism"},
	{Key: "HASH_CONCURRENCY", Kind: config.Int, Default: strconv.Itoa(runtime.NumCPU()), DefaultDoc: "number of CPUs", Doc: "hashes running at once"},
	{Key: "SESSION_TTL", Kind: config.Duration, Default: "168h", Doc: "absolute session lifetime (and cookie Max-Age)"},
	{Key: "SESSION_IDLE", Kind: config.Duration, Default: "24h", Doc: "idle timeout of a session"},
	{Key: "SESSION_TOUCH_INTERVAL", Kind: config.Duration, Default: "1m", Doc: "`lastSeenAt` is written at most this often per session"},
	{Key: "SESSION_SWEEP_INTERVAL", Kind: config.Duration, Default: "10m", Doc: "expired sessions are deleted every ½-1 of this"},
	{Key: "THROTTLE_ACCOUNT_MAX", Kind: config.Int, Default: "5", Doc: "sign-in attempts per e-mail per window that may fail; the next one locks (0 = off)"},
	{Key: "THROTTLE_ACCOUNT_WINDOW", Kind: config.Duration, Default: "15m", Doc: "window for the account count"},
	{Key: "THROTTLE_ADDRESS_MAX", Kind: config.Int, Default: "50", Doc: "sign-in attempts per client address per window that may fail; the next one locks (0 = off)"},
	{Key: "THROTTLE_ADDRESS_WINDOW", Kind: config.Duration, Default: "15m", Doc: "window for the address count"},
	{Key: "THROTTLE_LOCK", Kind: config.Duration, Default: "1m", Doc: "first lock; doubles with each further lock"},
	{Key: "THROTTLE_LOCK_MAX", Kind: config.Duration, Default: "1h", Doc: "longest lock"},
	{Key: "THROTTLE_FORGET", Kind: config.Duration, Default: "24h", Doc: "throttle state of a quiet key is deleted after this"},
	{Key: "EMAIL_THROTTLE_ACCOUNT_MAX", Kind: config.Int, Default: "5", Doc: "address changes and verification mails per account per window (0 = off)"},
	{Key: "EMAIL_THROTTLE_TARGET_MAX", Kind: config.Int, Default: "3", Doc: "address changes and verification mails per address written to, per window (0 = off)"},
	{Key: "EMAIL_THROTTLE_WINDOW", Kind: config.Duration, Default: "1h", Doc: "window of the two above; past a limit, 429 for the rest of it"},
	{Key: "REQUEST_TIMEOUT", Kind: config.Duration, Default: "30s", Doc: "deadline of one request (including waiting for a hash slot)"},
	{Key: "SHUTDOWN_TIMEOUT", Kind: config.Duration, Default: "10s", Doc: "graceful shutdown deadline"},
	{Key: "READ_TIMEOUT", Kind: config.Duration, Default: "60s", Doc: "longest time to receive one request (headers and body): stalled clients are cut off"},
	{Key: "IDLE_TIMEOUT", Kind: config.Duration, Default: "90s", Doc: "an idle keep-alive connection is closed after it"},
	{Key: "METRICS_INTERVAL", Kind: config.Duration, Default: "30s", Doc: "how often the sessions-active gauge is refreshed"},
	{Key: "USER_CACHE_TTL", Kind: config.Duration, Default: "30s", Doc: "how long a user read by `GET /me`, `/ms/me` or a sign-in is cached (writes evict it on every replica at once; `0` disables the cache)"},
	{Key: "USER_CACHE_SIZE", Kind: config.Int, Default: "10000", Doc: "most users and addresses cached per replica"},
	{Key: "AUDIT_APP", Default: "ACME-AUTH", Doc: "application of the audit trail's records (type `log`); `off` disables it"},
	{Key: "AUDIT_LINGER", Kind: config.Duration, Default: "100ms", Doc: "how long an audit record waits for others to be published with it (0 to 10s)"},
	{Key: "SMTP_HOST", DefaultDoc: "empty (mail off)", Doc: "SMTP server for reset and verification mail"},
	{Key: "SMTP_PORT", Kind: config.Int, Default: "587", Doc: "its port"},
	{Key: "SMTP_TLS", Default: mailer.StartTLS, Doc: "`starttls`, `tls` (from the first byte) or `none` (a local mail catcher only)"},
	{Key: "SMTP_USER", Doc: "SMTP AUTH user; with `SMTP_TLS=none` the login is sent (PLAIN) to a loopback host only (a local mail catcher such as `make run`'s Mailpit)"},
	{Key: "SMTP_PASSWORD", File: true, Secret: true, Doc: "SMTP AUTH password"},
	{Key: "SMTP_FROM", Default: "ACME Platform <no-reply@acme.local>", Doc: "sender of every mail"},
	{Key: "SMTP_TIMEOUT", Kind: config.Duration, Default: "30s", Doc: "one delivery"},
	{Key: "MAIL_TEMPLATES_DIR", Doc: "files (`reset.txt`, `reset.html`, `verify.*`, `email_changed.*`, `email_in_use.*`, `email_change_confirm.*`, `signin_code.*`, `signup_code.*`, `password_code.*`) replacing the built-in templates"},
	{Key: "MAIL_MAX_PENDING", Kind: config.Int, Default: "64", Doc: "deliveries in flight (more: 503 `busy`)"},
	{Key: "PUBLIC_URL", Default: "http://127.0.0.1:8080", Doc: "the gateway's public address, used in mailed links"},
	{Key: "RESET_TTL", Kind: config.Duration, Default: "30m", Doc: "life of a password reset link"},
	{Key: "VERIFY_TTL", Kind: config.Duration, Default: "48h", Doc: "life of an address verification link"},
	{Key: "RESET_THROTTLE_ACCOUNT_MAX", Kind: config.Int, Default: "3", Doc: "reset requests per e-mail per window"},
	{Key: "RESET_THROTTLE_ADDRESS_MAX", Kind: config.Int, Default: "20", Doc: "reset requests per client address per window"},
	{Key: "RESET_THROTTLE_WINDOW", Kind: config.Duration, Default: "1h", Doc: "window of the two above"},
	{Key: "EMAIL_SIGNIN", Kind: config.Bool, Default: "true", Doc: "sign-in by a code (and a link) mailed to the address, when mail is on; `false`: the sign-in page does not offer it and its routes answer 503 `email_signin_disabled`"},
	{Key: "EMAIL_SIGNIN_TTL", Kind: config.Duration, Default: "10m", Doc: "life of a mailed sign-in code and its link (and of a code that sets a first password)"},
	{Key: "EMAIL_SIGNIN_CODE_DIGITS", Kind: config.Int, Default: "6", Doc: "digits of a mailed code (6 to 8)"},
	{Key: "EMAIL_SIGNIN_THROTTLE_ACCOUNT_MAX", Kind: config.Int, Default: "5", Doc: "codes asked for per e-mail address per window, sign-in and password codes together (0 = off)"},
	{Key: "EMAIL_SIGNIN_THROTTLE_ADDRESS_MAX", Kind: config.Int, Default: "20", Doc: "codes asked for per client address per window (0 = off)"},
	{Key: "EMAIL_SIGNIN_THROTTLE_WINDOW", Kind: config.Duration, Default: "1h", Doc: "window of the two above; past a limit, 429 for the rest of it"},
	{Key: "EMAIL_SIGNIN_SIGNUP", Kind: config.Bool, Default: "false", Doc: "an address without an account, in `AUTH_EMAIL_SIGNIN_ALLOWED_DOMAINS`, is mailed a code that creates its account (address verified, no password)"},
	{Key: "EMAIL_SIGNIN_ALLOWED_DOMAINS", Kind: config.List, Doc: "e-mail domains that may sign up by code; required when `AUTH_EMAIL_SIGNIN_SIGNUP` is true"},
	{Key: "REQUIRE_VERIFIED_EMAIL", Kind: config.Bool, Default: "false", Doc: "unverified users get 403 `email_unverified` at sign-in (needs mail)"},
	{Key: "MFA_ISSUER", Default: "ACME Platform", Doc: "issuer shown by authenticator apps (no colon)"},
	{Key: "MFA_KEY", File: true, Secret: true, Doc: "at least 32 random characters sealing the TOTP secrets; empty: stored unsealed (a warning at start-up)"},
	{Key: "MFA_CHALLENGE_TTL", Kind: config.Duration, Default: "5m", Doc: "how long a sign-in waits for its second factor"},
	{Key: "MFA_REQUIRE_ADMIN", Kind: config.Bool, Default: "false", Doc: "administrators must enrol a second factor"},
	{Key: "WEBAUTHN_RP_ID", Default: "localhost", Doc: "the relying-party id: the domain the console is served from (not an IP address, no scheme or port); `off` turns passkeys off"},
	{Key: "WEBAUTHN_RP_NAME", DefaultDoc: "`AUTH_MFA_ISSUER`", Doc: "the name devices show when they make or use a passkey"},
	{Key: "WEBAUTHN_ORIGINS", Kind: config.List, Default: "http://localhost:8080", Doc: "origins (`scheme://host[:port]`) the console is served from, each on the relying-party id's domain"},
	{Key: "WEBAUTHN_TIMEOUT", Kind: config.Duration, Default: "5m", Doc: "how long a registration or sign-in ceremony works"},
	{Key: "WEBAUTHN_MAX_PASSKEYS", Kind: config.Int, Default: "20", Doc: "passkeys per user"},
	{Key: "WEBAUTHN_MAX_PENDING", Kind: config.Int, Default: "10000", Doc: "sign-in ceremonies begun and not finished per `AUTH_WEBAUTHN_TIMEOUT`, from every address together (past it 429 `throttled`; `0`: no cap)"},
	{Key: "CEREMONY_THROTTLE_ADDRESS_MAX", Kind: config.Int, Default: "20", Doc: "sign-ins one client address may begin per window, passkey ceremonies and identity provider sign-ins together (`0`: off)"},
	{Key: "CEREMONY_THROTTLE_WINDOW", Kind: config.Duration, Default: "1m", Doc: "the window of `AUTH_CEREMONY_THROTTLE_ADDRESS_MAX`"},
	// Sign-in with identity providers (idp.go; each OpenID Connect
	// provider's own settings: ProviderSettings).
	{Key: "OIDC_PROVIDERS", Kind: config.List, Doc: "names of the OpenID Connect providers offered at sign-in (lower-case letters, digits, dashes), each configured by the `AUTH_OIDC_<NAME>_*` settings; empty: none"},
	{Key: "GITHUB_CLIENT_ID", Doc: "client id of a GitHub OAuth app; with its secret, GitHub is offered at sign-in (as provider `github`)"},
	{Key: "GITHUB_CLIENT_SECRET", File: true, Secret: true, Doc: "the GitHub OAuth app's client secret"},
	{Key: "GITHUB_SIGNUP", Kind: config.Bool, Default: "false", Doc: "a GitHub account no user is linked to gets a new user (its primary address verified, in `AUTH_GITHUB_ALLOWED_DOMAINS`); false: only linked accounts sign in"},
	{Key: "GITHUB_ALLOWED_DOMAINS", Kind: config.List, Doc: "e-mail domains that may sign up with GitHub (empty: any)"},
	{Key: "GITHUB_URL", Default: idp.GitHubURL, Doc: "GitHub's web address (GitHub Enterprise Server: its address)"},
	{Key: "GITHUB_API_URL", Default: idp.GitHubAPIURL, Doc: "GitHub's API address (GitHub Enterprise Server: `https://<host>/api/v3`)"},
	{Key: "IDP_FLOW_TTL", Kind: config.Duration, Default: "10m", Doc: "how long a sign-in may take at a provider (the life of its state and of the `idpState` cookie)"},
	{Key: "IDP_MAX_PENDING", Kind: config.Int, Default: "10000", Doc: "provider sign-ins and links begun and not finished per `AUTH_IDP_FLOW_TTL`, from every address together (past it the begin is refused: `throttled`; `0`: no cap)"},
}

// Shared is the shared settings auth reads (pkg/config).
var Shared = config.Join(config.Logging, config.Mongo, config.NATS, config.Identity, config.ServiceCredential)

// Config is the service's configuration.
type Config struct {
	Addr            string
	LogLevel        string
	MongoURL        string
	MongoDB         string
	MongoTimeout    time.Duration
	NATSURL         string
	SubjectPrefix   string
	IdentityKey     string
	Credentials     []string
	CookieSecure    bool
	AdminEmail      string
	AdminPassword   string
	Argon2          password.Params
	HashConcurrency int
	Account         account.Config
	SweepInterval   time.Duration
	RequestTimeout  time.Duration
	ShutdownTimeout time.Duration
	ReadTimeout     time.Duration // one request's headers and body
	IdleTimeout     time.Duration // an idle keep-alive connection
	MetricsInterval time.Duration
	UserCacheTTL    time.Duration // 0 disables the user cache
	UserCacheSize   int
	AuditApp        string        // empty: no audit trail
	AuditLinger     time.Duration // how long an audit record waits for others to be published with
	SMTP            mailer.Config // SMTP.Host empty: mail is off
	Mail            account.MailConfig
	EmailSignIn     account.EmailSignInConfig
	MFA             account.MFAConfig
	Passkeys        account.PasskeyConfig // RPID empty: passkeys are off
	// IdentityProviders: sign-in with OpenID Connect providers and GitHub.
	IdentityProviders IdentityProviders
	providerReaders   []*config.Reader // each OpenID Connect provider's settings, logged at start-up

	argon2                [3]int        // memory, time, threads as set, checked by check
	lock, lockMax         time.Duration // the sign-in throttle's locks
	emailWindow, resetWin time.Duration
	codeWindow            time.Duration
	ceremonyWindow        time.Duration
}

// LoadConfig reads the configuration; docs/configuration.md lists it.
func LoadConfig(getenv func(string) string) (Config, *config.Reader, error) {
	r := config.New(Prefix, getenv, Shared, Settings)
	c := Config{
		Addr:          r.String("ADDR"),
		LogLevel:      r.String("LOG_LEVEL"),
		MongoURL:      r.MongoURL(),
		MongoDB:       r.String("MONGO_DB"),
		MongoTimeout:  r.Duration("MONGO_SELECT_TIMEOUT"),
		NATSURL:       r.URLWithLogin("NATS_URL", "NATS_USER", "NATS_PASSWORD"),
		SubjectPrefix: r.String("NATS_SUBJECT_PREFIX"),
		IdentityKey:   r.String("IDENTITY_PUBLIC_KEY"),
		CookieSecure:  r.Bool("COOKIE_SECURE"),
		AdminEmail:    r.String("ADMIN_EMAIL"),
		AdminPassword: r.String("ADMIN_PASSWORD"),
	}
	for _, s := range []string{r.String("SERVICE_CREDENTIALS"), r.String("SERVICE_CREDENTIAL")} {
		for _, v := range strings.Split(s, ",") {
			if v = strings.TrimSpace(v); v != "" {
				c.Credentials = append(c.Credentials, v)
			}
		}
	}
	c.argon2 = [3]int{r.Int("ARGON2_MEMORY_KIB"), r.Int("ARGON2_TIME"), r.Int("ARGON2_THREADS")}
	c.HashConcurrency = r.Int("HASH_CONCURRENCY")
	c.SweepInterval = r.Duration("SESSION_SWEEP_INTERVAL")
	c.RequestTimeout = r.Duration("REQUEST_TIMEOUT")
	c.ShutdownTimeout = r.Duration("SHUTDOWN_TIMEOUT")
	c.ReadTimeout = r.Duration("READ_TIMEOUT")
	c.IdleTimeout = r.Duration("IDLE_TIMEOUT")
	c.MetricsInterval = r.Duration("METRICS_INTERVAL")
	c.UserCacheTTL = r.Duration("USER_CACHE_TTL")
	c.UserCacheSize = r.Int("USER_CACHE_SIZE")
	c.AuditApp = r.String("AUDIT_APP")
	c.AuditLinger = r.Duration("AUDIT_LINGER")
	loadAccount(r, &c)
	loadMail(r, &c)
	loadMFA(r, &c)
	var idpProblems []string
	c.IdentityProviders, c.providerReaders, idpProblems = loadIdentityProviders(r, getenv)
	if err := r.Err(); err != nil {
		return c, r, err
	}
	if problems := append(c.check(), idpProblems...); len(problems) > 0 {
		return c, r, fmt.Errorf("configuration: %s", strings.Join(problems, "; "))
	}
	return c, r, nil
}

// loadAccount reads the sessions and the sign-in and e-mail throttles.
func loadAccount(r *config.Reader, c *Config) {
	c.Account = account.Config{
		SessionTTL:    r.Duration("SESSION_TTL"),
		SessionIdle:   r.Duration("SESSION_IDLE"),
		TouchInterval: r.Duration("SESSION_TOUCH_INTERVAL"),
		Account: account.ThrottleRule{
			Max:    r.Int("THROTTLE_ACCOUNT_MAX"),
			Window: r.Duration("THROTTLE_ACCOUNT_WINDOW"),
		},
		Address: account.ThrottleRule{
			Max:    r.Int("THROTTLE_ADDRESS_MAX"),
			Window: r.Duration("THROTTLE_ADDRESS_WINDOW"),
		},
		ThrottleForget: r.Duration("THROTTLE_FORGET"),
	}
	c.lock, c.lockMax = r.Duration("THROTTLE_LOCK"), r.Duration("THROTTLE_LOCK_MAX")
	c.Account.Account.Lock, c.Account.Account.LockMax = c.lock, c.lockMax
	c.Account.Address.Lock, c.Account.Address.LockMax = c.lock, c.lockMax
	// Address changes and verification mails: every request counts; past
	// the limit, 429 for the rest of the window.
	c.emailWindow = r.Duration("EMAIL_THROTTLE_WINDOW")
	c.Account.EmailAccount = windowRule(r.Int("EMAIL_THROTTLE_ACCOUNT_MAX"), c.emailWindow)
	c.Account.EmailTarget = windowRule(r.Int("EMAIL_THROTTLE_TARGET_MAX"), c.emailWindow)
}

// windowRule counts every request and, past max, refuses for the rest of
// the window.
func windowRule(max int, window time.Duration) account.ThrottleRule {
	return account.ThrottleRule{Max: max, Window: window, Lock: window, LockMax: window}
}

// loadMail reads SMTP and the mailed links.
func loadMail(r *config.Reader, c *Config) {
	c.SMTP = mailer.Config{
		Host:         r.String("SMTP_HOST"),
		Port:         r.Int("SMTP_PORT"),
		TLS:          r.String("SMTP_TLS"),
		User:         r.String("SMTP_USER"),
		Password:     r.String("SMTP_PASSWORD"),
		From:         r.String("SMTP_FROM"),
		Timeout:      r.Duration("SMTP_TIMEOUT"),
		TemplatesDir: r.String("MAIL_TEMPLATES_DIR"),
	}
	c.resetWin = r.Duration("RESET_THROTTLE_WINDOW")
	c.Mail = account.MailConfig{
		PublicURL:     r.String("PUBLIC_URL"),
		ResetTTL:      r.Duration("RESET_TTL"),
		VerifyTTL:     r.Duration("VERIFY_TTL"),
		ResetAccount:  windowRule(r.Int("RESET_THROTTLE_ACCOUNT_MAX"), c.resetWin),
		ResetAddress:  windowRule(r.Int("RESET_THROTTLE_ADDRESS_MAX"), c.resetWin),
		RequireVerify: r.Bool("REQUIRE_VERIFIED_EMAIL"),
		MaxPending:    r.Int("MAIL_MAX_PENDING"),
	}
	c.codeWindow = r.Duration("EMAIL_SIGNIN_THROTTLE_WINDOW")
	c.EmailSignIn = account.EmailSignInConfig{
		On:             r.Bool("EMAIL_SIGNIN"),
		TTL:            r.Duration("EMAIL_SIGNIN_TTL"),
		Digits:         r.Int("EMAIL_SIGNIN_CODE_DIGITS"),
		Account:        windowRule(r.Int("EMAIL_SIGNIN_THROTTLE_ACCOUNT_MAX"), c.codeWindow),
		Address:        windowRule(r.Int("EMAIL_SIGNIN_THROTTLE_ADDRESS_MAX"), c.codeWindow),
		SignUp:         r.Bool("EMAIL_SIGNIN_SIGNUP"),
		AllowedDomains: r.List("EMAIL_SIGNIN_ALLOWED_DOMAINS"),
	}
}

// loadMFA reads the second factor and passkeys.
func loadMFA(r *config.Reader, c *Config) {
	c.MFA = account.MFAConfig{
		Issuer:       r.String("MFA_ISSUER"),
		ChallengeTTL: r.Duration("MFA_CHALLENGE_TTL"),
		RequireAdmin: r.Bool("MFA_REQUIRE_ADMIN"),
	}
	if k := r.String("MFA_KEY"); k != "" {
		c.MFA.Key = []byte(k)
	}
	c.Passkeys = account.PasskeyConfig{
		RPID:        r.String("WEBAUTHN_RP_ID"),
		RPName:      r.String("WEBAUTHN_RP_NAME"),
		Origins:     r.List("WEBAUTHN_ORIGINS"),
		CeremonyTTL: r.Duration("WEBAUTHN_TIMEOUT"),
		MaxPerUser:  r.Int("WEBAUTHN_MAX_PASSKEYS"),
		MaxPending:  r.Int("WEBAUTHN_MAX_PENDING"),
	}
	if c.Passkeys.RPName == "" {
		c.Passkeys.RPName = c.MFA.Issuer
	}
	c.ceremonyWindow = r.Duration("CEREMONY_THROTTLE_WINDOW")
	c.Passkeys.StartAddress = windowRule(r.Int("CEREMONY_THROTTLE_ADDRESS_MAX"), c.ceremonyWindow)
}

// check validates the values read and settles Argon2, AuditApp, RPID and
// the mail send timeout; it returns the problems found.
func (c *Config) check() []string {
	problems := c.checkArgon2()
	problems = append(problems, c.checkCore()...)
	problems = append(problems, c.checkLimits()...)
	problems = append(problems, c.checkMail()...)
	problems = append(problems, c.checkMFA()...)
	return problems
}

// checkArgon2 sets Argon2 from the three settings.
func (c *Config) checkArgon2() []string {
	mem, tm, th := c.argon2[0], c.argon2[1], c.argon2[2]
	if mem < 8 || mem > math.MaxUint32 || tm < 1 || tm > math.MaxUint32 || th < 1 || th > 255 {
		return []string{"AUTH_ARGON2_MEMORY_KIB, AUTH_ARGON2_TIME, AUTH_ARGON2_THREADS out of range"}
	}
	c.Argon2 = password.Params{MemoryKiB: uint32(mem), Time: uint32(tm), Threads: uint8(th), SaltLen: 16, KeyLen: 32}
	if err := c.Argon2.Validate(); err != nil {
		return []string{err.Error()}
	}
	return nil
}

func (c *Config) checkCore() []string {
	var problems []string
	if c.IdentityKey == "" {
		problems = append(problems, "IDENTITY_PUBLIC_KEY is required")
	}
	if len(c.Credentials) == 0 {
		problems = append(problems, "no service credential: set AUTH_SERVICE_CREDENTIALS or SERVICE_CREDENTIAL")
	}
	if c.HashConcurrency < 1 {
		problems = append(problems, "AUTH_HASH_CONCURRENCY must be at least 1")
	}
	if c.Account.SessionTTL <= 0 || c.Account.SessionIdle <= 0 || c.Account.TouchInterval <= 0 || c.SweepInterval <= 0 {
		problems = append(problems, "session durations must be positive")
	}
	if c.lock <= 0 || c.lockMax < c.lock {
		problems = append(problems, "AUTH_THROTTLE_LOCK must be positive and at most AUTH_THROTTLE_LOCK_MAX")
	}
	if c.Account.Account.Window <= 0 || c.Account.Address.Window <= 0 || c.emailWindow <= 0 || c.ceremonyWindow <= 0 {
		problems = append(problems, "throttle windows must be positive")
	}
	return problems
}

// checkLimits checks the timeouts, the user cache and the audit trail.
func (c *Config) checkLimits() []string {
	var problems []string
	if c.RequestTimeout <= 0 || c.ShutdownTimeout <= 0 || c.MongoTimeout <= 0 || c.MetricsInterval <= 0 || c.ReadTimeout <= 0 || c.IdleTimeout <= 0 {
		problems = append(problems, "AUTH_REQUEST_TIMEOUT, AUTH_SHUTDOWN_TIMEOUT, AUTH_MONGO_SELECT_TIMEOUT, AUTH_METRICS_INTERVAL, AUTH_READ_TIMEOUT and AUTH_IDLE_TIMEOUT must be positive")
	}
	if c.UserCacheTTL < 0 || c.UserCacheSize < 1 {
		problems = append(problems, "AUTH_USER_CACHE_TTL must not be negative and AUTH_USER_CACHE_SIZE must be at least 1")
	}
	if c.AuditApp != "" && c.AuditApp != "off" && !logclient.ValidToken(c.AuditApp) {
		problems = append(problems, "AUTH_AUDIT_APP must be an application name (no dots, spaces or wildcards), or off")
	}
	if c.AuditLinger < 0 || c.AuditLinger > 10*time.Second {
		problems = append(problems, "AUTH_AUDIT_LINGER must be between 0 and 10s")
	}
	if c.AuditApp == "off" {
		c.AuditApp = ""
	}
	return problems
}

func (c *Config) checkMail() []string {
	var problems []string
	if c.SMTP.Host == "" {
		if c.Mail.RequireVerify {
			problems = append(problems, "AUTH_REQUIRE_VERIFIED_EMAIL needs mail: set AUTH_SMTP_HOST")
		}
		return problems
	}
	if _, err := mailer.New(c.SMTP); err != nil {
		problems = append(problems, "AUTH_SMTP_*: "+err.Error())
	}
	if u, err := url.Parse(c.Mail.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		problems = append(problems, "AUTH_PUBLIC_URL must be an absolute http(s) URL (the gateway's public address, used in links)")
	}
	if c.Mail.ResetTTL <= 0 || c.Mail.VerifyTTL <= 0 || c.resetWin <= 0 || c.Mail.MaxPending < 1 || c.SMTP.Timeout <= 0 {
		problems = append(problems, "AUTH_RESET_TTL, AUTH_VERIFY_TTL, AUTH_RESET_THROTTLE_WINDOW, AUTH_SMTP_TIMEOUT must be positive and AUTH_MAIL_MAX_PENDING at least 1")
	}
	c.Mail.SendTimeout = c.SMTP.Timeout + 10*time.Second
	return append(problems, c.checkEmailSignIn()...)
}

// checkEmailSignIn checks the mailed codes' settings (read with mail on).
func (c *Config) checkEmailSignIn() []string {
	var problems []string
	e := c.EmailSignIn
	if e.TTL <= 0 || c.codeWindow <= 0 {
		problems = append(problems, "AUTH_EMAIL_SIGNIN_TTL and AUTH_EMAIL_SIGNIN_THROTTLE_WINDOW must be positive")
	}
	if e.Digits < account.MinCodeDigits || e.Digits > account.MaxCodeDigits {
		problems = append(problems, "AUTH_EMAIL_SIGNIN_CODE_DIGITS must be 6, 7 or 8")
	}
	// Anyone may ask for a code: sign-up by code is for named domains
	// only, never every address on the internet.
	if e.SignUp && len(e.AllowedDomains) == 0 {
		problems = append(problems, "AUTH_EMAIL_SIGNIN_SIGNUP needs AUTH_EMAIL_SIGNIN_ALLOWED_DOMAINS (the domains whose addresses may sign up)")
	}
	return problems
}

func (c *Config) checkMFA() []string {
	var problems []string
	if c.MFA.ChallengeTTL <= 0 || c.MFA.Issuer == "" || strings.Contains(c.MFA.Issuer, ":") {
		problems = append(problems, "AUTH_MFA_CHALLENGE_TTL must be positive and AUTH_MFA_ISSUER a non-empty name without a colon")
	}
	if c.MFA.Key != nil && len(c.MFA.Key) < 32 {
		problems = append(problems, "AUTH_MFA_KEY must be at least 32 characters (random; it seals TOTP secrets)")
	}
	if c.Passkeys.RPID == "off" {
		c.Passkeys.RPID = ""
		return problems
	}
	if err := account.ValidatePasskeyConfig(c.Passkeys); err != nil {
		problems = append(problems, "AUTH_WEBAUTHN_RP_ID and AUTH_WEBAUTHN_ORIGINS: "+err.Error())
	}
	if c.Passkeys.CeremonyTTL <= 0 || c.Passkeys.MaxPerUser < 1 {
		problems = append(problems, "AUTH_WEBAUTHN_TIMEOUT must be positive and AUTH_WEBAUTHN_MAX_PASSKEYS at least 1")
	}
	return problems
}
