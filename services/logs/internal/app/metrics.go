package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/acme/platform/pkg/metrics"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// logsMetrics are the service's own instruments (docs/operations.md); they
// implement natsingest.Meter.
type logsMetrics struct {
	ingested, duplicates, dead prometheus.Counter
	pending, ackPending        prometheus.Gauge
}

func newLogsMetrics(reg prometheus.Registerer) *logsMetrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "logs", Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "logs", Name: name, Help: help})
	}
	m := &logsMetrics{
		ingested:   counter("ingested_total", "Records from the NATS stream written and acked by this replica."),
		duplicates: counter("duplicates_total", "NATS messages whose Nats-Msg-Id was already stored (redeliveries, publishes repeated after the dedupe window), acked without a second record."),
		dead:       counter("dead_lettered_total", "Poison NATS messages kept in log_dead_letters and terminated."),
		pending:    gauge("consumer_pending", "Messages in the stream not yet delivered to the durable consumer (its lag; shared by every replica, so all report the same value). Refreshed every LOGS_METRICS_INTERVAL."),
		ackPending: gauge("consumer_ack_pending", "Messages delivered to the durable consumer and not yet acknowledged. Refreshed every LOGS_METRICS_INTERVAL."),
	}
	reg.MustRegister(m.ingested, m.duplicates, m.dead, m.pending, m.ackPending)
	return m
}

func (m *logsMetrics) Stored(n int)       { m.ingested.Add(float64(n)) }
func (m *logsMetrics) Duplicates(n int)   { m.duplicates.Add(float64(n)) }
func (m *logsMetrics) DeadLettered(n int) { m.dead.Add(float64(n)) }

// pollConsumer sets the consumer gauges from JetStream's consumer info now
// and then every interval until ctx ends. A failure is logged once until
// the next success (NATS may be away for a while).
func pollConsumer(ctx context.Context, cons jetstream.Consumer, m *logsMetrics, every time.Duration, log *slog.Logger) {
	failing := false
	for {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, err := cons.Info(ictx)
		cancel()
		switch {
		case err == nil:
			m.pending.Set(float64(info.NumPending))
			m.ackPending.Set(float64(info.NumAckPending))
			failing = false
		case ctx.Err() == nil && !failing:
			log.Warn("reading the consumer's lag for metrics failed", "err", err)
			failing = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
