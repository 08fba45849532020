// Package web holds what every HTTP service here shares: JSON error bodies
// with a stable code, strict JSON decoding, request ids, access logs, the
// identity-token middleware, and health endpoints.
package web

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/gofiber/fiber/v2"
)

// Error is an error with an HTTP status, a stable machine-readable code and a
// message safe to show to a client. Body, when set, replaces the default
// {"error","code"} shape (the spec names its own fields for some endpoints);
// the code is still added to it.
type Error struct {
	Status  int
	Code    string
	Message string
	Field   string
	Body    fiber.Map
	Cause   error // logged, never sent
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Code + ": " + e.Message + ": " + e.Cause.Error()
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

// Errorf builds an *Error.
func Errorf(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

// FieldError is a 400 that names the offending field.
func FieldError(field, code, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Message: msg, Field: field}
}

// Common errors.
var (
	ErrUnauthenticated = Errorf(http.StatusUnauthorized, "unauthenticated", "a valid session is required")
	ErrForbidden       = Errorf(http.StatusForbidden, "forbidden", "administrator role required")
	ErrNoIdentity      = Errorf(http.StatusUnauthorized, "identity_required", "requests must come through the gateway with a valid identity token")
)

// ErrUnavailable marks an error caused by a dependency (database, object
// store, message bus) being out of reach: it becomes a 503.
var ErrUnavailable = errors.New("dependency unavailable")

// IsUnavailable reports whether err means a dependency is out of reach:
// ErrUnavailable, a deadline, a network error, or what a check added with
// AddUnavailableCheck recognises (pkg/mongox adds the MongoDB driver's).
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, check := range *unavailableChecks.Load() {
		if check(err) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// unavailableChecks are the dependency-specific checks of IsUnavailable.
// They live with the client library they know (so a program that never
// talks to MongoDB, such as the gateway, does not link its driver).
var unavailableChecks atomic.Pointer[[]func(error) bool]

func init() { unavailableChecks.Store(&[]func(error) bool{}) }

// AddUnavailableCheck adds a check to IsUnavailable; packages call it from
// their init.
func AddUnavailableCheck(check func(error) bool) {
	for {
		old := unavailableChecks.Load()
		next := append(append([]func(error) bool{}, *old...), check)
		if unavailableChecks.CompareAndSwap(old, &next) {
			return
		}
	}
}

var statusCodes = map[int]string{
	http.StatusBadRequest:                  "bad_request",
	http.StatusUnauthorized:                "unauthenticated",
	http.StatusForbidden:                   "forbidden",
	http.StatusNotFound:                    "not_found",
	http.StatusMethodNotAllowed:            "method_not_allowed",
	http.StatusRequestEntityTooLarge:       "body_too_large",
	http.StatusUnsupportedMediaType:        "unsupported_media_type",
	http.StatusTooManyRequests:             "too_many_requests",
	http.StatusRequestHeaderFieldsTooLarge: "headers_too_large",
	http.StatusServiceUnavailable:          "unavailable",
	http.StatusRequestTimeout:              "timeout",
}

// CodeForStatus gives the default code for a status.
func CodeForStatus(status int) string {
	if c, ok := statusCodes[status]; ok {
		return c
	}
	if status >= 500 {
		return "internal"
	}
	return "error"
}

// ErrorHandler renders every error as JSON. Unknown errors are logged with
// the request id and answered 500 without details but with the request id
// ({"error","code":"internal","requestId"}); dependency outages 503.
func ErrorHandler(log *slog.Logger) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		var we *Error
		var fe *fiber.Error
		switch {
		case errors.As(err, &we):
			if we.Status >= 500 {
				log.Error("request failed", "rid", RequestID(c), "path", c.Path(), "err", err)
			}
			return Render(c, we)
		case errors.As(err, &fe):
			msg := fe.Message
			if fe.Code == http.StatusNotFound {
				msg = "no such route"
			}
			return Render(c, &Error{Status: fe.Code, Code: CodeForStatus(fe.Code), Message: msg})
		case IsUnavailable(err):
			log.Warn("dependency unavailable", "rid", RequestID(c), "path", c.Path(), "err", err)
			return Render(c, Errorf(http.StatusServiceUnavailable, "unavailable", "a dependency is unavailable, try again shortly"))
		default:
			log.Error("internal error", "rid", RequestID(c), "path", c.Path(), "err", err)
			return Render(c, &Error{Status: http.StatusInternalServerError, Code: "internal", Body: internalBody(RequestID(c))})
		}
	}
}

// Render writes e as JSON.
func Render(c *fiber.Ctx, e *Error) error {
	body := fiber.Map{}
	if e.Body != nil {
		for k, v := range e.Body {
			body[k] = v
		}
	} else {
		body["error"] = e.Message
	}
	body["code"] = e.Code
	if e.Field != "" {
		body["field"] = e.Field
	}
	if e.Status == http.StatusServiceUnavailable {
		c.Set(fiber.HeaderRetryAfter, "5")
	}
	return c.Status(e.Status).JSON(body)
}
