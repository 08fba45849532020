package upstream

import (
	"github.com/acme/platform/pkg/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the balancer's instruments, shared by every Group of a
// gateway. Series of an address are deleted when it leaves the service's
// set, so replaced containers do not accumulate series.
type Metrics struct {
	requests, failures   *prometheus.CounterVec   // service, address
	inflight, healthy    *prometheus.GaugeVec     // service, address
	retries, unavailable *prometheus.CounterVec   // service
	waits                *prometheus.HistogramVec // service, result
}

// NewMetrics registers the instruments on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const sub = "gateway_upstream"
	byAddr := []string{"service", "address"}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: sub,
			Name: "requests_total", Help: "Requests sent to an upstream address (each attempt; probes not included)."}, byAddr),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: sub,
			Name: "failures_total", Help: "Requests to an upstream address that got no answer (connection refused, reset or closed before the headers)."}, byAddr),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: sub,
			Name: "in_flight", Help: "Requests to an upstream address not finished yet (a streamed answer counts until its end)."}, byAddr),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: sub,
			Name: "healthy", Help: "1 while an upstream address passed its last readiness probe, else 0."}, byAddr),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: sub,
			Name: "retries_total", Help: "Attempts after a failed one: requests sent again (to another address, or after waiting for one) after a failure that allowed it."}, []string{"service"}),
		unavailable: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: sub,
			Name: "unavailable_total", Help: "Requests failed because no address of the service could be used (none resolved, or every one down with its last-resort request already on its way): at once, or after waiting GATEWAY_RETRY_WAIT for one."}, []string{"service"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Subsystem: sub,
			Name: "wait_seconds", Help: "Requests that waited for a usable address (GATEWAY_RETRY_WAIT) and for how long, by how the wait ended: found (an address became usable and the request went to it), expired (the wait was over: 503), canceled (the client went away, or the gateway was stopping).",
			Buckets: metrics.DurationBuckets}, []string{"service", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.failures, m.inflight, m.healthy, m.retries, m.unavailable, m.waits)
	}
	return m
}

type endpointMetrics struct {
	requests, failures prometheus.Counter
	inflight, healthy  prometheus.Gauge
}

type groupMetrics struct {
	retries, unavailable prometheus.Counter
	waits                map[string]prometheus.Observer // by result
}

// observeWait records w once, if the request waited.
func (gm groupMetrics) observeWait(w *waiting) {
	if w.waited() && w.result != "" {
		gm.waits[w.result].Observe(w.end.Sub(w.start).Seconds())
		w.result = "" // observed
	}
}

func (m *Metrics) endpoint(service, addr string) endpointMetrics {
	em := endpointMetrics{
		requests: m.requests.WithLabelValues(service, addr),
		failures: m.failures.WithLabelValues(service, addr),
		inflight: m.inflight.WithLabelValues(service, addr),
		healthy:  m.healthy.WithLabelValues(service, addr),
	}
	em.healthy.Set(0)
	return em
}

func (m *Metrics) group(service string) groupMetrics {
	gm := groupMetrics{retries: m.retries.WithLabelValues(service), unavailable: m.unavailable.WithLabelValues(service),
		waits: map[string]prometheus.Observer{}}
	for _, r := range []string{"found", "expired", "canceled"} {
		gm.waits[r] = m.waits.WithLabelValues(service, r)
	}
	return gm
}

// forget deletes an address's series. Requests still in flight on it keep
// their (now unexported) handles.
func (m *Metrics) forget(service, addr string) {
	m.requests.DeleteLabelValues(service, addr)
	m.failures.DeleteLabelValues(service, addr)
	m.inflight.DeleteLabelValues(service, addr)
	m.healthy.DeleteLabelValues(service, addr)
}
