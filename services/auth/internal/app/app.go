// Package app wires the auth service: configuration, MongoDB, NATS, the
// account service, the bootstrap administrator, the session sweeper and the
// HTTP server.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/pkg/natsfence"
	"github.com/acme/platform/pkg/service"
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
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// BodyLimit is the largest request body accepted (413 above).
const BodyLimit = 64 << 10

// Run starts the service and serves until ctx ends. ready, if set, receives
// the bound address once the server listens.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string)) error {
	cfg, r, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	p, err := service.Start("auth", stdout, cfg.LogLevel, r)
	if err != nil {
		return err
	}
	defer p.Close() // on an early return; Stop below on a normal one
	for _, pr := range cfg.providerReaders {
		pr.Log(p.Log) // each identity provider's settings, secrets masked
	}
	pub, err := identity.ParsePublicKey(cfg.IdentityKey)
	if err != nil {
		return err
	}
	for _, c := range cfg.Credentials {
		if len(c) < 16 {
			p.Log.Warn("a service credential is shorter than 16 characters; use long random values")
			break
		}
	}
	mc, db, err := connectMongo(ctx, p, cfg)
	if err != nil {
		return err
	}

	// NATS: only for revocation events. The service runs without it (the
	// readiness check reports it) and reconnects forever.
	nc, err := p.ConnectNATS(cfg.NATSURL, "acme-auth", p.Log, nats.RetryOnFailedConnect(true))
	if err != nil {
		return err
	}
	if !nc.IsConnected() {
		p.Log.Warn("nats not reachable yet; revocations are logged until it is", "url", config.Redact(cfg.NATSURL))
	}
	// Our own errors also go to the administrators' log store, as ACME-AUTH.
	if err := p.SelfLog(cfg.SubjectPrefix, "ACME-AUTH"); err != nil {
		return err
	}
	log := p.Log

	svc, closeAudit, err := newAccounts(p, cfg, db)
	if err != nil {
		return err
	}
	idps, err := newIdentityProviders(cfg, svc, db, log)
	if err != nil {
		return err
	}
	userCache, err := cacheUsers(p, cfg, svc)
	if err != nil {
		return err
	}
	if err := bootstrapAdmin(ctx, svc, cfg, log, stdout); err != nil {
		return err
	}

	reg := metrics.NewRegistry()
	meter := newAuthMetrics(reg)
	if userCache != nil {
		reg.MustRegister(userCache.Collectors(metrics.Namespace, "auth_user", "users by id")...)
	}
	app := web.NewApp(web.Options{Name: "auth", Log: log, BodyLimit: BodyLimit, Metrics: reg, ReadTimeout: cfg.ReadTimeout, IdleTimeout: cfg.IdleTimeout})
	web.Health(app, map[string]func(context.Context) error{
		"mongo": func(ctx context.Context) error { return mc.Ping(ctx, nil) },
		"nats":  p.NATSConnected,
	})
	if err := httpapi.Register(app, svc, identity.NewVerifier(pub, "auth"), httpapi.Options{
		CookieSecure:       cfg.CookieSecure,
		ServiceCredentials: cfg.Credentials,
		RequestTimeout:     cfg.RequestTimeout,
		Meter:              meter,
		Identities:         idps,
	}); err != nil {
		return err
	}

	bgCtx, stopBG := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { sweep(bgCtx, svc, cfg.SweepInterval, log) })
	bg.Go(func() { countSessions(bgCtx, svc, meter.sessions, cfg.MetricsInterval, log) })

	// Shutdown: in-flight requests finish (within AUTH_SHUTDOWN_TIMEOUT),
	// background work stops, mail deliveries under way finish (within
	// AUTH_SMTP_TIMEOUT + 10s), the audit trail and our buffered error
	// logs are published, NATS drains, and MongoDB disconnects last.
	log.Info("listening", "addr", cfg.Addr)
	err = web.Serve(ctx, app, cfg.Addr, cfg.ShutdownTimeout, ready)
	stopBG()
	bg.Wait()
	svc.Close()
	closeAudit()
	return p.Stop(err)
}

// connectMongo connects, creates the indexes and writes the address keys
// of users stored without one.
func connectMongo(ctx context.Context, p *service.Process, cfg Config) (*mongo.Client, *mongo.Database, error) {
	mc, disconnect, err := mongox.Connect(ctx, options.Client().ApplyURI(cfg.MongoURL).
		SetServerSelectionTimeout(cfg.MongoTimeout).SetTimeout(10*time.Second).SetAppName("acme-auth"), 30*time.Second)
	if err != nil {
		return nil, nil, err
	}
	p.Defer(disconnect)
	db := mc.Database(cfg.MongoDB)
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := mongostore.EnsureIndexes(ictx, db); err != nil {
		return nil, nil, err
	}
	if err := mongostore.EnsureIdentityIndexes(ictx, db); err != nil {
		return nil, nil, err
	}
	// Users are found by address through their key documents: write
	// those of users stored without one (mongostore.Users).
	n, err := mongostore.NewUsers(db).BackfillEmails(ictx)
	if n > 0 {
		p.Log.Info("address keys written for existing users", "users", n)
	}
	return mc, db, err
}

// newAccounts builds the account service with its stores, audit trail,
// second factor, passkeys, mail and user events. closeAudit publishes
// the audit records still buffered (also when the process closes).
func newAccounts(p *service.Process, cfg Config, db *mongo.Database) (*account.Service, func(), error) {
	log, nc := p.Log, p.NATS
	hasher, err := password.NewHasher(cfg.Argon2, cfg.HashConcurrency)
	if err != nil {
		return nil, nil, err
	}
	svc := account.NewService(mongostore.NewUsers(db), mongostore.NewSessions(db), mongostore.NewThrottle(db),
		hasher, revocation.NewPublisher(nc, cfg.SubjectPrefix, log), cfg.Account, log)
	// Security events go to the log store as records of AUTH_AUDIT_APP.
	closeAudit := func() {}
	if cfg.AuditApp != "" {
		ac, err := logclient.New(nc, logclient.Options{Prefix: cfg.SubjectPrefix, Logger: log, Linger: cfg.AuditLinger})
		if err != nil {
			return nil, nil, err
		}
		closeAudit = sync.OnceFunc(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ac.Close(ctx)
		})
		p.Defer(closeAudit)
		svc.SetEvents(audit.New(ac, cfg.AuditApp, log))
	}
	svc.SetAPIKeys(mongostore.NewAPIKeys(db))
	if err := svc.SetMFA(mongostore.NewFactors(db), mongostore.NewTokens(db), cfg.MFA); err != nil {
		return nil, nil, err
	}
	if cfg.Passkeys.RPID != "" {
		if err := svc.SetPasskeys(mongostore.NewPasskeys(db), mongostore.NewTokens(db), cfg.Passkeys); err != nil {
			return nil, nil, err
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
			return nil, nil, err
		}
		svc.SetMail(m, mongostore.NewTokens(db), cfg.Mail)
		svc.SetEmailSignIn(mongostore.NewEmailCodes(db), cfg.EmailSignIn)
		p.Defer(svc.Close) // after the server stops: deliveries under way finish
	} else {
		log.Info("mail is off (AUTH_SMTP_HOST not set): no password reset, no address verification")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	svc.SetUserEvents(userEvents{js: js, prefix: cfg.SubjectPrefix})
	return svc, closeAudit, nil
}

// cacheUsers gives svc the user cache unless AUTH_USER_CACHE_TTL is 0.
//
// Users read by GET /me, /ms/me and sign-ins are cached; sign-in throttle
// states are not (the store admits every attempt). Every replica applies
// the revocations auth publishes (they name every changed user) and
// serves a cached user only after a NATS round trip begun after the
// request arrived (pkg/natsfence), so a change through any replica is seen
// by every replica on the next request. Without NATS the fence fails and
// the database is read.
func cacheUsers(p *service.Process, cfg Config, svc *account.Service) (*usercache.Cache, error) {
	if cfg.UserCacheTTL <= 0 {
		return nil, nil
	}
	users := usercache.New(cfg.UserCacheTTL, cfg.UserCacheSize, nil)
	fence, err := natsfence.New(p.NATS, revocation.Subject(cfg.SubjectPrefix), users.Apply(p.Log), users.Clear, p.Log)
	if err != nil {
		return nil, fmt.Errorf("nats subscribe: %w", err)
	}
	p.Defer(fence.Close)
	users.SetFence(fence.Sync)
	svc.SetUserCache(users)
	return users, nil
}

// bootstrapAdmin creates the first administrator unless a user has its
// address, and prints a generated password once.
func bootstrapAdmin(ctx context.Context, svc *account.Service, cfg Config, log *slog.Logger, stdout io.Writer) error {
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
	return nil
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
