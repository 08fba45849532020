// Package app wires the logs service together: configuration, MongoDB,
// NATS JetStream ingestion, retention and the HTTP API.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/httpapi"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"github.com/acme/platform/services/logs/internal/natsingest"
	"github.com/acme/platform/services/logs/internal/otlpingest"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Settings is the service's configuration.
type Settings struct {
	Addr, MongoURL, MongoDB, NATSURL, Prefix, PublicKey string
	Org                                                 string
	Apps                                                []string
	MaxBody                                             int
	HTTP                                                httpapi.Config
	Ingest                                              natsingest.Config
	IngestEnabled                                       bool
	Retention, RetentionInterval, ShutdownGrace         time.Duration
	SelfLog                                             bool
	MetricsInterval                                     time.Duration // consumer lag refresh
	ReadTimeout, IdleTimeout                            time.Duration // HTTP: one request; an idle keep-alive
	ChunkCacheMB                                        int           // recently used chunks kept in memory
	FilterScan                                          int           // chunks a filtered read looks at, at most
	RecordDocuments                                     bool          // copy the records as plain documents to log_records
	Tail                                                httpapi.TailConfig
	ServiceCredentials                                  []string // accepted on POST /v1/logs
}

// Load reads the settings.
func Load(getenv func(string) string) (Settings, *config.Reader, error) {
	r := config.New("LOGS", getenv)
	s := Settings{
		Addr:      r.Own("ADDR", "127.0.0.1:8083"),
		MongoURL:  r.MongoURL("mongodb://127.0.0.1:27017"),
		MongoDB:   r.String("MONGO_DB", "acme"),
		NATSURL:   r.URLWithLogin("NATS_URL", "nats://127.0.0.1:4222", "NATS_USER", "NATS_PASSWORD"),
		Prefix:    r.String("NATS_SUBJECT_PREFIX", "acme"),
		PublicKey: r.String("IDENTITY_PUBLIC_KEY", ""),
		Org:       r.Own("ORG", "ACME"),
	}
	for _, v := range []string{r.Secret("SERVICE_CREDENTIALS", ""), r.Secret("SERVICE_CREDENTIAL", "")} {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				s.ServiceCredentials = append(s.ServiceCredentials, c)
			}
		}
	}
	s.Apps = r.List("APPS", "")
	if len(s.Apps) == 0 {
		s.Apps = logs.DefaultAppNames(s.Org)
	}
	s.MaxBody = int(r.Int64("MAX_BODY", 64<<10))
	s.HTTP = httpapi.Config{
		PageSize: r.Int("PAGE_SIZE", 50),
		MaxLimit: r.Int("MAX_LIMIT", 500),
		MaxPage:  r.Int("MAX_PAGE", 100000),
		// A search (q=) answers within this budget, with a cursor when it
		// had to stop before its page was full.
		SearchBudget: r.Duration("SEARCH_BUDGET", time.Second),
	}
	s.Ingest = natsingest.Config{
		Prefix:       s.Prefix,
		Consumer:     r.Own("CONSUMER", "logs-writer"),
		BatchSize:    r.Int("BATCH", 500),
		FetchWait:    r.Duration("FETCH_WAIT", 500*time.Millisecond),
		AckWait:      r.Duration("ACK_WAIT", 30*time.Second),
		MaxDeliver:   r.Int("MAX_DELIVER", 20),
		Duplicates:   r.Duration("DUPLICATE_WINDOW", 2*time.Minute),
		StreamMaxAge: r.Duration("STREAM_MAX_AGE", 168*time.Hour),
		Replicas:     r.Int("STREAM_REPLICAS", 1),
	}
	s.IngestEnabled = r.Bool("INGEST", true)
	s.Retention = r.Duration("RETENTION", 720*time.Hour)
	s.RetentionInterval = r.Duration("RETENTION_INTERVAL", time.Hour)
	s.ShutdownGrace = r.Duration("SHUTDOWN_GRACE", 10*time.Second)
	s.SelfLog = r.Bool("SELF_LOG", true)
	s.MetricsInterval = r.Duration("METRICS_INTERVAL", 15*time.Second)
	s.ReadTimeout = r.Duration("READ_TIMEOUT", 60*time.Second)
	s.ChunkCacheMB = r.Int("CHUNK_CACHE_MB", mongostore.DefaultChunkCacheBytes>>20)
	s.FilterScan = r.Int("FILTER_SCAN", mongostore.DefaultFilterScan)
	s.RecordDocuments = r.Bool("RECORD_DOCUMENTS", false)
	s.IdleTimeout = r.Duration("IDLE_TIMEOUT", 90*time.Second)
	s.Tail = httpapi.TailConfig{
		Heartbeat: r.Duration("TAIL_HEARTBEAT", 15*time.Second),
		Buffer:    r.Int("TAIL_BUFFER", 256),
		MaxOpen:   r.Int("TAIL_MAX_OPEN", 100),
	}
	if err := r.Err(); err != nil {
		return s, r, err
	}
	var problems []string
	if s.PublicKey == "" {
		problems = append(problems, "IDENTITY_PUBLIC_KEY is required")
	}
	if s.MetricsInterval <= 0 {
		problems = append(problems, "LOGS_METRICS_INTERVAL must be positive")
	}
	if s.ReadTimeout <= 0 || s.IdleTimeout <= 0 {
		problems = append(problems, "LOGS_READ_TIMEOUT and LOGS_IDLE_TIMEOUT must be positive")
	}
	if s.ChunkCacheMB < 0 || s.ChunkCacheMB > 1<<20 {
		problems = append(problems, "LOGS_CHUNK_CACHE_MB must be between 0 and 1048576")
	}
	if s.HTTP.SearchBudget <= 0 {
		problems = append(problems, "LOGS_SEARCH_BUDGET must be positive")
	}
	if s.FilterScan < 1 {
		problems = append(problems, "LOGS_FILTER_SCAN must be at least 1")
	}
	if s.MaxBody < 1 {
		problems = append(problems, "LOGS_MAX_BODY must be positive")
	}
	if s.HTTP.PageSize < 1 || s.HTTP.MaxLimit < s.HTTP.PageSize || s.HTTP.MaxPage < 1 {
		problems = append(problems, "need 1 <= LOGS_PAGE_SIZE <= LOGS_MAX_LIMIT and LOGS_MAX_PAGE >= 1")
	}
	if s.Ingest.BatchSize < 1 || s.Ingest.MaxDeliver < 2 || s.Ingest.AckWait <= 0 || s.Ingest.FetchWait <= 0 {
		problems = append(problems, "need LOGS_BATCH >= 1, LOGS_MAX_DELIVER >= 2, positive LOGS_ACK_WAIT and LOGS_FETCH_WAIT")
	}
	for _, a := range s.Apps {
		if !logclient.ValidToken(a) {
			problems = append(problems, fmt.Sprintf("app name %q cannot be a subject token", a))
		}
	}
	if len(problems) > 0 {
		return s, r, fmt.Errorf("configuration: %v", problems)
	}
	return s, r, nil
}

// Run starts the service and serves until ctx ends.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string)) error {
	base := slog.NewJSONHandler(stdout, nil)
	log := slog.New(base).With("service", "logs")
	s, r, err := Load(getenv)
	if err != nil {
		return err
	}
	r.Log(log)
	pub, err := identity.ParsePublicKey(s.PublicKey)
	if err != nil {
		return err
	}

	mc, disconnect, err := mongox.Connect(ctx, options.Client().ApplyURI(s.MongoURL).SetServerSelectionTimeout(10*time.Second), 30*time.Second)
	if err != nil {
		return err
	}
	defer disconnect()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	store := mongostore.New(mc.Database(s.MongoDB))
	store.SetChunkCache(int64(s.ChunkCacheMB) << 20)
	store.SetFilterScan(s.FilterScan)
	store.SetRecordDocuments(s.RecordDocuments)
	if err := store.EnsureIndexes(sctx); err != nil {
		return err
	}
	appList, err := store.EnsureApps(sctx, s.Apps)
	if err != nil {
		return fmt.Errorf("seed apps: %w", err)
	}
	apps := logs.NewApps(appList)
	validator := logs.Validator{Apps: apps, MaxBody: s.MaxBody}

	nc, err := natsconn.Connect(s.NATSURL, "logs", log)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
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

	// Our own errors go to the log stream too, as app LOGGING.
	var self *logclient.Client
	if s.SelfLog {
		if self, err = logclient.New(nc, logclient.Options{Prefix: s.Prefix, MaxBody: s.MaxBody, Logger: log}); err != nil {
			return err
		}
		log = slog.New(logclient.SlogHandler(base, self, "LOGGING")).With("service", "logs")
	}
	// Lines logged with a request's context carry its id.
	log = web.WithRequestIDs(log)

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
	if self != nil {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = self.Close(fctx)
		cancel()
	}
	if err := nc.Drain(); err != nil {
		log.Warn("nats drain", "err", err)
	}
	log.Info("stopped")
	return serveErr
}
