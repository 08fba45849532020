package web

import (
	"context"
	"log/slog"
)

// routineRoutes are the routes other machines call on a timer: the gateway's
// and the container runtime's probes (GET /healthz, /readyz) and Prometheus'
// scrapes (GET /metrics). AccessLog logs their successful requests at DEBUG,
// so they do not bury everything else at the default level (INFO): with the
// gateway probing every address every 2 s, they would be most of the log.
var routineRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// AccessLevel is the level of a request's access line: DEBUG for a routine
// route answered below 400, INFO for every other request. A probe that
// fails (an unready service answers /readyz with 503) stays at INFO: that
// is news.
func AccessLevel(route string, status int) slog.Level {
	if routineRoutes[route] && status < 400 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

type ridKey struct{}

// WithRequestID returns ctx carrying the request id, for log lines written
// while the request is served (see LogHandler).
func WithRequestID(ctx context.Context, rid string) context.Context {
	return context.WithValue(ctx, ridKey{}, rid)
}

// RequestIDFrom returns the request id ctx carries, or "".
func RequestIDFrom(ctx context.Context) string {
	s, _ := ctx.Value(ridKey{}).(string)
	return s
}

// LogHandler adds the request id of the context ("rid") to every record
// logged with one (log.InfoContext(ctx, ...)), unless the record names a rid
// itself. RequestIDs puts the id into the request's user context, so every
// line a handler or the domain below it logs with that context carries it.
func LogHandler(next slog.Handler) slog.Handler { return ridHandler{next} }

// WithRequestIDs returns log with LogHandler in front of its handler.
func WithRequestIDs(log *slog.Logger) *slog.Logger {
	if _, ok := log.Handler().(ridHandler); ok {
		return log
	}
	return slog.New(LogHandler(log.Handler()))
}

type ridHandler struct{ next slog.Handler }

func (h ridHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h ridHandler) Handle(ctx context.Context, r slog.Record) error {
	if rid := RequestIDFrom(ctx); rid != "" {
		has := false
		r.Attrs(func(a slog.Attr) bool {
			has = a.Key == "rid"
			return !has
		})
		if !has {
			r = r.Clone()
			r.AddAttrs(slog.String("rid", rid))
		}
	}
	return h.next.Handle(ctx, r)
}

func (h ridHandler) WithAttrs(as []slog.Attr) slog.Handler { return ridHandler{h.next.WithAttrs(as)} }

func (h ridHandler) WithGroup(name string) slog.Handler { return ridHandler{h.next.WithGroup(name)} }
