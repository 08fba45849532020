package web

import (
	"bufio"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/gofiber/fiber/v2"
)

// internalBody is the JSON body of a 500: the request id lets an operator
// find the log line (with the stack, for a panic) that explains it.
func internalBody(rid string) fiber.Map {
	return fiber.Map{"error": "internal error", "code": "internal", "requestId": rid}
}

// Recover turns a panic in a later handler into a JSON 500
// {"error","code":"internal","requestId"} and one error log line with the
// panic value and the stack, and the process keeps serving: fasthttp, unlike
// net/http, recovers nothing, so a panic in any handler would end the
// process and every request in flight. NewApp mounts it after RequestIDs,
// AccessLog and Metrics, so the access line and the metrics record the 500.
// What the handler had already set on the response (headers such as
// Content-Encoding, a body stream) is dropped: the 500 is sent alone.
func Recover(log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) (err error) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			rid := RequestID(c)
			log.Error("panic", "rid", rid, "method", c.Method(), "path", c.Path(),
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			c.Response().Reset()
			c.Set(RequestIDHeader, rid)
			c.Set(fiber.HeaderCacheControl, "no-store")
			err = c.Status(http.StatusInternalServerError).JSON(internalBody(rid))
		}()
		return c.Next()
	}
}

// RecoverHTTP is Recover for a net/http handler (the gateway). net/http
// already keeps serving after a handler's panic, but answers nothing (the
// connection is cut): here the client gets the JSON 500 with the request id
// (the X-Request-Id already set on the response, else the request's valid
// one, else a new one) and the log a line with the stack. When the answer
// had already begun, the connection is aborted (http.ErrAbortHandler) so
// that a cut answer is never taken for a whole one; a panic with
// http.ErrAbortHandler itself, the way a handler (httputil.ReverseProxy
// among them) aborts a response on purpose, passes through unlogged.
func RecoverHTTP(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &startedWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { //nolint:errorlint // the sentinel itself is the signal
				panic(v)
			}
			rid := w.Header().Get(RequestIDHeader)
			if !ValidRequestID(rid) {
				if rid = r.Header.Get(RequestIDHeader); !ValidRequestID(rid) {
					rid = NewRequestID()
				}
			}
			log.Error("panic", "rid", rid, "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if rw.started {
				panic(http.ErrAbortHandler)
			}
			h := w.Header()
			for k := range h {
				delete(h, k)
			}
			h.Set(RequestIDHeader, rid)
			h.Set("Content-Type", "application/json")
			h.Set("Cache-Control", "no-store")
			h.Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = fmt.Fprintf(w, `{"error":"internal error","code":"internal","requestId":%q}`+"\n", rid)
		}()
		next.ServeHTTP(rw, r)
	})
}

// startedWriter notes whether the answer has begun (a status or body
// byte written).
type startedWriter struct {
	http.ResponseWriter
	started bool
}

func (s *startedWriter) WriteHeader(code int) {
	if code >= 200 { // 1xx are informational, the answer has not begun
		s.started = true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *startedWriter) Write(b []byte) (int, error) {
	s.started = true
	return s.ResponseWriter.Write(b)
}

// Flush lets streamed answers through.
func (s *startedWriter) Flush() {
	s.started = true
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the real writer.
func (s *startedWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// GuardStream wraps a body stream writer (fiber.Ctx.Context().
// SetBodyStreamWriter). fasthttp runs it in a goroutine of its own after the
// handler has returned, outside every middleware and Recover: a panic in it
// would end the process. Here it ends only that answer (the stream is cut)
// and logs one line with the request id and the stack.
func GuardStream(log *slog.Logger, rid string, write func(*bufio.Writer)) func(*bufio.Writer) {
	return func(w *bufio.Writer) {
		defer func() {
			if v := recover(); v != nil {
				log.Error("panic in a streamed answer", "rid", rid, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
		}()
		write(w)
	}
}
