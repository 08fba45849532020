package upstream

import (
	"github.com/acme/platform/pkg/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the balancer's instruments, shared by every Group of a
// gateway. Series of an address are deleted when it leaves the service's
// set, so replaced containers do not accumulate series.
type Metrics struct {
	requests, failures   *prometheus.CounterVec // service, address
	inflight, healthy    *prometheus.GaugeVec   // service, address
	retries, unavailable *prometheus.CounterVec // service
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
			Name: "retries_total", Help: "Requests sent again to another address after a failure that allowed it."}, []string{"service"}),
		unavailable: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: sub,
			Name: "unavailable_total", Help: "Requests refused at once because no address of the service could be used (none resolved, or every one down with its last-resort request already on its way)."}, []string{"service"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.failures, m.inflight, m.healthy, m.retries, m.unavailable)
	}
	return m
}

type endpointMetrics struct {
	requests, failures prometheus.Counter
	inflight, healthy  prometheus.Gauge
}

type groupMetrics struct {
	retries, unavailable prometheus.Counter
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
	return groupMetrics{retries: m.retries.WithLabelValues(service), unavailable: m.unavailable.WithLabelValues(service)}
}

// forget deletes an address's series. Requests still in flight on it keep
// their (now unexported) handles.
func (m *Metrics) forget(service, addr string) {
	m.requests.DeleteLabelValues(service, addr)
	m.failures.DeleteLabelValues(service, addr)
	m.inflight.DeleteLabelValues(service, addr)
	m.healthy.DeleteLabelValues(service, addr)
}
