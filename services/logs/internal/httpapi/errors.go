package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/otlpingest"
	"github.com/gofiber/fiber/v2"
)

// errorMap is the one place the logs package's errors (and the OTLP
// decoder's) become what a client sees: status, code, message and the
// spec's own bodies. fail goes down it in order and the first row that
// matches answers. A test checks that every exported error of the logs
// package has a row.
var errorMap = []errorRow{
	web.ErrorAs[logs.UnknownAppError](unknownApp),
	web.ErrorAs[logs.InvalidError](invalidField),
	is(logs.ErrNotFound, http.StatusNotFound, "cursor_not_found", "before", "no log record with the id given in before"),
	is(logs.ErrCursorMismatch, http.StatusBadRequest, "cursor_mismatch", "before", "before must be the id of a record of the type (and app) being listed"),
	is(logs.ErrTooManyTails, http.StatusTooManyRequests, "too_many_tails", "", "too many live tails are open for this user; close one (a closed one is let go within the heartbeat) and try again"),
	is(logs.ErrTailsBusy, http.StatusServiceUnavailable, "busy", "", "too many live tails are open, try again shortly"),
	invalidQuery(logs.ErrSearchEmpty),
	invalidQuery(logs.ErrSearchTooLong),
	invalidQuery(logs.ErrSearchQuote),
	invalidQuery(logs.ErrSearchTerms),
	invalidQuery(logs.ErrSearchEncoding),
	{Sample: otlpingest.ErrBadRequest, Answer: func(_ errScope, err error) (*web.Error, bool) {
		if !errors.Is(err, otlpingest.ErrBadRequest) {
			return nil, false
		}
		return web.FieldError("body", "invalid_otlp", err.Error()), true
	}},

	// Answered inside the service (a redelivered record is acknowledged;
	// the writer stops after the server): reaching a client would be a bug
	// (500, logged).
	internal(logs.ErrDuplicate),
	internal(logs.ErrWriterClosed),
}

// Errors of the HTTP layer itself, not of the logs package.
var (
	errTailOff      = web.Errorf(http.StatusServiceUnavailable, "unavailable", "the live tail is not available")
	errOTLPOff      = web.Errorf(http.StatusServiceUnavailable, "otlp_unavailable", "OTLP ingest is not enabled")
	errOTLPNotAdmin = web.Errorf(http.StatusForbidden, "forbidden", "administrator role required (the API key's owner is not an administrator)")
	errOTLPCaller   = web.Errorf(http.StatusUnauthorized, "invalid_service_credential", "a valid X-Service-Credential header or an API key with the logs:write scope is required")
)

// streamUnavailable: the log stream did not take an OTLP request's records.
func streamUnavailable(cause error) *web.Error {
	return &web.Error{Status: http.StatusServiceUnavailable, Code: "stream_unavailable", Message: "the log stream did not take the records; retry", Cause: cause}
}

// errScope is what the request knows that an answer names.
type errScope struct {
	// unknownApp is the status of an unknown app: 404, the spec's for an
	// unknown :app, unless set (a record to write and the live tail's
	// filter answer 400).
	unknownApp int
	sentType   string // the record type sent (sentType of invalid_type)
}

// fail answers err as errorMap says; errors without a row pass through
// to web.ErrorHandler (503 for outages, 500 otherwise).
func fail(err error, s errScope) error {
	if we, ok := web.AnswerError(errorMap, s, err); ok && we != nil {
		return we
	}
	return err
}

// errorRow is a row of errorMap (web.ErrorRow).
type errorRow = web.ErrorRow[errScope]

// is answers errors that wrap target with a fixed status and code, naming
// the query parameter at fault ("": none).
func is(target error, status int, code, field, msg string) errorRow {
	return errorRow{Sample: target, Answer: func(_ errScope, err error) (*web.Error, bool) {
		if !errors.Is(err, target) {
			return nil, false
		}
		return &web.Error{Status: status, Code: code, Field: field, Message: msg}, true
	}}
}

// invalidQuery answers a ?q= that does not parse, in the parser's words.
func invalidQuery(target error) errorRow {
	return errorRow{Sample: target, Answer: func(_ errScope, err error) (*web.Error, bool) {
		if !errors.Is(err, target) {
			return nil, false
		}
		return web.FieldError("q", "invalid_query", err.Error()), true
	}}
}

// unknownApp is the spec's answer for an app that is not configured:
// {error, sentAppName, knowApps}.
func unknownApp(s errScope, e *logs.UnknownAppError) *web.Error {
	status := s.unknownApp
	if status == 0 {
		status = http.StatusNotFound
	}
	name := strings.Clone(e.Name)
	return &web.Error{Status: status, Code: "unknown_app", Message: e.Error(), Body: fiber.Map{
		"error":       fmt.Sprintf("unknown application %q", name),
		"sentAppName": name,
		"knowApps":    appsJSON(e.Known),
	}}
}

// invalidField is a refused field; a refused type is the spec's
// {error, sentType, knownTypes}.
func invalidField(s errScope, e *logs.InvalidError) *web.Error {
	if e.Field == "type" {
		return invalidType(s.sentType)
	}
	return web.FieldError(e.Field, e.Code, e.Msg)
}

// invalidType is the spec's answer for a record type that is not one of
// logs.Types.
func invalidType(typ string) *web.Error {
	return &web.Error{Status: http.StatusBadRequest, Code: "invalid_type", Field: "type", Body: fiber.Map{
		"error":      "type must be one of " + strings.Join(logs.Types, ", "),
		"sentType":   typ,
		"knownTypes": logs.Types,
	}}
}

// internal marks an error that is never a client's answer.
func internal(target error) errorRow { return web.ErrorInternal[errScope](target) }
