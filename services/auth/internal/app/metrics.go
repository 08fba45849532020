package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/httpapi"
	"github.com/prometheus/client_golang/prometheus"
)

// authMetrics are the service's own instruments (docs/operations.md).
type authMetrics struct {
	signIns  *prometheus.CounterVec
	sessions prometheus.Gauge
}

func newAuthMetrics(reg prometheus.Registerer) *authMetrics {
	m := &authMetrics{
		signIns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "auth", Name: "signins_total",
			Help: "Sign-in attempts decided by this replica, by result: ok, failed (wrong e-mail or password), throttled.",
		}, []string{"result"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "auth", Name: "sessions_active",
			Help: "Sessions neither expired nor idle, of all users (the store is shared: every replica reports the same count). Refreshed every AUTH_METRICS_INTERVAL.",
		}),
	}
	reg.MustRegister(m.signIns, m.sessions)
	// Every result exists from the start, so rates work before the first one.
	for _, r := range []string{httpapi.SignInOK, httpapi.SignInFailed, httpapi.SignInThrottled} {
		m.signIns.WithLabelValues(r)
	}
	return m
}

// SignIn implements httpapi.Meter.
func (m *authMetrics) SignIn(result string) { m.signIns.WithLabelValues(result).Inc() }

// countBudget bounds the share of time a replica spends counting sessions:
// after a count that took d, the next waits at least countBudget × d.
const countBudget = 100

// countPause is the wait after a count that took took: every, or longer
// when counting is slow, so that counting never takes more than
// 1/countBudget of the time. On MongoDB the expiresAt index answers in
// milliseconds and the pause is every; on FerretDB a count reads every
// stored session (about 90 µs each on the 2-core machine of
// docs/benchmarks.md: 2 s at 25,000 sessions, which every 30 s would be 7 %
// of a core).
func countPause(every, took time.Duration) time.Duration {
	return max(every, took*countBudget)
}

// countSessions sets the sessions gauge now and then every interval (or
// later, countPause) until ctx ends. Counting is a query, a collection scan
// on FerretDB, so it is not done per request or per scrape.
func countSessions(ctx context.Context, svc *account.Service, g prometheus.Gauge, every time.Duration, log *slog.Logger) {
	for {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := svc.LiveSessions(cctx)
		cancel()
		switch {
		case err == nil:
			g.Set(float64(n))
		case ctx.Err() == nil:
			log.Warn("counting sessions for metrics failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(countPause(every, time.Since(start))):
		}
	}
}
