// Package app wires the files service: configuration, MongoDB, S3, the
// orphan sweeper and the HTTP server.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/pkg/natsfence"
	"github.com/acme/platform/pkg/service"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/filecache"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/acme/platform/services/files/internal/httpapi"
	"github.com/acme/platform/services/files/internal/imaging"
	"github.com/acme/platform/services/files/internal/mongostore"
	"github.com/acme/platform/services/files/internal/s3store"
	"github.com/acme/platform/services/files/internal/tusapi"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

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
	// mongoMonitor, when set, sees every command sent to MongoDB.
	mongoMonitor *event.CommandMonitor
}

func run(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(string), hk hooks) error {
	cfg, reader, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	p, err := service.Start("files", stdout, cfg.LogLevel, reader)
	if err != nil {
		return err
	}
	defer p.Close() // on an early return; Stop below on a normal one

	// NATS carries our own errors to the administrators' log store (as
	// ACME-S3). The service runs without it and reconnects by itself; the
	// log client buffers, bounded, meanwhile.
	nc, err := p.ConnectNATS(cfg.NATSURL, "acme-files", nil, nats.RetryOnFailedConnect(true))
	if err != nil {
		return err
	}
	if err := p.SelfLog(cfg.SubjectPrefix, "ACME-S3"); err != nil {
		return err
	}
	log := p.Log

	pub, err := identity.ParsePublicKey(cfg.IdentityKey)
	if err != nil {
		return err
	}
	verifier := identity.NewVerifier(pub, "files")
	mc, records, objects, err := connectStores(ctx, p, cfg, hk.mongoMonitor)
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	store, err := cacheRecords(p, cfg, records, reg)
	if err != nil {
		return err
	}
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
		ImageTimeout:     cfg.ImageTimeout,
		DefaultQuota:     cfg.Quota,
		Image: imaging.Options{
			MaxPixels:   cfg.ImageMaxPixels,
			MaxMemory:   cfg.ImageMaxMemory,
			MaxScans:    cfg.ImageMaxScans,
			MaxSide:     cfg.ImageMaxSide,
			JPEGQuality: cfg.ImageQuality,
		},
		Variants: files.VariantConfig{
			MaxSide:   cfg.VariantMaxSide,
			Sizes:     cfg.VariantSizes,
			PerImage:  int64(cfg.ImageVariants),
			MetaCache: variantMetaCache,
		},
	})
	registerVariantMetrics(reg, svc)

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
	tus, err := serveTus(p, cfg, svc, verifier, hk.tusReady)
	if err != nil {
		return err
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
	// the tus listener stops and MongoDB disconnects last.
	log.Info("listening", "addr", cfg.Addr)
	err = web.Serve(ctx, app, cfg.Addr, cfg.ShutdownGrace, ready)
	stopSweep()
	wg.Wait()
	return p.Stop(err)
}

// connectStores connects to MongoDB and S3 and makes sure of the indexes
// and the bucket.
func connectStores(ctx context.Context, p *service.Process, cfg Config, monitor *event.CommandMonitor) (*mongo.Client, *mongostore.Store, *s3store.Store, error) {
	opts := options.Client().ApplyURI(cfg.MongoURL).
		SetServerSelectionTimeout(5 * time.Second).
		SetConnectTimeout(5 * time.Second)
	if monitor != nil {
		opts.SetMonitor(monitor)
	}
	mc, disconnect, err := mongox.Connect(ctx, opts, 15*time.Second)
	if err != nil {
		return nil, nil, nil, err
	}
	p.Defer(disconnect)
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	records := mongostore.New(mc.Database(cfg.MongoDB))
	if err := records.EnsureIndexes(sctx); err != nil {
		return nil, nil, nil, fmt.Errorf("mongo indexes: %w", err)
	}
	objects, err := s3store.New(cfg.S3)
	if err != nil {
		return nil, nil, nil, err
	}
	p.Defer(objects.Close)
	if err := objects.EnsureBucket(sctx); err != nil {
		return nil, nil, nil, fmt.Errorf("s3 bucket %q: %w", cfg.S3.Bucket, err)
	}
	return mc, records, objects, nil
}

// cacheRecords puts the record and owner caches in front of records.
//
// Records read by downloads, images and retrieves are cached
// (FILES_RECORD_CACHE_TTL), and so are owners' listing pages and usage
// (FILES_OWNER_CACHE_TTL). Records never change; every replica applies
// the deletions and changed owners any replica announces (every insert
// and delete does, flushed, before it answers), and serves a cached
// entry only after a NATS round trip begun after the request arrived
// (pkg/natsfence), so a deleted file is refused, and a listing shows an
// upload or deletion, on the next request everywhere. Without NATS the
// fence fails and the database is read.
func cacheRecords(p *service.Process, cfg Config, records files.Store, reg *prometheus.Registry) (files.Store, error) {
	var recordCache *filecache.Cache
	var ownerCache *filecache.OwnerCache
	if cfg.RecordCacheTTL > 0 {
		recordCache = filecache.NewCache(cfg.RecordCacheTTL, cfg.RecordCacheSize)
		reg.MustRegister(recordCache.Collectors(metrics.Namespace, "files_record", "file records by id")...)
	}
	if cfg.OwnerCacheTTL > 0 {
		ownerCache = filecache.NewOwnerCache(cfg.OwnerCacheTTL, cfg.OwnerCacheSize)
		reg.MustRegister(ownerCache.Collectors(metrics.Namespace, "files_owner", "owners' listings and usage")...)
	}
	origin := files.NewID() // this process, in the messages it publishes
	if recordCache != nil || ownerCache != nil {
		fence, err := natsfence.New(p.NATS, filecache.Subject(cfg.SubjectPrefix), filecache.Apply(recordCache, ownerCache, origin, p.Log), filecache.Reset(recordCache, ownerCache), p.Log)
		if err != nil {
			return nil, fmt.Errorf("nats subscribe: %w", err)
		}
		p.Defer(fence.Close)
		if recordCache != nil {
			recordCache.SetFence(fence.Sync)
		}
		if ownerCache != nil {
			ownerCache.SetFence(fence.Sync)
		}
	}
	// Deletions and changed owners are announced even with both caches
	// off: other replicas and the gateways' object caches drop them.
	return filecache.New(records, recordCache, ownerCache, filecache.Publisher(p.NATS, cfg.SubjectPrefix, origin, p.Log)), nil
}

// serveTus starts the tus listener (FILES_TUS_ADDR); it stops, within
// FILES_SHUTDOWN_GRACE, when the process closes.
func serveTus(p *service.Process, cfg Config, svc *files.Service, verifier *identity.Verifier, ready func(string)) (*tusapi.Server, error) {
	log := p.Log
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
		return nil, err
	}
	tusLn, err := net.Listen("tcp", cfg.TusAddr)
	if err != nil {
		return nil, fmt.Errorf("tus listener: %w", err)
	}
	tusSrv := &http.Server{
		Handler:           tus,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	tusDone := make(chan error, 1)
	go func() { tusDone <- tusSrv.Serve(tusLn) }()
	p.Defer(func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
		defer cancel()
		if err := tusSrv.Shutdown(sctx); err != nil {
			_ = tusSrv.Close()
		}
		<-tusDone
	})
	log.Info("tus listening", "addr", tusLn.Addr().String())
	if ready != nil {
		ready(tusLn.Addr().String())
	}
	return tus, nil
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
