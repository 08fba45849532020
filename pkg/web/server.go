package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// RequestIDHeader carries the request id between the gateway and services.
const RequestIDHeader = "X-Request-Id"

const (
	localRequestID = "web.rid"
	localIdentity  = "web.identity"
)

// Options configure NewApp.
type Options struct {
	Name      string
	Log       *slog.Logger
	BodyLimit int  // bytes; default 1 MiB
	Stream    bool // stream request bodies instead of buffering them
	// Metrics, when set, gets the request instruments and is served at
	// GET /metrics (see Instrument).
	Metrics *prometheus.Registry
	// ReadTimeout bounds reading a request (headers and body; default 60s);
	// IdleTimeout bounds an idle keep-alive connection (default 90s).
	ReadTimeout, IdleTimeout time.Duration
}

// NewApp returns a Fiber app with JSON errors, request ids, access logs, a
// recover that turns a handler's panic into a JSON 500 (Recover) and, with
// Options.Metrics, request metrics and /metrics. Register routes that need
// an identity token after it.
func NewApp(o Options) *fiber.App {
	if o.BodyLimit <= 0 {
		o.BodyLimit = 1 << 20
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 60 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 90 * time.Second
	}
	app := fiber.New(fiber.Config{
		AppName:               o.Name,
		DisableStartupMessage: true,
		BodyLimit:             o.BodyLimit,
		StreamRequestBody:     o.Stream,
		// With streaming on, fasthttp would still read a whole multipart body
		// of known length before the handler unless told not to.
		DisablePreParseMultipartForm: o.Stream,
		ReadTimeout:                  o.ReadTimeout,
		WriteTimeout:                 0, // downloads may be long; idle timeout bounds idle keep-alives
		IdleTimeout:                  o.IdleTimeout,
		ReadBufferSize:               16 << 10,
		ErrorHandler:                 ErrorHandler(o.Log),
	})
	app.Use(RequestIDs, AccessLog(o.Log))
	if o.Metrics != nil {
		Instrument(app, o.Metrics)
	}
	// Innermost, around every route registered after NewApp returns: the
	// access log and the metrics see the 500 a panic becomes.
	app.Use(Recover(o.Log))
	return app
}

// RequestIDs takes a well-formed X-Request-Id or makes one, and echoes it.
// The id is also put into the request's user context (WithRequestID), so
// log lines written with that context carry it (LogHandler).
func RequestIDs(c *fiber.Ctx) error {
	rid := c.Get(RequestIDHeader)
	if !ValidRequestID(rid) {
		rid = NewRequestID()
	} else {
		rid = string([]byte(rid)) // Fiber reuses the header buffer
	}
	c.Locals(localRequestID, rid)
	c.SetUserContext(WithRequestID(c.UserContext(), rid))
	c.Set(RequestIDHeader, rid)
	return c.Next()
}

// ValidRequestID accepts 1-64 characters of [A-Za-z0-9._-].
func ValidRequestID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.') {
			return false
		}
	}
	return true
}

// NewRequestID returns 16 random hex characters.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RequestID returns the request's id.
func RequestID(c *fiber.Ctx) string {
	s, _ := c.Locals(localRequestID).(string)
	return s
}

// AccessLog writes one structured line per request, at AccessLevel.
func AccessLog(log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		err := c.Next()
		if err != nil {
			if herr := c.App().Config().ErrorHandler(c, err); herr != nil {
				_ = c.SendStatus(http.StatusInternalServerError)
			}
		}
		path, status := c.Route().Path, c.Response().StatusCode()
		log.Log(context.Background(), AccessLevel(path, status), "request", "rid", RequestID(c), "method", c.Method(), "route", path,
			"status", status, "dur_ms", time.Since(start).Milliseconds())
		return nil
	}
}

// ReadyTimeout bounds GET /readyz: a check that has not passed by then is
// unavailable.
const ReadyTimeout = 2 * time.Second

// Health registers GET /healthz (liveness) and GET /readyz (every check
// passes within ReadyTimeout). The checks run at once, each in its own
// goroutine, and /readyz answers by ReadyTimeout whatever they do: a check
// stuck behind a lock or a queue (a client busy reconnecting, a connection
// pool drained by a backlog) makes the service unready, never the probe
// late, so a container's health reflects its state and not the wait.
func Health(app *fiber.App, checks map[string]func(context.Context) error) {
	app.Get("/healthz", func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{"status": "ok"})
	})
	app.Get("/readyz", func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), ReadyTimeout)
		defer cancel()
		type result struct {
			name string
			err  error
		}
		results := make(chan result, len(checks)) // buffered: a late check never blocks
		for name, check := range checks {
			go func() { results <- result{name, check(ctx)} }()
		}
		status := fiber.Map{}
		for name := range checks {
			status[name] = "timeout"
		}
		ok := true
	wait:
		for range checks {
			select {
			case r := <-results:
				if r.err != nil {
					ok = false
					status[r.name] = "unavailable"
				} else {
					status[r.name] = "ok"
				}
			case <-ctx.Done():
				ok = false // the rest stay "timeout"
				break wait
			}
		}
		if !ok {
			return c.Status(http.StatusServiceUnavailable).JSON(fiber.Map{"status": "unavailable", "code": "unavailable", "checks": status})
		}
		return c.JSON(fiber.Map{"status": "ok", "checks": status})
	})
}

// RequireIdentity refuses (401) any request without a valid identity token
// from the gateway and stores the claims for Identity. It exempts nothing
// itself: /healthz, /readyz (Health) and /metrics (Instrument, NewApp) answer
// without a token because they are registered before it is mounted.
func RequireIdentity(v *identity.Verifier) fiber.Handler {
	return func(c *fiber.Ctx) error {
		claims, err := v.Verify(c.Get(identity.Header))
		if err != nil {
			return ErrNoIdentity
		}
		c.Locals(localIdentity, claims)
		return c.Next()
	}
}

// Identity returns the verified claims (nil outside RequireIdentity).
func Identity(c *fiber.Ctx) *identity.Claims {
	cl, _ := c.Locals(localIdentity).(*identity.Claims)
	return cl
}

// RequireUser refuses anonymous callers with 401.
func RequireUser(c *fiber.Ctx) error {
	if cl := Identity(c); cl == nil || !cl.Authenticated() {
		return ErrUnauthenticated
	}
	return c.Next()
}

// RequireAdmin refuses anonymous callers with 401 and non-admins with 403.
func RequireAdmin(c *fiber.Ctx) error {
	cl := Identity(c)
	if cl == nil || !cl.Authenticated() {
		return ErrUnauthenticated
	}
	if !cl.IsAdmin() {
		return ErrForbidden
	}
	return c.Next()
}

// Serve listens on addr until ctx ends, then shuts down within grace.
// ready, if set, receives the bound address (useful with port 0).
func Serve(ctx context.Context, app *fiber.App, addr string, grace time.Duration, ready func(string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- app.Listener(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return app.ShutdownWithTimeout(grace)
	}
}
