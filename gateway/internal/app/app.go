// Package app wires the gateway: configuration, the session resolver, the
// revocation subscriber on NATS, health endpoints and the HTTP server.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/gateway/internal/console"
	"github.com/acme/platform/gateway/internal/openapi"
	"github.com/acme/platform/gateway/internal/proxy"
	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/gateway/internal/upstream"
	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/handoff"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/web"
	"github.com/nats-io/nats.go"
)

// Config is the gateway's configuration.
type Config struct {
	Addr           string
	MetricsAddr    string // "" when off
	Pprof          bool   // Go's profiles at /debug/pprof/ on the metrics listener
	AuthURLs       []string
	FilesURLs      []string
	LogsURLs       []string
	TusURLs        []string // the files service's tus listeners
	PrivateKey     string
	Credential     string
	SessionTTL     time.Duration
	TokenTTL       time.Duration
	AllowedOrigins []string
	PublicURLs     []string // the origins browsers use for the gateway (Host and Origin checks)
	NATSURL        string
	SubjectPrefix  string
	ShutdownGrace  time.Duration
	ReadHeader     time.Duration
	Read           time.Duration // whole request, body included; 0 = off (uploads may be long)
	Write          time.Duration // whole response; 0 = off (downloads may be long)
	BodyIdle       time.Duration // a request body making no progress for this long is cut (408)
	StreamRecheck  time.Duration // a request still running re-checks its session or API key this often
	Idle           time.Duration
	MaxHeaderBytes int
	BodyLimits     map[string]int64
	// The balancer over each service's replicas (package upstream).
	ResolveInterval time.Duration // host names of the *_URL settings resolved again
	ProbeInterval   time.Duration // GET /readyz of every address
	ProbeTimeout    time.Duration
	EjectMax        time.Duration // longest wait before a down address is probed again
	RetryWait       time.Duration // requests wait this long for a replica of a service that has none usable; 0: never
	Handoff         bool          // fetch and send the objects the files service hands off (package handoff)
	ObjectCache     handoff.CacheConfig
}

func loadConfig(getenv func(string) string) (Config, *config.Reader, error) {
	r := config.New("GATEWAY", getenv)
	c := Config{
		Addr:            r.Own("ADDR", "127.0.0.1:8080"),
		MetricsAddr:     r.Own("METRICS_ADDR", "127.0.0.1:9090"),
		Pprof:           r.Bool("PPROF", false),
		AuthURLs:        r.List("AUTH_URL", "http://127.0.0.1:8081"),
		FilesURLs:       r.List("FILES_URL", "http://127.0.0.1:8082"),
		LogsURLs:        r.List("LOGS_URL", "http://127.0.0.1:8083"),
		TusURLs:         r.List("TUS_URL", "http://127.0.0.1:8086"),
		PrivateKey:      r.Secret("IDENTITY_PRIVATE_KEY", ""),
		Credential:      r.Secret("SERVICE_CREDENTIAL", ""),
		SessionTTL:      r.Duration("SESSION_CACHE_TTL", 5*time.Second),
		TokenTTL:        r.Duration("TOKEN_TTL", 30*time.Second),
		AllowedOrigins:  r.List("ALLOWED_ORIGINS", ""),
		PublicURLs:      strings.Split(r.Own("PUBLIC_URL", ""), ","), // never the unprefixed PUBLIC_URL
		NATSURL:         r.URLWithLogin("NATS_URL", "nats://127.0.0.1:4222", "NATS_USER", "NATS_PASSWORD"),
		SubjectPrefix:   r.String("NATS_SUBJECT_PREFIX", "acme"),
		ShutdownGrace:   r.Duration("SHUTDOWN_GRACE", 20*time.Second),
		ReadHeader:      r.Duration("READ_HEADER_TIMEOUT", 10*time.Second),
		Read:            r.Duration("READ_TIMEOUT", 0),
		Write:           r.Duration("WRITE_TIMEOUT", 0),
		BodyIdle:        r.Duration("BODY_IDLE_TIMEOUT", 30*time.Second),
		StreamRecheck:   r.Duration("STREAM_RECHECK", 2*time.Second),
		Idle:            r.Duration("IDLE_TIMEOUT", 120*time.Second),
		MaxHeaderBytes:  r.Int("MAX_HEADER_BYTES", 32<<10),
		ResolveInterval: r.Duration("RESOLVE_INTERVAL", 2*time.Second),
		ProbeInterval:   r.Duration("PROBE_INTERVAL", 2*time.Second),
		ProbeTimeout:    r.Duration("PROBE_TIMEOUT", 2*time.Second),
		EjectMax:        r.Duration("EJECT_BACKOFF_MAX", 5*time.Second),
		RetryWait:       r.Duration("RETRY_WAIT", 5*time.Second),
		Handoff:         r.Bool("HANDOFF", true),
		ObjectCache: handoff.CacheConfig{
			Bytes:     r.Int64("OBJECT_CACHE_BYTES", 32<<20),
			MaxObject: r.Int64("OBJECT_CACHE_MAX_OBJECT", 2<<20),
			TTL:       r.Duration("OBJECT_CACHE_TTL", 5*time.Minute),
		},
		BodyLimits: map[string]int64{
			"auth":   r.Int64("MAX_AUTH_BODY", 64<<10),
			"logs":   r.Int64("MAX_LOGS_BODY", 6*64<<10+64<<10),
			"files":  r.Int64("MAX_FILES_BODY", 64<<10),
			"upload": r.Int64("MAX_UPLOAD", 1<<30+64<<10),
			"image":  r.Int64("MAX_IMAGE_UPLOAD", 20<<20+64<<10),
		},
	}
	if err := r.Err(); err != nil {
		return c, r, err
	}
	if _, err := proxy.ParseOrigins(c.PublicURLs); err != nil {
		return c, r, fmt.Errorf("GATEWAY_PUBLIC_URL: %w", err)
	}
	if c.PrivateKey == "" {
		return c, r, errors.New("GATEWAY_IDENTITY_PRIVATE_KEY is required")
	}
	if c.Credential == "" {
		return c, r, errors.New("GATEWAY_SERVICE_CREDENTIAL (or SERVICE_CREDENTIAL) is required")
	}
	for k, d := range map[string]time.Duration{"RESOLVE_INTERVAL": c.ResolveInterval, "PROBE_INTERVAL": c.ProbeInterval,
		"PROBE_TIMEOUT": c.ProbeTimeout, "EJECT_BACKOFF_MAX": c.EjectMax, "STREAM_RECHECK": c.StreamRecheck} {
		if d <= 0 {
			return c, r, fmt.Errorf("GATEWAY_%s must be positive", k)
		}
	}
	if c.ObjectCache.Bytes < 0 || c.ObjectCache.MaxObject < 0 || c.ObjectCache.TTL < 0 {
		return c, r, errors.New("GATEWAY_OBJECT_CACHE_BYTES, _MAX_OBJECT and _TTL must not be negative (0 turns the cache off)")
	}
	if c.RetryWait < 0 {
		return c, r, errors.New("GATEWAY_RETRY_WAIT must not be negative (0 turns waiting off)")
	}
	if c.MaxHeaderBytes < 1<<10 {
		return c, r, errors.New("GATEWAY_MAX_HEADER_BYTES must be at least 1024")
	}
	if c.MetricsAddr == "off" {
		c.MetricsAddr = ""
	} else if c.MetricsAddr == c.Addr && !strings.HasSuffix(c.Addr, ":0") {
		return c, r, errors.New("GATEWAY_METRICS_ADDR must differ from GATEWAY_ADDR: metrics are not served on the public port")
	}
	return c, r, nil
}

// Run serves the gateway until ctx ends. ready, if set, receives the bound
// address.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string)) error {
	return run(ctx, getenv, stdout, ready, hooks{})
}

// hooks let tests learn more than Run tells.
type hooks struct {
	metricsReady func(addr string) // the metrics listener's bound address
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string), hk hooks) error {
	base := slog.NewJSONHandler(stdout, nil)
	log := slog.New(base).With("service", "gateway")
	cfg, reader, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	reader.Log(log)
	key, err := identity.ParsePrivateKey(cfg.PrivateKey)
	if err != nil {
		return err
	}

	transport := &http.Transport{
		Proxy:        nil,
		DialContext:  (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns: 1024,
		// Per replica address (the balancer dials addresses, not names).
		// Each connection holds 128 KiB of buffers: a burst of hundreds of
		// requests (sign-ins queueing for their hash) would otherwise leave
		// tens of MiB of idle connections for IdleConnTimeout; connections
		// past this many are closed after their request.
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // pass Accept-Encoding and encoded bodies through untouched
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      64 << 10,
	}
	// Requests are counted by the route table entry (the proxy names it)
	// or the mux pattern, and per replica address by the balancer. The
	// metrics are served on their own listener, never on the public port
	// and never proxied (see docs/operations.md).
	reg := metrics.NewRegistry()
	upstreamMetrics := upstream.NewMetrics(reg)
	// One balancer per service, for the proxy and the session lookup
	// alike: names re-resolved, every address probed, least outstanding
	// requests first (docs/deployment.md, "Scaling").
	groups := map[string]*upstream.Group{}
	for _, name := range []string{"auth", "files", "logs", "tus"} {
		urls := map[string][]string{"auth": cfg.AuthURLs, "files": cfg.FilesURLs, "logs": cfg.LogsURLs, "tus": cfg.TusURLs}[name]
		g, err := upstream.New(name, urls, upstream.Options{
			Transport: transport, ResolveInterval: cfg.ResolveInterval,
			ProbeInterval: cfg.ProbeInterval, ProbeTimeout: cfg.ProbeTimeout, BackoffMax: cfg.EjectMax,
			RetryWait: cfg.RetryWait, Metrics: upstreamMetrics, Log: log,
		})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer g.Close()
		groups[name] = g
	}
	resolver := sessions.NewResolver(groups["auth"], cfg.Credential, &http.Client{Transport: groups["auth"]}, cfg.SessionTTL)
	// A lookup may wait for an auth replica (GATEWAY_RETRY_WAIT) and then
	// still has its 5 s for the answer.
	resolver.SetTimeout(5*time.Second + cfg.RetryWait)
	// API keys (Authorization: Bearer) are resolved and cached the same
	// way, through auth's GET /ms/apikey, and revoked by the same events.
	keys := sessions.NewKeyResolver(groups["auth"], cfg.Credential, &http.Client{Transport: groups["auth"]}, cfg.SessionTTL)
	keys.SetTimeout(5*time.Second + cfg.RetryWait)

	// Revocations from auth over NATS. The gateway keeps serving while NATS
	// is away (the cache TTL bounds staleness) and reconnects by itself.
	nc, err := natsconn.Connect(cfg.NATSURL, "gateway", log, nats.RetryOnFailedConnect(true), nats.ReconnectWait(500*time.Millisecond))
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	// The gateway's own errors also go to the log store, as LOGGING.
	log, closeSelfLog, err := logclient.SelfLogger(nc, cfg.SubjectPrefix, base, "LOGGING", "service", "gateway")
	if err != nil {
		return err
	}
	defer closeSelfLog() // idempotent; called in order below on a normal stop
	// Lines logged with a request's context carry its id.
	log = web.WithRequestIDs(log)
	// Revocations are applied as they arrive, and a cached session is only
	// served after a NATS round trip proves every revocation published
	// before the request has been applied (see sessions.Revocations): a
	// sign-out through any gateway replica is refused by all of them at once.
	revocations, err := sessions.NewRevocations(nc, cfg.SubjectPrefix+".auth.revoked", resolver, log, keys)
	if err != nil {
		return fmt.Errorf("nats subscribe: %w", err)
	}
	defer revocations.Close()
	resolver.SetFence(revocations.Sync)
	keys.SetFence(revocations.Sync)

	// Server-sent-event streams end as shutdown begins (see below).
	streams, stopStreams := context.WithCancel(context.Background())
	defer stopStreams()
	var fetcher *handoff.Fetcher
	if cfg.Handoff {
		fetcher = handoff.NewFetcher(reg, cfg.ObjectCache)
		defer fetcher.Close()
		// Deleted files leave the object cache as the files service
		// announces them (they are never sent from it in any case: the
		// files service no longer hands them off).
		forget := handoff.ApplyDeleted(fetcher.Forget, fetcher.ForgetAll, log)
		sub, err := nc.Subscribe(handoff.DeletedSubject(cfg.SubjectPrefix), func(m *nats.Msg) { forget(m.Data) })
		if err != nil {
			return fmt.Errorf("nats subscribe: %w", err)
		}
		defer sub.Unsubscribe()
	}
	public, _ := proxy.ParseOrigins(cfg.PublicURLs) // checked by loadConfig
	handler := proxy.New(proxy.Config{
		Public:    public,
		Handoff:   fetcher,
		Streams:   streams,
		Upstreams: groups, Resolver: resolver, Keys: keys, Signer: identity.NewSigner(key, cfg.TokenTTL),
		AllowedOrigins: cfg.AllowedOrigins, Log: log, TokenTTL: cfg.TokenTTL,
		BodyLimits: cfg.BodyLimits, StreamRecheck: cfg.StreamRecheck,
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", readyz(groups, nc))
	openapi.Register(mux) // GET /openapi.yaml, /openapi.json: the public API's document
	console.Register(mux) // GET /console/: the web console (static, embedded)
	mux.Handle("/", handler)

	srv := &http.Server{
		// Requests for a Host that is not the gateway's are refused (421)
		// before anything else (DNS rebinding; proxy.CheckHost).
		Handler:           guard(metrics.NewHTTP(reg).Middleware(web.RecoverHTTP(log, proxy.CheckHost(public, mux))), cfg.MaxHeaderBytes, cfg.BodyIdle),
		ReadHeaderTimeout: cfg.ReadHeader,
		ReadTimeout:       cfg.Read,
		WriteTimeout:      cfg.Write,
		IdleTimeout:       cfg.Idle,
		// net/http answers a plain-text 431 past this; guard answers JSON
		// between GATEWAY_MAX_HEADER_BYTES and twice that.
		MaxHeaderBytes: 2 * cfg.MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	var msrv *http.Server
	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		mmux := http.NewServeMux()
		mmux.Handle("GET "+web.MetricsPath, metrics.Handler(reg))
		if cfg.Pprof {
			// CPU, heap and goroutine profiles for `go tool pprof`, on the
			// private listener only (docs/operations.md, "Profiling").
			mmux.HandleFunc("/debug/pprof/", pprof.Index)
			mmux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mmux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		msrv = &http.Server{Handler: mmux, ReadHeaderTimeout: cfg.ReadHeader, IdleTimeout: cfg.Idle,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() {
			if err := msrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener stopped", "err", err)
			}
		}()
		log.Info("metrics listening", "addr", mln.Addr().String())
		if hk.metricsReady != nil {
			hk.metricsReady(mln.Addr().String())
		}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		if msrv != nil {
			msrv.Close()
		}
		return err
	}
	log.Info("gateway listening", "addr", ln.Addr().String())
	if ready != nil {
		ready(ln.Addr().String())
	}

	stopSweep := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				resolver.Sweep()
				keys.Sweep()
			case <-stopSweep:
				return
			}
		}
	}()
	defer close(stopSweep)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if msrv != nil {
			msrv.Close()
		}
		return err
	case <-ctx.Done():
	}
	// Shutdown: the listener closes at once (new connections are refused),
	// in-flight requests finish within GATEWAY_SHUTDOWN_GRACE (streams
	// still running then are cut), the metrics listener stops, our
	// buffered error logs are published, and NATS drains. Requests waiting
	// for a replica (GATEWAY_RETRY_WAIT) give up within half the grace, so
	// they are answered 503 rather than cut.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	for _, g := range groups {
		g.StopWaiting(time.Now().Add(cfg.ShutdownGrace / 2))
	}
	stopStreams() // live streams never finish by themselves
	err = srv.Shutdown(sctx)
	if err != nil {
		log.Warn("in-flight requests cut at the shutdown deadline", "grace", cfg.ShutdownGrace.String(), "err", err)
		srv.Close()
	}
	if msrv != nil {
		mctx, mcancel := context.WithTimeout(context.Background(), time.Second)
		if msrv.Shutdown(mctx) != nil {
			msrv.Close()
		}
		mcancel()
	}
	closeSelfLog()
	if derr := nc.Drain(); derr != nil && !errors.Is(derr, nats.ErrConnectionClosed) {
		log.Warn("nats drain", "err", derr)
	}
	log.Info("gateway stopped")
	return err
}

// readyz answers 200 when NATS is connected and every deployed service has
// at least one replica (an address the balancer knows now) whose readiness
// probe passes: the gateway can serve all its routes, though a replica may
// be sick or being replaced. Each address is probed now, not read from the
// balancer's last probe, so a replica that just stopped is seen at once;
// the answers also feed the balancer. The checks count replicas per
// service ("ok (2 of 3 replicas ready)", "no replica ready (0 of 3)");
// they never name an address (this is the public port; the per-address
// figures are on the metrics listener).
func readyz(groups map[string]*upstream.Group, nc *nats.Conn) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		checks := map[string]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		ok := true
		for name, g := range groups {
			if !g.Deployed() {
				mu.Lock()
				checks[name] = "not deployed" // its routes answer 503 service_not_deployed
				mu.Unlock()
				continue
			}
			wg.Go(func() {
				res := g.CheckNow(ctx)
				ready := 0
				for _, c := range res {
					if c.Result == "ok" {
						ready++
					}
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case len(res) == 0:
					checks[name] = "no replica ready (no address)" // the name resolves to nothing
				case ready == 0:
					checks[name] = fmt.Sprintf("no replica ready (0 of %d)", len(res))
				default:
					checks[name] = fmt.Sprintf("ok (%d of %d replicas ready)", ready, len(res))
				}
				if ready == 0 {
					ok = false
				}
			})
		}
		wg.Wait()
		if nc.IsConnected() {
			checks["nats"] = "ok"
		} else {
			checks["nats"] = "disconnected"
			ok = false
		}
		if !ok {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "code": "not_ready", "checks": checks})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "checks": checks})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
