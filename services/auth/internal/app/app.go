// Package app wires the auth service: configuration, MongoDB, NATS, the
// account service, the bootstrap administrator, the session sweeper and the
// HTTP server.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/natsfence"
	"github.com/acme/platform/pkg/userevents"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/audit"
	"github.com/acme/platform/services/auth/internal/httpapi"
	"github.com/acme/platform/services/auth/internal/mailer"
	"github.com/acme/platform/services/auth/internal/mongostore"
	"github.com/acme/platform/services/auth/internal/password"
	"github.com/acme/platform/services/auth/internal/revocation"
	"github.com/acme/platform/services/auth/internal/usercache"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// BodyLimit is the largest request body accepted (413 above).
const BodyLimit = 64 << 10

// Config is the service's configuration.
type Config struct {
	Addr            string
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
	MFA             account.MFAConfig
	Passkeys        account.PasskeyConfig // RPID empty: passkeys are off
}

// LoadConfig reads the configuration; see docs/auth.md for the table.
func LoadConfig(getenv func(string) string) (Config, *config.Reader, error) {
	r := config.New("AUTH", getenv)
	c := Config{
		Addr:          r.Own("ADDR", "127.0.0.1:8081"),
		MongoURL:      r.MongoURL("mongodb://127.0.0.1:27017"),
		MongoDB:       r.String("MONGO_DB", "acme"),
		NATSURL:       r.URLWithLogin("NATS_URL", "nats://127.0.0.1:4222", "NATS_USER", "NATS_PASSWORD"),
		SubjectPrefix: r.String("NATS_SUBJECT_PREFIX", "acme"),
		IdentityKey:   r.String("IDENTITY_PUBLIC_KEY", ""),
		CookieSecure:  r.Bool("COOKIE_SECURE", true),
		AdminEmail:    r.String("ADMIN_EMAIL", "admin@acme.local"),
		AdminPassword: r.Secret("ADMIN_PASSWORD", ""),
	}
	for _, s := range []string{r.Secret("SERVICE_CREDENTIALS", ""), r.Secret("SERVICE_CREDENTIAL", "")} {
		for _, v := range strings.Split(s, ",") {
			if v = strings.TrimSpace(v); v != "" {
				c.Credentials = append(c.Credentials, v)
			}
		}
	}
	mem := r.Int("ARGON2_MEMORY_KIB", int(password.OWASP.MemoryKiB))
	tm := r.Int("ARGON2_TIME", int(password.OWASP.Time))
	th := r.Int("ARGON2_THREADS", int(password.OWASP.Threads))
	c.HashConcurrency = r.Int("HASH_CONCURRENCY", runtime.NumCPU())
	c.Account = account.Config{
		SessionTTL:    r.Duration("SESSION_TTL", 7*24*time.Hour),
		SessionIdle:   r.Duration("SESSION_IDLE", 24*time.Hour),
		TouchInterval: r.Duration("SESSION_TOUCH_INTERVAL", time.Minute),
		Account: account.ThrottleRule{
			Max:    r.Int("THROTTLE_ACCOUNT_MAX", 5),
			Window: r.Duration("THROTTLE_ACCOUNT_WINDOW", 15*time.Minute),
		},
		Address: account.ThrottleRule{
			Max:    r.Int("THROTTLE_ADDRESS_MAX", 50),
			Window: r.Duration("THROTTLE_ADDRESS_WINDOW", 15*time.Minute),
		},
		ThrottleForget: r.Duration("THROTTLE_FORGET", 24*time.Hour),
	}
	lock := r.Duration("THROTTLE_LOCK", time.Minute)
	lockMax := r.Duration("THROTTLE_LOCK_MAX", time.Hour)
	c.Account.Account.Lock, c.Account.Account.LockMax = lock, lockMax
	c.Account.Address.Lock, c.Account.Address.LockMax = lock, lockMax
	// Address changes and verification mails: every request counts; past
	// the limit, 429 for the rest of the window.
	emailWindow := r.Duration("EMAIL_THROTTLE_WINDOW", time.Hour)
	c.Account.EmailAccount = account.ThrottleRule{Max: r.Int("EMAIL_THROTTLE_ACCOUNT_MAX", 5), Window: emailWindow, Lock: emailWindow, LockMax: emailWindow}
	c.Account.EmailTarget = account.ThrottleRule{Max: r.Int("EMAIL_THROTTLE_TARGET_MAX", 3), Window: emailWindow, Lock: emailWindow, LockMax: emailWindow}
	c.MongoTimeout = r.Duration("MONGO_SELECT_TIMEOUT", 5*time.Second)
	c.SweepInterval = r.Duration("SESSION_SWEEP_INTERVAL", 10*time.Minute)
	c.RequestTimeout = r.Duration("REQUEST_TIMEOUT", 30*time.Second)
	c.ShutdownTimeout = r.Duration("SHUTDOWN_TIMEOUT", 10*time.Second)
	c.ReadTimeout = r.Duration("READ_TIMEOUT", 60*time.Second)
	c.IdleTimeout = r.Duration("IDLE_TIMEOUT", 90*time.Second)
	c.MetricsInterval = r.Duration("METRICS_INTERVAL", 30*time.Second)
	c.UserCacheTTL = r.Duration("USER_CACHE_TTL", 30*time.Second)
	c.UserCacheSize = r.Int("USER_CACHE_SIZE", 10000)
	c.AuditApp = r.String("AUDIT_APP", "ACME-AUTH")
	c.AuditLinger = r.Duration("AUDIT_LINGER", 100*time.Millisecond)
	c.SMTP = mailer.Config{
		Host:         r.String("SMTP_HOST", ""),
		Port:         r.Int("SMTP_PORT", 587),
		TLS:          r.String("SMTP_TLS", mailer.StartTLS),
		User:         r.String("SMTP_USER", ""),
		Password:     r.Secret("SMTP_PASSWORD", ""),
		From:         r.String("SMTP_FROM", "ACME Platform <no-reply@acme.local>"),
		Timeout:      r.Duration("SMTP_TIMEOUT", 30*time.Second),
		TemplatesDir: r.String("MAIL_TEMPLATES_DIR", ""),
	}
	resetWindow := r.Duration("RESET_THROTTLE_WINDOW", time.Hour)
	c.Mail = account.MailConfig{
		PublicURL:     r.String("PUBLIC_URL", "http://127.0.0.1:8080"),
		ResetTTL:      r.Duration("RESET_TTL", 30*time.Minute),
		VerifyTTL:     r.Duration("VERIFY_TTL", 48*time.Hour),
		ResetAccount:  account.ThrottleRule{Max: r.Int("RESET_THROTTLE_ACCOUNT_MAX", 3), Window: resetWindow, Lock: resetWindow, LockMax: resetWindow},
		ResetAddress:  account.ThrottleRule{Max: r.Int("RESET_THROTTLE_ADDRESS_MAX", 20), Window: resetWindow, Lock: resetWindow, LockMax: resetWindow},
		RequireVerify: r.Bool("REQUIRE_VERIFIED_EMAIL", false),
		MaxPending:    r.Int("MAIL_MAX_PENDING", 64),
	}
	c.MFA = account.MFAConfig{
		Issuer:       r.String("MFA_ISSUER", "ACME Platform"),
		ChallengeTTL: r.Duration("MFA_CHALLENGE_TTL", 5*time.Minute),
		RequireAdmin: r.Bool("MFA_REQUIRE_ADMIN", false),
	}
	c.Passkeys = account.PasskeyConfig{
		RPID:        r.String("WEBAUTHN_RP_ID", "localhost"),
		RPName:      r.String("WEBAUTHN_RP_NAME", c.MFA.Issuer),
		Origins:     r.List("WEBAUTHN_ORIGINS", "http://localhost:8080"),
		CeremonyTTL: r.Duration("WEBAUTHN_TIMEOUT", 5*time.Minute),
		MaxPerUser:  r.Int("WEBAUTHN_MAX_PASSKEYS", 20),
		MaxPending:  r.Int("WEBAUTHN_MAX_PENDING", 10000),
	}
	startWindow := r.Duration("CEREMONY_THROTTLE_WINDOW", time.Minute)
	c.Passkeys.StartAddress = account.ThrottleRule{Max: r.Int("CEREMONY_THROTTLE_ADDRESS_MAX", 20), Window: startWindow, Lock: startWindow, LockMax: startWindow}
	if k := r.Secret("MFA_KEY", ""); k != "" {
		c.MFA.Key = []byte(k)
	}
	if err := r.Err(); err != nil {
		return c, r, err
	}

	var problems []string
	if mem < 8 || mem > math.MaxUint32 || tm < 1 || tm > math.MaxUint32 || th < 1 || th > 255 {
		problems = append(problems, "AUTH_ARGON2_MEMORY_KIB, AUTH_ARGON2_TIME, AUTH_ARGON2_THREADS out of range")
	} else {
		c.Argon2 = password.Params{MemoryKiB: uint32(mem), Time: uint32(tm), Threads: uint8(th), SaltLen: 16, KeyLen: 32}
		if err := c.Argon2.Validate(); err != nil {
			problems = append(problems, err.Error())
		}
	}
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
	if lock <= 0 || lockMax < lock {
		problems = append(problems, "AUTH_THROTTLE_LOCK must be positive and at most AUTH_THROTTLE_LOCK_MAX")
	}
	if c.Account.Account.Window <= 0 || c.Account.Address.Window <= 0 || emailWindow <= 0 || startWindow <= 0 {
		problems = append(problems, "throttle windows must be positive")
	}
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
	if c.SMTP.Host != "" {
		if _, err := mailer.New(c.SMTP); err != nil {
			problems = append(problems, "AUTH_SMTP_*: "+err.Error())
		}
		if u, err := url.Parse(c.Mail.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			problems = append(problems, "AUTH_PUBLIC_URL must be an absolute http(s) URL (the gateway's public address, used in links)")
		}
		if c.Mail.ResetTTL <= 0 || c.Mail.VerifyTTL <= 0 || resetWindow <= 0 || c.Mail.MaxPending < 1 || c.SMTP.Timeout <= 0 {
			problems = append(problems, "AUTH_RESET_TTL, AUTH_VERIFY_TTL, AUTH_RESET_THROTTLE_WINDOW, AUTH_SMTP_TIMEOUT must be positive and AUTH_MAIL_MAX_PENDING at least 1")
		}
		c.Mail.SendTimeout = c.SMTP.Timeout + 10*time.Second
	} else if c.Mail.RequireVerify {
		problems = append(problems, "AUTH_REQUIRE_VERIFIED_EMAIL needs mail: set AUTH_SMTP_HOST")
	}
	if c.MFA.ChallengeTTL <= 0 || c.MFA.Issuer == "" || strings.Contains(c.MFA.Issuer, ":") {
		problems = append(problems, "AUTH_MFA_CHALLENGE_TTL must be positive and AUTH_MFA_ISSUER a non-empty name without a colon")
	}
	if c.MFA.Key != nil && len(c.MFA.Key) < 32 {
		problems = append(problems, "AUTH_MFA_KEY must be at least 32 characters (random; it seals TOTP secrets)")
	}
	if c.Passkeys.RPID == "off" {
		c.Passkeys.RPID = ""
	} else {
		if err := account.ValidatePasskeyConfig(c.Passkeys); err != nil {
			problems = append(problems, "AUTH_WEBAUTHN_RP_ID and AUTH_WEBAUTHN_ORIGINS: "+err.Error())
		}
		if c.Passkeys.CeremonyTTL <= 0 || c.Passkeys.MaxPerUser < 1 {
			problems = append(problems, "AUTH_WEBAUTHN_TIMEOUT must be positive and AUTH_WEBAUTHN_MAX_PASSKEYS at least 1")
		}
	}
	if len(problems) > 0 {
		return c, r, fmt.Errorf("configuration: %s", strings.Join(problems, "; "))
	}
	return c, r, nil
}

// Run starts the service and serves until ctx ends. ready, if set, receives
// the bound address once the server listens.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string)) error {
	base := slog.NewJSONHandler(stdout, nil)
	log := slog.New(base).With("service", "auth")
	cfg, r, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	r.Log(log)
	pub, err := identity.ParsePublicKey(cfg.IdentityKey)
	if err != nil {
		return err
	}
	for _, c := range cfg.Credentials {
		if len(c) < 16 {
			log.Warn("a service credential is shorter than 16 characters; use long random values")
			break
		}
	}

	// MongoDB
	mc, disconnect, err := mongox.Connect(ctx, options.Client().ApplyURI(cfg.MongoURL).
		SetServerSelectionTimeout(cfg.MongoTimeout).SetTimeout(10*time.Second).SetAppName("acme-auth"), 30*time.Second)
	if err != nil {
		return err
	}
	defer disconnect()
	db := mc.Database(cfg.MongoDB)
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = mongostore.EnsureIndexes(ictx, db)
	if err == nil {
		// Users are found by address through their key documents: write
		// those of users stored without one (mongostore.Users).
		var n int
		if n, err = mongostore.NewUsers(db).BackfillEmails(ictx); n > 0 {
			log.Info("address keys written for existing users", "users", n)
		}
	}
	cancel()
	if err != nil {
		return err
	}

	// NATS: only for revocation events. The service runs without it (the
	// readiness check reports it) and reconnects forever.
	nc, err := natsconn.Connect(cfg.NATSURL, "acme-auth", log, nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	if !nc.IsConnected() {
		log.Warn("nats not reachable yet; revocations are logged until it is", "url", config.Redact(cfg.NATSURL))
	}

	// Our own errors also go to the administrators' log store, as ACME-AUTH.
	log, closeSelfLog, err := logclient.SelfLogger(nc, cfg.SubjectPrefix, base, "ACME-AUTH", "service", "auth")
	if err != nil {
		return err
	}
	defer closeSelfLog() // idempotent; called in order below on a normal stop
	// Lines logged with a request's context carry its id.
	log = web.WithRequestIDs(log)

	// Security events go to the log store as records of AUTH_AUDIT_APP.
	var sink *audit.Sink
	closeAudit := func() {}
	if cfg.AuditApp != "" {
		ac, err := logclient.New(nc, logclient.Options{Prefix: cfg.SubjectPrefix, Logger: log, Linger: cfg.AuditLinger})
		if err != nil {
			return err
		}
		closeAudit = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ac.Close(ctx)
		}
		defer func() { closeAudit() }() // idempotent
		sink = audit.New(ac, cfg.AuditApp, log)
	}

	hasher, err := password.NewHasher(cfg.Argon2, cfg.HashConcurrency)
	if err != nil {
		return err
	}
	svc := account.NewService(mongostore.NewUsers(db), mongostore.NewSessions(db), mongostore.NewThrottle(db),
		hasher, revocation.NewPublisher(nc, cfg.SubjectPrefix, log), cfg.Account, log)
	if sink != nil {
		svc.SetEvents(sink)
	}
	svc.SetAPIKeys(mongostore.NewAPIKeys(db))
	if err := svc.SetMFA(mongostore.NewFactors(db), mongostore.NewTokens(db), cfg.MFA); err != nil {
		return err
	}
	if cfg.Passkeys.RPID != "" {
		if err := svc.SetPasskeys(mongostore.NewPasskeys(db), mongostore.NewTokens(db), cfg.Passkeys); err != nil {
			return err
		}
	} else {
		log.Info("passkeys are off (AUTH_WEBAUTHN_RP_ID=off)")
	}
	if cfg.MFA.Key == nil {
		log.Warn("AUTH_MFA_KEY is not set: TOTP secrets are stored unsealed (a database dump reveals them)")
	}

	if cfg.SMTP.Host != "" {
		m, err := mailer.New(cfg.SMTP)
		if err != nil {
			return err
		}
		svc.SetMail(m, mongostore.NewTokens(db), cfg.Mail)
		defer svc.Close() // after the server stops: deliveries under way finish
	} else {
		log.Info("mail is off (AUTH_SMTP_HOST not set): no password reset, no address verification")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	svc.SetUserEvents(userEvents{js: js, prefix: cfg.SubjectPrefix})

	// Users read by GET /me, /ms/me and sign-ins are cached
	// (AUTH_USER_CACHE_TTL); sign-in throttle states are not (the store
	// admits every attempt). Every replica applies the revocations auth
	// publishes (they name every changed user) and serves a cached user
	// only after a NATS round trip begun after the request arrived
	// (pkg/natsfence), so a change through any replica is seen by every
	// replica on the next request. Without NATS the fence fails and the
	// database is read.
	var userCache *usercache.Cache
	if cfg.UserCacheTTL > 0 {
		users := usercache.New(cfg.UserCacheTTL, cfg.UserCacheSize, nil)
		fence, err := natsfence.New(nc, revocation.Subject(cfg.SubjectPrefix), users.Apply(log), users.Clear, log)
		if err != nil {
			return fmt.Errorf("nats subscribe: %w", err)
		}
		defer fence.Close()
		users.SetFence(fence.Sync)
		svc.SetUserCache(users)
		userCache = users
	}

	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	created, generated, err := svc.EnsureAdmin(bctx, cfg.AdminEmail, cfg.AdminPassword)
	cancel()
	if err != nil {
		return fmt.Errorf("bootstrap admin %s: %w", cfg.AdminEmail, err)
	}
	if created {
		log.Info("administrator created", "email", cfg.AdminEmail)
		if generated != "" {
			fmt.Fprintf(stdout, "initial admin password for %s: %s\n", cfg.AdminEmail, generated)
		}
	}

	reg := metrics.NewRegistry()
	meter := newAuthMetrics(reg)
	if userCache != nil {
		reg.MustRegister(userCache.Collectors(metrics.Namespace, "auth_user", "users by id")...)
	}
	app := web.NewApp(web.Options{Name: "auth", Log: log, BodyLimit: BodyLimit, Metrics: reg, ReadTimeout: cfg.ReadTimeout, IdleTimeout: cfg.IdleTimeout})
	web.Health(app, map[string]func(context.Context) error{
		"mongo": func(ctx context.Context) error { return mc.Ping(ctx, nil) },
		"nats": func(context.Context) error {
			if !nc.IsConnected() {
				return errors.New("not connected")
			}
			return nil
		},
	})
	if err := httpapi.Register(app, svc, identity.NewVerifier(pub, "auth"), httpapi.Options{
		CookieSecure:       cfg.CookieSecure,
		ServiceCredentials: cfg.Credentials,
		RequestTimeout:     cfg.RequestTimeout,
		Meter:              meter,
	}); err != nil {
		return err
	}

	bgCtx, stopBG := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { sweep(bgCtx, svc, cfg.SweepInterval, log) })
	bg.Go(func() { countSessions(bgCtx, svc, meter.sessions, cfg.MetricsInterval, log) })

	// Shutdown: in-flight requests finish (within AUTH_SHUTDOWN_TIMEOUT),
	// background work stops, our buffered error logs are published, NATS
	// drains, and MongoDB disconnects last (deferred above).
	log.Info("listening", "addr", cfg.Addr)
	err = web.Serve(ctx, app, cfg.Addr, cfg.ShutdownTimeout, ready)
	stopBG()
	bg.Wait()
	svc.Close() // mail deliveries under way finish (within AUTH_SMTP_TIMEOUT + 10s)
	closeAudit()
	closeSelfLog()
	if derr := nc.Drain(); derr != nil && !errors.Is(derr, nats.ErrConnectionClosed) {
		log.Warn("nats drain", "err", derr)
	}
	log.Info("stopped", "err", err)
	return err
}

// sweep deletes expired sessions every interval (with jitter so replicas
// started together spread out). Deletes are idempotent, so replicas do not
// need to coordinate.
func sweep(ctx context.Context, svc *account.Service, interval time.Duration, log *slog.Logger) {
	for {
		wait := interval/2 + rand.N(interval/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := svc.Sweep(sctx); err != nil && ctx.Err() == nil {
			log.Warn("session sweep failed", "err", err)
		}
		cancel()
	}
}

// userEvents publishes user deletions on the durable user stream
// (pkg/userevents), creating the stream first if need be, so that auth
// does not depend on a consumer having started.
type userEvents struct {
	js     jetstream.JetStream
	prefix string
}

func (e userEvents) Deleted(ctx context.Context, userID string) error {
	if err := userevents.EnsureStream(ctx, e.js, e.prefix); err != nil {
		return err
	}
	return userevents.PublishDeleted(ctx, e.js, e.prefix, userID)
}
