// Package app wires the logs service together: configuration, MongoDB,
// NATS JetStream ingestion, retention and the HTTP API.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/pkg/service"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/httpapi"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"github.com/acme/platform/services/logs/internal/natsingest"
	"github.com/acme/platform/services/logs/internal/otlpingest"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Run starts the service and serves until ctx ends.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string)) error {
	s, r, err := Load(getenv)
	if err != nil {
		return err
	}
	p, err := service.Start("logs", stdout, s.LogLevel, r)
	if err != nil {
		return err
	}
	defer p.Close() // on an early return; Stop below on a normal one
	pub, err := identity.ParsePublicKey(s.PublicKey)
	if err != nil {
		return err
	}
	mc, disconnect, err := mongox.Connect(ctx, options.Client().ApplyURI(s.MongoURL).SetServerSelectionTimeout(10*time.Second), 30*time.Second)
	if err != nil {
		return err
	}
	p.Defer(disconnect)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	store, apps, err := openStore(sctx, mc.Database(s.MongoDB), s)
	if err != nil {
		return err
	}
	validator := logs.Validator{Apps: apps, MaxBody: s.MaxBody}

	nc, err := p.ConnectNATS(s.NATSURL, "logs", p.Log)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := natsingest.Setup(sctx, js, s.Ingest)
	if err != nil {
		return err
	}
	tag, err := natsingest.Tag(sctx, js, s.Prefix)
	if err != nil {
		return err
	}
	closeSelf, err := selfLog(p, s)
	if err != nil {
		return err
	}
	log := p.Log

	// POST /log writes through a group-commit writer that outlives the
	// HTTP server's shutdown, so in-flight requests complete.
	writer := logs.NewWriter(store, s.Ingest.BatchSize)
	wctx, stopWriter := context.WithCancel(context.WithoutCancel(ctx))
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); writer.Run(wctx) }()

	api := &httpapi.API{
		Store: store, Writer: writer, Apps: apps, Validator: validator, Config: s.HTTP,
		Verifier:   identity.NewVerifier(pub, "logs"),
		Tail:       &natsingest.Tail{JS: js, NC: nc, Config: s.Ingest, Validator: validator},
		TailConfig: s.Tail, Stop: ctx, Log: log,
		OTLP: otlpingest.Publisher{JS: js}, Prefix: s.Prefix, ServiceCredentials: s.ServiceCredentials,
		Checks: map[string]func(context.Context) error{
			"mongo": store.Ping,
			"nats": func(context.Context) error {
				if !nc.IsConnected() {
					return errors.New("nats not connected")
				}
				return nil
			},
		},
	}
	reg := metrics.NewRegistry()
	meter := newLogsMetrics(reg)
	app := web.NewApp(web.Options{Name: "logs", Log: log, BodyLimit: s.MaxBody*6 + 64<<10, Metrics: reg, ReadTimeout: s.ReadTimeout, IdleTimeout: s.IdleTimeout})
	api.Register(app)

	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if s.IngestEnabled {
		in := &natsingest.Ingestor{Consumer: cons, StreamTag: tag,
			RefreshTag: func(ctx context.Context) (string, error) { return natsingest.Tag(ctx, js, s.Prefix) }, Store: store, Validator: validator, Config: s.Ingest, Log: log, Meter: meter}
		wg.Go(func() {
			if err := in.Run(bg); err != nil {
				log.Error("ingest stopped", "err", err)
			}
		})
	}
	wg.Go(func() { logs.RunRetention(bg, store, s.Retention, s.RetentionInterval, log) })
	wg.Go(func() { pollConsumer(bg, cons, meter, s.MetricsInterval, log) })

	log.Info("listening", "addr", s.Addr)
	serveErr := web.Serve(ctx, app, s.Addr, s.ShutdownGrace, ready)
	stopWriter()
	<-writerDone
	stopBG()
	wg.Wait()
	closeSelf()
	return p.Stop(serveErr)
}

// openStore opens the log store with the settings, creates its indexes
// and seeds the app names.
func openStore(ctx context.Context, db *mongo.Database, s Settings) (*mongostore.Store, *logs.Apps, error) {
	store := mongostore.New(db)
	store.SetChunkCache(int64(s.ChunkCacheMB) << 20)
	store.SetFilterScan(s.FilterScan)
	store.SetRecordDocuments(s.RecordDocuments)
	if err := store.EnsureIndexes(ctx); err != nil {
		return nil, nil, err
	}
	appList, err := store.EnsureApps(ctx, s.Apps)
	if err != nil {
		return nil, nil, fmt.Errorf("seed apps: %w", err)
	}
	return store, logs.NewApps(appList), nil
}

// selfLog sends our own errors to the log stream too, as app LOGGING
// (unless LOGS_SELF_LOG is off), with the largest body the store takes;
// closeSelf publishes what is buffered (at most 5 s).
func selfLog(p *service.Process, s Settings) (closeSelf func(), err error) {
	closeSelf = func() {}
	if s.SelfLog {
		self, err := logclient.New(p.NATS, logclient.Options{Prefix: s.Prefix, MaxBody: s.MaxBody, Logger: p.Log})
		if err != nil {
			return nil, err
		}
		p.Log = slog.New(logclient.SlogHandler(p.Base, self, "LOGGING")).With("service", "logs")
		closeSelf = sync.OnceFunc(func() {
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = self.Close(fctx)
			cancel()
		})
		p.Defer(closeSelf)
	}
	// Lines logged with a request's context carry its id.
	p.Log = web.WithRequestIDs(p.Log)
	return closeSelf, nil
}
