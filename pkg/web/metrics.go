package web

import (
	"net/http"
	"reflect"

	"github.com/acme/platform/pkg/metrics"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
)

// MetricsPath is where every process serves its metrics.
const MetricsPath = "/metrics"

// Instrument counts and times every request of app by route template,
// method and status (metrics.HTTP on reg), and serves reg at GET /metrics.
// Call it before any route or middleware that requires an identity token:
// /metrics is for the operators' scraper, which has none (the services'
// ports are internal; the gateway never proxies /metrics).
func Instrument(app *fiber.App, reg *prometheus.Registry) {
	app.Use(Metrics(metrics.NewHTTP(reg)))
	app.Get(MetricsPath, adaptor.HTTPHandler(metrics.Handler(reg)))
}

// Metrics is the middleware of Instrument. An error returned by a later
// handler is rendered here by the app's error handler (as AccessLog does),
// so the status recorded is the one sent.
func Metrics(m *metrics.HTTP) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := m.Begin()
		if err := c.Next(); err != nil {
			if herr := c.App().Config().ErrorHandler(c, err); herr != nil {
				_ = c.SendStatus(http.StatusInternalServerError)
			}
		}
		m.End(start, RouteLabel(c), c.Method(), c.Response().StatusCode())
		return nil
	}
}

// RouteLabel is the template of the route that handled the request
// ("/users/:id"), or metrics.Unmatched when no route's own handler was
// reached: an unknown path, or a request refused by a middleware mounted
// with Use in front of every route (auth and logs check the identity token
// that way). Never the raw path, which a client chooses.
func RouteLabel(c *fiber.Ctx) string {
	r := c.Route()
	// The fallback Fiber returns when no route matched at all has no
	// handlers and the raw path.
	if r == nil || len(r.Handlers) == 0 || isMiddleware(r) {
		return metrics.Unmatched
	}
	return r.Path
}

// routeUseField is the index of fiber.Route's unexported "use" flag (a
// route mounted with Use), or -1. Fiber exposes no other way to tell a
// middleware's route from an endpoint's once it has run (it overwrites
// Method with the request's); reading the flag is safe and cheap, and
// TestFiberMetricsByRouteTemplate fails if a Fiber upgrade removes it.
var routeUseField = func() int {
	f, ok := reflect.TypeOf(fiber.Route{}).FieldByName("use")
	if !ok || f.Type.Kind() != reflect.Bool || len(f.Index) != 1 {
		return -1
	}
	return f.Index[0]
}()

func isMiddleware(r *fiber.Route) bool {
	return routeUseField >= 0 && reflect.ValueOf(r).Elem().Field(routeUseField).Bool()
}
