// Package metrics holds the Prometheus instruments every process of the
// platform shares: a registry of the process's own (never the global
// default, so several services started in one test process do not collide),
// request counts and latencies by route, method and status, the net/http
// middleware that feeds them (the gateway), and the /metrics handler.
// pkg/web has the Fiber middleware. docs/operations.md lists every metric.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric the platform defines.
const Namespace = "acme"

// Unmatched is the route label of a request no route handled: an unknown
// path, or one refused by a middleware in front of every route before its
// route was reached. Labelling it by its raw path would let any client
// create series without bound.
const Unmatched = "unmatched"

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Handler serves reg in the Prometheus text (or negotiated) format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:      reg, // promhttp_metric_handler_errors_total
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// DurationBuckets are the latency buckets in seconds: sub-millisecond
// answers to uploads of a gigabyte.
var DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// HTTP are the request instruments of one server.
type HTTP struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
}

// NewHTTP registers the request instruments on reg.
func NewHTTP(reg prometheus.Registerer) *HTTP {
	labels := []string{"route", "method", "status"}
	m := &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests answered, by route template, method and status.",
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time from receiving a request to its handler returning, by route template, method and status.",
			Buckets: DurationBuckets,
		}, labels),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "http", Name: "requests_in_flight",
			Help: "HTTP requests being served.",
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.inFlight)
	return m
}

// Begin counts a request in flight and returns its start; End must follow.
func (m *HTTP) Begin() time.Time {
	m.inFlight.Inc()
	return time.Now()
}

// End records a request begun at start. route must come from a bounded set
// (a route template, never a raw path); method is normalised by Method.
func (m *HTTP) End(start time.Time, route, method string, status int) {
	m.inFlight.Dec()
	s := strconv.Itoa(status)
	method = Method(method)
	m.requests.WithLabelValues(route, method, s).Inc()
	m.duration.WithLabelValues(route, method, s).Observe(time.Since(start).Seconds())
}

// Method returns the method as a constant string, or "OTHER": label values
// must not be attacker-chosen, nor point into a buffer a server reuses.
func Method(m string) string {
	switch m {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	}
	return "OTHER"
}

type routeKey struct{}

// routeLabel is where an inner handler names the route of a request.
type routeLabel struct{ route string }

// SetRoute names the route of the request whose context is ctx, for
// Middleware. route must come from a bounded set. It does nothing outside
// Middleware.
func SetRoute(ctx context.Context, route string) {
	if l, ok := ctx.Value(routeKey{}).(*routeLabel); ok {
		l.route = route
	}
}

// Middleware counts and times every request next serves. The route label is
// what a handler named with SetRoute, else the http.ServeMux pattern that
// matched (without its method), else Unmatched.
func (m *HTTP) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := m.Begin()
		lbl := &routeLabel{}
		r = r.WithContext(context.WithValue(r.Context(), routeKey{}, lbl))
		sw := &statusRecorder{ResponseWriter: w}
		defer func() {
			route := lbl.route
			if route == "" {
				route = r.Pattern // set by ServeMux on this very request
				if _, p, ok := strings.Cut(route, " "); ok {
					route = p
				}
			}
			if route == "" {
				route = Unmatched
			}
			m.End(start, route, r.Method, sw.status())
		}()
		next.ServeHTTP(sw, r)
	})
}

// statusRecorder remembers the final status an answer was sent with.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 && code >= 200 { // 1xx are informational, more follows
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}

// Flush lets streamed answers through.
func (s *statusRecorder) Flush() {
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the real writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
