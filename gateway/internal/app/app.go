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
	"sync"
	"time"

	"github.com/acme/platform/gateway/internal/console"
	"github.com/acme/platform/gateway/internal/openapi"
	"github.com/acme/platform/gateway/internal/proxy"
	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/gateway/internal/upstream"
	"github.com/acme/platform/pkg/handoff"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/service"
	"github.com/acme/platform/pkg/web"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

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
	cfg, reader, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	p, err := service.Start("gateway", stdout, cfg.LogLevel, reader)
	if err != nil {
		return err
	}
	defer p.Close() // on an early return; Stop below on a normal one
	key, err := identity.ParsePrivateKey(cfg.PrivateKey)
	if err != nil {
		return err
	}
	// Requests are counted by the route table entry (the proxy names it)
	// or the mux pattern, and per replica address by the balancer. The
	// metrics are served on their own listener, never on the public port
	// and never proxied (see docs/operations.md).
	reg := metrics.NewRegistry()
	groups, err := balance(p, cfg, upstream.NewMetrics(reg))
	if err != nil {
		return err
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
	nc, err := p.ConnectNATS(cfg.NATSURL, "gateway", p.Log, nats.RetryOnFailedConnect(true), nats.ReconnectWait(500*time.Millisecond))
	if err != nil {
		return err
	}
	// The gateway's own errors also go to the log store, as LOGGING.
	if err := p.SelfLog(cfg.SubjectPrefix, "LOGGING"); err != nil {
		return err
	}
	log := p.Log
	// Revocations are applied as they arrive, and a cached session is only
	// served after a NATS round trip proves every revocation published
	// before the request has been applied (see sessions.Revocations): a
	// sign-out through any gateway replica is refused by all of them at once.
	revocations, err := sessions.NewRevocations(nc, cfg.SubjectPrefix+".auth.revoked", resolver, log, keys)
	if err != nil {
		return fmt.Errorf("nats subscribe: %w", err)
	}
	p.Defer(revocations.Close)
	resolver.SetFence(revocations.Sync)
	keys.SetFence(revocations.Sync)

	// Server-sent-event streams end as shutdown begins (see below).
	streams, stopStreams := context.WithCancel(context.Background())
	p.Defer(stopStreams)
	fetcher, err := handOff(p, cfg, reg)
	if err != nil {
		return err
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
	msrv, err := serveMetrics(cfg, reg, log, hk.metricsReady)
	if err != nil {
		return err
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
	stopSweep := sweepCaches(resolver, keys)
	p.Defer(stopSweep)

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
	return p.Stop(shutdown(cfg, srv, msrv, groups, stopStreams, log))
}

// balance starts one balancer per service, for the proxy and the session
// lookup alike: names re-resolved, every address probed, least
// outstanding requests first (docs/deployment.md, "Scaling"). They close
// with the process.
func balance(p *service.Process, cfg Config, m *upstream.Metrics) (map[string]*upstream.Group, error) {
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
	groups := map[string]*upstream.Group{}
	for _, name := range []string{"auth", "files", "logs", "tus"} {
		urls := map[string][]string{"auth": cfg.AuthURLs, "files": cfg.FilesURLs, "logs": cfg.LogsURLs, "tus": cfg.TusURLs}[name]
		g, err := upstream.New(name, urls, upstream.Options{
			Transport: transport, ResolveInterval: cfg.ResolveInterval,
			ProbeInterval: cfg.ProbeInterval, ProbeTimeout: cfg.ProbeTimeout, BackoffMax: cfg.EjectMax,
			RetryWait: cfg.RetryWait, Metrics: m, Log: p.Log,
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		p.Defer(g.Close)
		groups[name] = g
	}
	return groups, nil
}

// handOff returns the fetcher of the objects the files service hands off,
// or nil when GATEWAY_HANDOFF is off. Deleted files leave its object cache
// as the files service announces them (they are never sent from it in any
// case: the files service no longer hands them off).
func handOff(p *service.Process, cfg Config, reg *prometheus.Registry) (*handoff.Fetcher, error) {
	if !cfg.Handoff {
		return nil, nil
	}
	fetcher := handoff.NewFetcher(reg, cfg.ObjectCache)
	p.Defer(fetcher.Close)
	forget := handoff.ApplyDeleted(fetcher.Forget, fetcher.ForgetAll, p.Log)
	sub, err := p.NATS.Subscribe(handoff.DeletedSubject(cfg.SubjectPrefix), func(m *nats.Msg) { forget(m.Data) })
	if err != nil {
		return nil, fmt.Errorf("nats subscribe: %w", err)
	}
	p.Defer(func() { _ = sub.Unsubscribe() })
	return fetcher, nil
}

// serveMetrics starts the metrics listener (GATEWAY_METRICS_ADDR), with
// Go's profiles when GATEWAY_PPROF is set; nil when it is off.
func serveMetrics(cfg Config, reg *prometheus.Registry, log *slog.Logger, ready func(string)) (*http.Server, error) {
	if cfg.MetricsAddr == "" {
		return nil, nil
	}
	mln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
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
	msrv := &http.Server{Handler: mmux, ReadHeaderTimeout: cfg.ReadHeader, IdleTimeout: cfg.Idle,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := msrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	log.Info("metrics listening", "addr", mln.Addr().String())
	if ready != nil {
		ready(mln.Addr().String())
	}
	return msrv, nil
}

// sweepCaches drops expired sessions and API keys every minute until the
// returned function is called.
func sweepCaches(resolver, keys *sessions.Resolver) (stop func()) {
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
	return func() { close(stopSweep) }
}

// shutdown stops the servers once ctx ended: the listener closes at once
// (new connections are refused), in-flight requests finish within
// GATEWAY_SHUTDOWN_GRACE (streams still running then are cut), and the
// metrics listener stops; then Stop publishes our buffered error logs and
// drains NATS. Requests waiting for a replica (GATEWAY_RETRY_WAIT) give
// up within half the grace, so they are answered 503 rather than cut.
func shutdown(cfg Config, srv, msrv *http.Server, groups map[string]*upstream.Group, stopStreams func(), log *slog.Logger) error {
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	for _, g := range groups {
		g.StopWaiting(time.Now().Add(cfg.ShutdownGrace / 2))
	}
	stopStreams() // live streams never finish by themselves
	err := srv.Shutdown(sctx)
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
