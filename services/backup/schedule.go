package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/services/backup/internal/backup"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
)

// backupPrefix starts the name of every backup `schedule` takes; retention
// removes only folders named so.
const backupPrefix = "acme-"

// runMetrics are what Prometheus scrapes from `schedule`.
type runMetrics struct {
	lastSuccess, duration, size prometheus.Gauge
	runs                        *prometheus.CounterVec
}

func newRunMetrics(reg prometheus.Registerer) *runMetrics {
	m := &runMetrics{
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "acme_backup_last_success_timestamp_seconds", Help: "Unix time of the cut of the last backup that finished."}),
		duration:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "acme_backup_last_duration_seconds", Help: "How long the last backup that finished took."}),
		size:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "acme_backup_last_size_bytes", Help: "Bytes of documents and objects in the last backup that finished."}),
		runs:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "acme_backup_runs_total", Help: "Scheduled backups by result (ok, failed)."}, []string{"result"}),
	}
	reg.MustRegister(m.lastSuccess, m.duration, m.size, m.runs)
	m.runs.WithLabelValues("ok")
	m.runs.WithLabelValues("failed")
	return m
}

// schedule takes a backup into BACKUP_TO at every time of BACKUP_SCHEDULE
// and keeps the newest BACKUP_KEEP, until ctx ends. Each run is a line of
// its own log and a record of the log store (app LOGGING), and sets the
// metrics.
func schedule(ctx context.Context, s *settings, stdout io.Writer) error {
	spec, rootName, keep := s.r.String("SCHEDULE"), s.r.String("TO"), s.r.Int("KEEP")
	if spec == "" || rootName == "" {
		return errors.New("schedule needs BACKUP_SCHEDULE (a cron expression) and BACKUP_TO")
	}
	if keep < 1 {
		return errors.New("BACKUP_KEEP must be at least 1")
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return fmt.Errorf("BACKUP_SCHEDULE: %w", err)
	}
	root, err := backup.OpenTarget(rootName, s.login)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stdout, nil)).With("svc", "backup")
	s.r.Log(log)

	// Each run is also a record of the log store, so an administrator sees
	// the backups beside the platform's other logs.
	var logs *logclient.Client
	nc, err := natsconn.Connect(s.r.URLWithLogin("NATS_URL", "NATS_USER", "NATS_PASSWORD"), "backup", log, nats.RetryOnFailedConnect(true))
	if err != nil {
		log.Warn("no NATS: runs are logged here only", "err", err)
	} else {
		defer nc.Drain()
		if logs, err = logclient.New(nc, logclient.Options{Prefix: s.r.String("NATS_SUBJECT_PREFIX"), Logger: log}); err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			logs.Close(cctx)
		}()
	}
	record := func(typ, body string) {
		if logs != nil {
			logs.Log("LOGGING", typ, "backup: "+body, "")
		}
	}

	reg := metrics.NewRegistry()
	m := newRunMetrics(reg)
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	mux.Handle("GET /metrics", metrics.Handler(reg))
	ln, err := net.Listen("tcp", s.r.String("ADDR"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	log.Info("backups scheduled", "schedule", spec, "to", root.String(), "keep", keep, "next", sched.Next(time.Now().UTC()))

	for {
		next := sched.Next(time.Now().UTC())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		start := time.Now()
		name := backupPrefix + start.UTC().Format("20060102T150405Z")
		man, err := takeInto(ctx, s, root.Sub(name))
		if err != nil {
			m.runs.WithLabelValues("failed").Inc()
			log.Error("backup failed", "backup", name, "err", err)
			record("error", fmt.Sprintf("%s failed: %v", name, err))
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		var size int64
		for _, c := range man.Collections {
			size += c.Bytes
		}
		for _, o := range man.Objects {
			size += o.Size
		}
		took := time.Since(start)
		m.runs.WithLabelValues("ok").Inc()
		m.lastSuccess.Set(float64(man.Cut.Unix()))
		m.duration.Set(took.Seconds())
		m.size.Set(float64(size))
		removed, err := prune(ctx, root, keep)
		log.Info("backup taken", "backup", name, "bytes", size, "objects", len(man.Objects), "took", took.String(), "removed", removed)
		record("log", fmt.Sprintf("%s taken: %d bytes, %d objects, in %s; removed %s", name, size, len(man.Objects), took.Round(time.Millisecond), strings.Join(append(removed, "none")[:max(len(removed), 1)], ", ")))
		if err != nil {
			log.Error("removing old backups failed", "err", err)
			record("error", "removing old backups failed: "+err.Error())
		}
	}
}

// takeInto takes one backup into t; a backup that failed half-way is
// removed, so it is never listed as one.
func takeInto(ctx context.Context, s *settings, t backup.Target) (*backup.Manifest, error) {
	p, done, err := s.platform(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	m, err := backup.Take(ctx, p, t, backup.Options{Keys: s.keys, Workers: s.workers})
	if err != nil {
		if rerr := t.RemoveAll(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing the partial backup: %w", rerr))
		}
	}
	return m, err
}

// prune removes the oldest backups under root beyond keep (names sort by
// time) and returns their names.
func prune(ctx context.Context, root backup.Target, keep int) ([]string, error) {
	names, err := root.Backups(ctx)
	if err != nil {
		return nil, err
	}
	names = slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, backupPrefix) })
	slices.Sort(names)
	var removed []string
	for len(names) > keep {
		if err := root.Sub(names[0]).RemoveAll(ctx); err != nil {
			return removed, err
		}
		removed, names = append(removed, names[0]), names[1:]
	}
	return removed, nil
}
