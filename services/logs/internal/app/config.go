package app

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/services/logs/internal/httpapi"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"github.com/acme/platform/services/logs/internal/natsingest"
)

// Prefix is the prefix of the logs service's own settings.
const Prefix = "LOGS"

// Table is every setting the logs service reads besides the shared ones,
// each defined here once; Load reads through it and docs/configuration.md
// is generated from it.
var Table = config.Table{
	{Key: "ADDR", Default: "127.0.0.1:8083", Doc: "listen address"},
	{Key: "SERVICE_CREDENTIALS", File: true, Secret: true, Doc: "comma-separated credentials accepted on `POST /v1/logs` (OpenTelemetry ingest), besides `SERVICE_CREDENTIAL`; none: every OTLP request is 401"},
	{Key: "SEARCH_BUDGET", Kind: config.Duration, Default: "1s", Doc: "how long a listing with `q=` reads before it answers `partial: true` with a cursor"},
	{Key: "ORG", Default: "ACME", Doc: "organisation word of the default app names"},
	{Key: "APPS", Kind: config.List, DefaultDoc: "`LOGGING`, `<ORG>-S3`, `<ORG>-AUTH`, `SERVER-APP-A`, `-B`, `-C`", Doc: "app names (each a NATS subject token)"},
	{Key: "MAX_BODY", Kind: config.Size, Default: "64KiB", Doc: "largest `logBody` in bytes"},
	{Key: "PAGE_SIZE", Kind: config.Int, Default: "50", Doc: "records per page"},
	{Key: "MAX_LIMIT", Kind: config.Int, Default: "500", Doc: "largest `?limit=`"},
	{Key: "MAX_PAGE", Kind: config.Int, Default: "100000", Doc: "largest page number"},
	{Key: "RETENTION", Kind: config.Duration, Default: "720h", Doc: "age after which records are deleted (`0s` = keep)"},
	{Key: "RETENTION_INTERVAL", Kind: config.Duration, Default: "1h", Doc: "how often retention runs"},
	{Key: "INGEST", Kind: config.Bool, Default: "true", Doc: "run the NATS consumer"},
	{Key: "CONSUMER", Default: "logs-writer", Doc: "durable consumer name"},
	{Key: "BATCH", Kind: config.Int, Default: "500", Doc: "messages per fetch and per write; also the largest group of POST /log requests written together"},
	{Key: "FETCH_WAIT", Kind: config.Duration, Default: "500ms", Doc: "longest wait for a batch"},
	{Key: "ACK_WAIT", Kind: config.Duration, Default: "30s", Doc: "ack wait and first redelivery delay"},
	{Key: "MAX_DELIVER", Kind: config.Int, Default: "20", Doc: "deliveries before JetStream gives up on a message"},
	{Key: "DUPLICATE_WINDOW", Kind: config.Duration, Default: "2m", Doc: "JetStream dedupe window"},
	{Key: "STREAM_MAX_AGE", Kind: config.Duration, Default: "168h", Doc: "how long the stream keeps messages"},
	{Key: "STREAM_REPLICAS", Kind: config.Int, Default: "1", Doc: "stream replicas (3 on a NATS cluster)"},
	{Key: "SELF_LOG", Kind: config.Bool, Default: "true", Doc: "publish own errors as app LOGGING"},
	{Key: "SHUTDOWN_GRACE", Kind: config.Duration, Default: "10s", Doc: "HTTP shutdown deadline"},
	{Key: "METRICS_INTERVAL", Kind: config.Duration, Default: "15s", Doc: "how often the consumer lag gauge is read"},
	{Key: "READ_TIMEOUT", Kind: config.Duration, Default: "60s", Doc: "longest time to receive one request (headers and body): stalled clients are cut off"},
	{Key: "IDLE_TIMEOUT", Kind: config.Duration, Default: "90s", Doc: "an idle keep-alive connection is closed after it"},
	{Key: "CHUNK_CACHE_MB", Kind: config.Int, Default: strconv.Itoa(mongostore.DefaultChunkCacheBytes >> 20), Doc: "recently written or read chunks kept in memory, in MiB (0: none)"},
	{Key: "FILTER_SCAN", Kind: config.Int, Default: strconv.Itoa(mongostore.DefaultFilterScan), Doc: "chunks a filtered listing (`from`, `to`, `metricsId`) looks at, at most, before it answers with what it found and `Logs-Resume-Before`"},
	{Key: "RECORD_DOCUMENTS", Kind: config.Bool, Default: "false", Doc: "also write every record as a plain document to `log_records`, for mongosh, Compass and mongoexport"},
	{Key: "TAIL_HEARTBEAT", Kind: config.Duration, Default: "15s", Doc: "comment line on an idle live tail (`GET /log/tail`); also how soon a gone viewer is noticed"},
	{Key: "TAIL_BUFFER", Kind: config.Int, Default: "256", Doc: "records held per live-tail viewer before it loses records (a `dropped` event says how many)"},
	{Key: "TAIL_MAX_OPEN", Kind: config.Int, Default: "100", Doc: "live tails open at once per logs replica; beyond, 503 `busy`"},
	{Key: "TAIL_MAX_PER_USER", Kind: config.Int, Default: "5", Doc: "live tails one user (all their sessions and API keys together) has open at once per logs replica; beyond, 429 `too_many_tails` with `Retry-After` (the heartbeat). At most `LOGS_TAIL_MAX_OPEN`"},
}

// Shared is the shared settings the logs service reads (pkg/config).
var Shared = config.Join(config.Logging, config.Mongo, config.NATS, config.Identity, config.ServiceCredential)

// Settings is the service's configuration.
type Settings struct {
	Addr, MongoURL, MongoDB, NATSURL, Prefix, PublicKey string
	LogLevel                                            string
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
	r := config.New(Prefix, getenv, Shared, Table)
	s := Settings{
		Addr:      r.String("ADDR"),
		LogLevel:  r.String("LOG_LEVEL"),
		MongoURL:  r.MongoURL(),
		MongoDB:   r.String("MONGO_DB"),
		NATSURL:   r.URLWithLogin("NATS_URL", "NATS_USER", "NATS_PASSWORD"),
		Prefix:    r.String("NATS_SUBJECT_PREFIX"),
		PublicKey: r.String("IDENTITY_PUBLIC_KEY"),
		Org:       r.String("ORG"),
	}
	for _, v := range []string{r.String("SERVICE_CREDENTIALS"), r.String("SERVICE_CREDENTIAL")} {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				s.ServiceCredentials = append(s.ServiceCredentials, c)
			}
		}
	}
	s.Apps = r.List("APPS")
	if len(s.Apps) == 0 {
		s.Apps = logs.DefaultAppNames(s.Org)
	}
	s.MaxBody = int(r.Int64("MAX_BODY"))
	s.HTTP = httpapi.Config{
		PageSize: r.Int("PAGE_SIZE"),
		MaxLimit: r.Int("MAX_LIMIT"),
		MaxPage:  r.Int("MAX_PAGE"),
		// A search (q=) answers within this budget, with a cursor when it
		// had to stop before its page was full.
		SearchBudget: r.Duration("SEARCH_BUDGET"),
	}
	s.Ingest = natsingest.Config{
		Prefix:       s.Prefix,
		Consumer:     r.String("CONSUMER"),
		BatchSize:    r.Int("BATCH"),
		FetchWait:    r.Duration("FETCH_WAIT"),
		AckWait:      r.Duration("ACK_WAIT"),
		MaxDeliver:   r.Int("MAX_DELIVER"),
		Duplicates:   r.Duration("DUPLICATE_WINDOW"),
		StreamMaxAge: r.Duration("STREAM_MAX_AGE"),
		Replicas:     r.Int("STREAM_REPLICAS"),
	}
	s.IngestEnabled = r.Bool("INGEST")
	s.Retention = r.Duration("RETENTION")
	s.RetentionInterval = r.Duration("RETENTION_INTERVAL")
	s.ShutdownGrace = r.Duration("SHUTDOWN_GRACE")
	s.SelfLog = r.Bool("SELF_LOG")
	s.MetricsInterval = r.Duration("METRICS_INTERVAL")
	s.ReadTimeout = r.Duration("READ_TIMEOUT")
	s.ChunkCacheMB = r.Int("CHUNK_CACHE_MB")
	s.FilterScan = r.Int("FILTER_SCAN")
	s.RecordDocuments = r.Bool("RECORD_DOCUMENTS")
	s.IdleTimeout = r.Duration("IDLE_TIMEOUT")
	s.Tail = httpapi.TailConfig{
		Heartbeat:  r.Duration("TAIL_HEARTBEAT"),
		Buffer:     r.Int("TAIL_BUFFER"),
		MaxOpen:    r.Int("TAIL_MAX_OPEN"),
		MaxPerUser: r.Int("TAIL_MAX_PER_USER"),
	}
	if err := r.Err(); err != nil {
		return s, r, err
	}
	if problems := s.check(); len(problems) > 0 {
		return s, r, fmt.Errorf("configuration: %v", problems)
	}
	return s, r, nil
}

// check returns the problems of values that parse but cannot work.
func (s Settings) check() []string {
	var problems []string
	add := func(bad bool, msg string) {
		if bad {
			problems = append(problems, msg)
		}
	}
	add(s.PublicKey == "", "IDENTITY_PUBLIC_KEY is required")
	add(s.MetricsInterval <= 0, "LOGS_METRICS_INTERVAL must be positive")
	add(s.ReadTimeout <= 0 || s.IdleTimeout <= 0, "LOGS_READ_TIMEOUT and LOGS_IDLE_TIMEOUT must be positive")
	add(s.ChunkCacheMB < 0 || s.ChunkCacheMB > 1<<20, "LOGS_CHUNK_CACHE_MB must be between 0 and 1048576")
	add(s.HTTP.SearchBudget <= 0, "LOGS_SEARCH_BUDGET must be positive")
	add(s.FilterScan < 1, "LOGS_FILTER_SCAN must be at least 1")
	add(s.MaxBody < 1, "LOGS_MAX_BODY must be positive")
	add(s.Tail.MaxOpen < 1 || s.Tail.MaxPerUser < 1 || s.Tail.MaxPerUser > s.Tail.MaxOpen,
		"need 1 <= LOGS_TAIL_MAX_PER_USER <= LOGS_TAIL_MAX_OPEN")
	add(s.HTTP.PageSize < 1 || s.HTTP.MaxLimit < s.HTTP.PageSize || s.HTTP.MaxPage < 1, "need 1 <= LOGS_PAGE_SIZE <= LOGS_MAX_LIMIT and LOGS_MAX_PAGE >= 1")
	add(s.Ingest.BatchSize < 1 || s.Ingest.MaxDeliver < 2 || s.Ingest.AckWait <= 0 || s.Ingest.FetchWait <= 0,
		"need LOGS_BATCH >= 1, LOGS_MAX_DELIVER >= 2, positive LOGS_ACK_WAIT and LOGS_FETCH_WAIT")
	for _, a := range s.Apps {
		add(!logclient.ValidToken(a), fmt.Sprintf("app name %q cannot be a subject token", a))
	}
	return problems
}
