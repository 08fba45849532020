// Package app wires the files service: configuration, MongoDB, S3, the
// orphan sweeper and the HTTP server.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/natsfence"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/filecache"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/acme/platform/services/files/internal/httpapi"
	"github.com/acme/platform/services/files/internal/imaging"
	"github.com/acme/platform/services/files/internal/mongostore"
	"github.com/acme/platform/services/files/internal/s3store"
	"github.com/acme/platform/services/files/internal/tusapi"
	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Config is the service's configuration.
type Config struct {
	Addr             string
	TusAddr          string
	TusExpiry        time.Duration
	MongoURL         string
	MongoDB          string
	S3               s3store.Options
	IdentityKey      string
	NATSURL          string
	SubjectPrefix    string
	PublicBaseURL    string
	MaxUpload        int64
	MaxMeta          int
	ReadAll          bool
	ImageMaxBytes    int64
	ImageMaxPixels   int64
	ImageMaxSide     int
	ImageQuality     int
	ImageConcurrency int
	ImageWait        time.Duration
	ImageMaxMemory   int64 // bytes one image may take to decode and re-encode
	ImageMemory      int64 // bytes all images being processed may take together
	Quota            int64
	EraseAckWait     time.Duration
	EraseMaxDeliver  int
	ReadIdle         time.Duration
	SweepInterval    time.Duration
	SweepAge         time.Duration
	ShutdownGrace    time.Duration
	RecordCacheTTL   time.Duration // 0 disables the record cache
	RecordCacheSize  int
	OwnerCacheTTL    time.Duration // 0 disables the owner cache (listings and usage)
	OwnerCacheSize   int           // records, pages and usages held
	HandoffTTL       time.Duration // presigned GETs for the gateway; 0: bytes always streamed here
}

// LoadConfig reads FILES_* and the shared settings.
func LoadConfig(getenv func(string) string) (Config, *config.Reader, error) {
	r := config.New("FILES", getenv)
	c := Config{
		Addr:      r.Own("ADDR", "127.0.0.1:8082"),
		TusAddr:   r.Own("TUS_ADDR", "127.0.0.1:8086"),
		TusExpiry: r.Duration("TUS_EXPIRY", 24*time.Hour),
		MongoURL:  r.MongoURL("mongodb://127.0.0.1:27017"),
		MongoDB:   r.String("MONGO_DB", "acme"),
		S3: s3store.Options{
			Endpoint:      r.String("S3_ENDPOINT", "127.0.0.1:9000"),
			AccessKey:     r.String("S3_ACCESS_KEY", ""),
			SecretKey:     r.Secret("S3_SECRET_KEY", ""),
			Bucket:        r.String("S3_BUCKET", "acme-files"),
			UseTLS:        r.Bool("S3_USE_TLS", false),
			PartSize:      uint64(r.Int64("S3_PART_SIZE", 8<<20)),
			UploadThreads: uint(r.Int("S3_UPLOAD_THREADS", 2)),
		},
		IdentityKey:      r.String("IDENTITY_PUBLIC_KEY", ""),
		NATSURL:          r.URLWithLogin("NATS_URL", "nats://127.0.0.1:4222", "NATS_USER", "NATS_PASSWORD"),
		SubjectPrefix:    r.String("NATS_SUBJECT_PREFIX", "acme"),
		PublicBaseURL:    r.String("PUBLIC_BASE_URL", "http://127.0.0.1:8080"),
		MaxUpload:        r.Int64("MAX_UPLOAD", 1<<30),
		MaxMeta:          r.Int("MAX_META", 4096),
		ReadAll:          r.Bool("READ_ALL", false),
		ImageMaxBytes:    r.Int64("IMAGE_MAX_BYTES", 20<<20),
		ImageMaxPixels:   r.Int64("IMAGE_MAX_PIXELS", 40_000_000),
		ImageMaxSide:     r.Int("IMAGE_MAX_SIDE", 2048),
		ImageQuality:     r.Int("IMAGE_QUALITY", 82),
		ImageConcurrency: r.Int("IMAGE_CONCURRENCY", 2),
		ImageWait:        r.Duration("IMAGE_WAIT", 30*time.Second),
		ImageMaxMemory:   r.Int64("IMAGE_MAX_MEMORY", 256<<20),
		ImageMemory:      r.Int64("IMAGE_MEMORY", 320<<20),
		Quota:            r.Int64("QUOTA", 10<<30),
		EraseAckWait:     r.Duration("ERASE_ACK_WAIT", 30*time.Second),
		EraseMaxDeliver:  r.Int("ERASE_MAX_DELIVER", 50),
		ReadIdle:         r.Duration("READ_IDLE_TIMEOUT", 60*time.Second),
		SweepInterval:    r.Duration("SWEEP_INTERVAL", 15*time.Minute),
		SweepAge:         r.Duration("SWEEP_AGE", time.Hour),
		ShutdownGrace:    r.Duration("SHUTDOWN_GRACE", 20*time.Second),
		RecordCacheTTL:   r.Duration("RECORD_CACHE_TTL", 5*time.Minute),
		RecordCacheSize:  r.Int("RECORD_CACHE_SIZE", 10000),
		OwnerCacheTTL:    r.Duration("OWNER_CACHE_TTL", time.Minute),
		OwnerCacheSize:   r.Int("OWNER_CACHE_SIZE", 20000),
		HandoffTTL:       r.Duration("HANDOFF_TTL", 15*time.Minute),
	}
	err := r.Err()
	var problems []string
	if c.IdentityKey == "" {
		problems = append(problems, "IDENTITY_PUBLIC_KEY is required")
	}
	if c.EraseAckWait < time.Second || c.EraseMaxDeliver < 2 {
		problems = append(problems, "FILES_ERASE_ACK_WAIT must be at least 1s and FILES_ERASE_MAX_DELIVER at least 2")
	}
	if c.TusExpiry < time.Second {
		problems = append(problems, "FILES_TUS_EXPIRY must be at least 1s")
	}
	if c.Quota < 0 {
		problems = append(problems, "FILES_QUOTA must not be negative (0: no quota)")
	}
	if c.MaxUpload <= 0 || c.ImageMaxBytes <= 0 || c.MaxMeta < 0 {
		problems = append(problems, "FILES_MAX_UPLOAD and FILES_IMAGE_MAX_BYTES must be positive, FILES_MAX_META not negative")
	}
	if c.ImageMaxPixels <= 0 || c.ImageMaxSide <= 0 || c.ImageQuality < 1 || c.ImageQuality > 100 || c.ImageConcurrency < 1 {
		problems = append(problems, "FILES_IMAGE_MAX_PIXELS, FILES_IMAGE_MAX_SIDE, FILES_IMAGE_CONCURRENCY must be positive, FILES_IMAGE_QUALITY 1..100")
	}
	if c.ImageMaxMemory < 1<<20 || c.ImageMemory < c.ImageMaxMemory {
		problems = append(problems, "FILES_IMAGE_MAX_MEMORY must be at least 1MiB and FILES_IMAGE_MEMORY at least FILES_IMAGE_MAX_MEMORY")
	}
	if c.S3.PartSize < 5<<20 || c.S3.UploadThreads < 1 {
		problems = append(problems, "FILES_S3_PART_SIZE must be at least 5MiB and FILES_S3_UPLOAD_THREADS at least 1")
	}
	if c.RecordCacheTTL < 0 || c.RecordCacheSize < 1 {
		problems = append(problems, "FILES_RECORD_CACHE_TTL must not be negative (0: off) and FILES_RECORD_CACHE_SIZE at least 1")
	}
	if c.OwnerCacheTTL < 0 || c.OwnerCacheSize < 1 {
		problems = append(problems, "FILES_OWNER_CACHE_TTL must not be negative (0: off) and FILES_OWNER_CACHE_SIZE at least 1")
	}
	if c.HandoffTTL != 0 && (c.HandoffTTL < time.Minute || c.HandoffTTL > 7*24*time.Hour) {
		problems = append(problems, "FILES_HANDOFF_TTL must be 0 (off) or between 1m and 168h (S3's longest presigned URL)")
	}
	if len(problems) > 0 {
		err = errors.Join(err, fmt.Errorf("configuration: %v", problems))
	}
	return c, r, err
}

// Run starts the service and serves until ctx ends.
func Run(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string)) error {
	return run(ctx, getenv, stdout, ready, hooks{})
}

// hooks let tests wrap the stores (fault injection).
type hooks struct {
	store   func(files.Store) files.Store
	objects func(files.ObjectStore) files.ObjectStore
	// tusReady receives the tus listener's bound address.
	tusReady func(addr string)
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(string), hk hooks) error {
	base := slog.NewJSONHandler(stdout, nil)
	log := slog.New(base).With("service", "files")
	cfg, reader, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	reader.Log(log)

	// NATS carries our own errors to the administrators' log store (as
	// ACME-S3). The service runs without it and reconnects by itself; the
	// log client buffers, bounded, meanwhile.
	nc, err := natsconn.Connect(cfg.NATSURL, "acme-files", nil, nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	log, closeSelfLog, err := logclient.SelfLogger(nc, cfg.SubjectPrefix, base, "ACME-S3", "service", "files")
	if err != nil {
		return err
	}
	defer closeSelfLog() // idempotent; called in order below on a normal stop
	// Lines logged with a request's context carry its id.
	log = web.WithRequestIDs(log)

	pub, err := identity.ParsePublicKey(cfg.IdentityKey)
	if err != nil {
		return err
	}
	verifier := identity.NewVerifier(pub, "files")

	// MongoDB
	mc, disconnect, err := mongox.Connect(ctx, options.Client().ApplyURI(cfg.MongoURL).
		SetServerSelectionTimeout(5*time.Second).
		SetConnectTimeout(5*time.Second), 15*time.Second)
	if err != nil {
		return err
	}
	defer disconnect()
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	records := mongostore.New(mc.Database(cfg.MongoDB))
	if err := records.EnsureIndexes(sctx); err != nil {
		return fmt.Errorf("mongo indexes: %w", err)
	}

	// S3
	objects, err := s3store.New(cfg.S3)
	if err != nil {
		return err
	}
	defer objects.Close()
	if err := objects.EnsureBucket(sctx); err != nil {
		return fmt.Errorf("s3 bucket %q: %w", cfg.S3.Bucket, err)
	}

	var store files.Store = records
	var recordCache *filecache.Cache
	var ownerCache *filecache.OwnerCache
	// Records read by downloads, images and retrieves are cached
	// (FILES_RECORD_CACHE_TTL), and so are owners' listing pages and usage
	// (FILES_OWNER_CACHE_TTL). Records never change; every replica applies
	// the deletions and changed owners any replica announces (every insert
	// and delete does, flushed, before it answers), and serves a cached
	// entry only after a NATS round trip begun after the request arrived
	// (pkg/natsfence), so a deleted file is refused, and a listing shows an
	// upload or deletion, on the next request everywhere. Without NATS the
	// fence fails and the database is read.
	if cfg.RecordCacheTTL > 0 {
		recordCache = filecache.NewCache(cfg.RecordCacheTTL, cfg.RecordCacheSize)
	}
	if cfg.OwnerCacheTTL > 0 {
		ownerCache = filecache.NewOwnerCache(cfg.OwnerCacheTTL, cfg.OwnerCacheSize)
	}
	if recordCache != nil || ownerCache != nil {
		fence, err := natsfence.New(nc, filecache.Subject(cfg.SubjectPrefix), filecache.Apply(recordCache, ownerCache, log), filecache.Reset(recordCache, ownerCache), log)
		if err != nil {
			return fmt.Errorf("nats subscribe: %w", err)
		}
		defer fence.Close()
		if recordCache != nil {
			recordCache.SetFence(fence.Sync)
		}
		if ownerCache != nil {
			ownerCache.SetFence(fence.Sync)
		}
	}
	// Deletions and changed owners are announced even with both caches
	// off: other replicas and the gateways' object caches drop them.
	store = filecache.New(store, recordCache, ownerCache, filecache.Publisher(nc, cfg.SubjectPrefix, log))
	var objStore files.ObjectStore = objects
	if hk.store != nil {
		store = hk.store(store)
	}
	if hk.objects != nil {
		objStore = hk.objects(objStore)
	}
	svc := files.NewService(store, objStore, slogPublisher{log}, files.Config{
		MaxUpload:        cfg.MaxUpload,
		ReadAll:          cfg.ReadAll,
		ImageMaxBytes:    cfg.ImageMaxBytes,
		ImageConcurrency: cfg.ImageConcurrency,
		ImageWait:        cfg.ImageWait,
		ImageMemory:      cfg.ImageMemory,
		DefaultQuota:     cfg.Quota,
		Image: imaging.Options{
			MaxPixels:   cfg.ImageMaxPixels,
			MaxMemory:   cfg.ImageMaxMemory,
			MaxSide:     cfg.ImageMaxSide,
			JPEGQuality: cfg.ImageQuality,
		},
	})

	reg := metrics.NewRegistry()
	if recordCache != nil {
		reg.MustRegister(recordCache.Collectors(metrics.Namespace, "files_record", "file records by id")...)
	}
	if ownerCache != nil {
		reg.MustRegister(ownerCache.Collectors(metrics.Namespace, "files_owner", "owners' listings and usage")...)
	}
	app := httpapi.New(httpapi.Options{
		Metrics:       reg,
		Meter:         newFilesMetrics(reg),
		Log:           log,
		Service:       svc,
		Verifier:      verifier,
		PublicBaseURL: cfg.PublicBaseURL,
		MaxUpload:     cfg.MaxUpload,
		MaxMeta:       cfg.MaxMeta,
		ImageMaxBytes: cfg.ImageMaxBytes,
		ReadIdle:      cfg.ReadIdle,
		HandoffTTL:    cfg.HandoffTTL,
		Checks: map[string]func(context.Context) error{
			"mongo": func(ctx context.Context) error { return mc.Ping(ctx, nil) },
			"s3":    objects.Ping,
		},
	})

	tus, err := tusapi.New(tusapi.Options{
		Service:       svc,
		Verifier:      verifier,
		Log:           log,
		PublicBaseURL: cfg.PublicBaseURL,
		Endpoint:      cfg.S3.Endpoint,
		AccessKey:     cfg.S3.AccessKey,
		SecretKey:     cfg.S3.SecretKey,
		Bucket:        cfg.S3.Bucket,
		UseTLS:        cfg.S3.UseTLS,
		MaxSize:       cfg.MaxUpload,
		MaxMeta:       cfg.MaxMeta,
		Expiry:        cfg.TusExpiry,
		PartSize:      int64(cfg.S3.PartSize),
	})
	if err != nil {
		return err
	}
	tusLn, err := net.Listen("tcp", cfg.TusAddr)
	if err != nil {
		return fmt.Errorf("tus listener: %w", err)
	}
	tusSrv := &http.Server{
		Handler:           tus,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	tusDone := make(chan error, 1)
	go func() { tusDone <- tusSrv.Serve(tusLn) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
		defer cancel()
		if err := tusSrv.Shutdown(sctx); err != nil {
			_ = tusSrv.Close()
		}
		<-tusDone
	}()
	log.Info("tus listening", "addr", tusLn.Addr().String())
	if hk.tusReady != nil {
		hk.tusReady(tusLn.Addr().String())
	}

	var wg sync.WaitGroup
	// No new sweep or erasure once shutdown begins (an erasure stopped
	// halfway is delivered again); the defer covers early returns.
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer func() { stopSweep(); wg.Wait() }()
	if cfg.SweepInterval > 0 {
		wg.Go(func() { sweep(sweepCtx, log, svc, tus, objects, cfg.SweepInterval, cfg.SweepAge) })
	}
	wg.Go(func() {
		eraseDeletedUsers(sweepCtx, log, nc, cfg.SubjectPrefix, svc, cfg.EraseAckWait, cfg.EraseMaxDeliver)
	})

	// Shutdown: in-flight requests finish (within FILES_SHUTDOWN_GRACE), the
	// sweeper stops, our buffered error logs are published, NATS drains,
	// and MongoDB disconnects last (deferred above).
	log.Info("listening", "addr", cfg.Addr)
	err = web.Serve(ctx, app, cfg.Addr, cfg.ShutdownGrace, ready)
	stopSweep()
	wg.Wait()
	closeSelfLog()
	if derr := nc.Drain(); derr != nil && !errors.Is(derr, nats.ErrConnectionClosed) {
		log.Warn("nats drain", "err", derr)
	}
	log.Info("stopped", "err", err)
	return err
}

// sweep removes orphan objects now and then. The first run waits a random
// part of the interval and every wait is jittered, so replicas started
// together do not sweep in step (they could: removal is idempotent).
func sweep(ctx context.Context, log *slog.Logger, svc *files.Service, tus *tusapi.Server, objects files.ObjectStore, every, age time.Duration) {
	wait := time.Duration(rand.Int64N(int64(every)))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		n, err := svc.Sweep(ctx, age)
		if err != nil && ctx.Err() == nil {
			log.Warn("orphan sweep failed", "err", err, "removed", n)
		} else if n > 0 {
			log.Info("orphan sweep", "removed", n)
		}
		if n, err := svc.SweepLinks(ctx); err != nil && ctx.Err() == nil {
			log.Warn("share link sweep failed", "err", err)
		} else if n > 0 {
			log.Info("share link sweep", "removed", n)
		}
		if n, err := tus.Sweep(ctx, objects); err != nil && ctx.Err() == nil {
			log.Warn("expired upload sweep failed", "err", err, "removed", n)
		} else if n > 0 {
			log.Info("expired upload sweep", "removed", n)
		}
		wait = every - every/10 + time.Duration(rand.Int64N(int64(every/5)+1))
	}
}

// slogPublisher writes log entries to the service log until they are
// published to the logs service over NATS (see files.LogPublisher).
type slogPublisher struct{ log *slog.Logger }

func (p slogPublisher) Publish(ctx context.Context, e files.LogEntry) {
	level := slog.LevelInfo
	if e.Type == "error" {
		level = slog.LevelError
	}
	p.log.Log(ctx, level, e.Body, "logType", e.Type)
}
