package httpapi

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/acme/platform/pkg/testkit/errortable"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/otlpingest"
)

// Every exported error of the logs package and of the OTLP decoder (an
// Err* variable or a type with an Error method) has a row in errorMap: a
// new error without one fails here instead of reaching clients as a 500.
func TestErrorMapCoversDomainErrors(t *testing.T) {
	for _, pkg := range []string{"logs", "otlpingest"} {
		inTable := errortable.NamesInTable(t, "errors.go", "errorMap", pkg)
		for _, name := range errortable.ExportedErrors(t, "../"+pkg) {
			if !inTable[name] {
				t.Errorf("%s.%s has no row in errorMap (errors.go)", pkg, name)
			}
		}
	}
}

// No row is shadowed by an earlier one: each row answers its own error,
// also when wrapped.
func TestErrorMapRowsAnswerTheirOwnErrors(t *testing.T) {
	for i, row := range errorMap {
		err := fmt.Errorf("wrapped: %w", row.Sample)
		if _, ok := row.Answer(errScope{}, err); !ok {
			t.Errorf("row %d does not match its own error %v", i, row.Sample)
		}
		for j := range i {
			if _, ok := errorMap[j].Answer(errScope{}, err); ok {
				t.Errorf("row %d (%v) is shadowed by row %d", i, row.Sample, j)
			}
		}
	}
}

// What fail answers, with what the scope names.
func TestFail(t *testing.T) {
	write := errScope{unknownApp: 400, sentType: "bogus"}
	unknown := &logs.UnknownAppError{Name: "NOPE", Known: []logs.App{{ID: "1", Name: "LOGGING"}}}
	for _, tc := range []struct {
		name   string
		err    error
		scope  errScope
		status int
		code   string
		field  string
		body   string // fmt.Sprint of the spec's own body, if any
	}{
		{"unknownAppRead404", unknown, errScope{}, 404, "unknown_app", "", `map[error:unknown application "NOPE" knowApps:[{1 LOGGING}] sentAppName:NOPE]`},
		{"unknownAppWrite400", unknown, write, 400, "unknown_app", "", `map[error:unknown application "NOPE" knowApps:[{1 LOGGING}] sentAppName:NOPE]`},
		{"invalidType400", &logs.InvalidError{Field: "type", Code: "invalid_type", Msg: "m"}, write, 400, "invalid_type", "type", `map[error:type must be one of log, error, db knownTypes:[log error db] sentType:bogus]`},
		{"invalidBody400", &logs.InvalidError{Field: "logBody", Code: "too_long", Msg: "m"}, write, 400, "too_long", "logBody", ""},
		{"cursor404", fmt.Errorf("x: %w", logs.ErrNotFound), errScope{}, 404, "cursor_not_found", "before", ""},
		{"query400", logs.ErrSearchQuote, errScope{}, 400, "invalid_query", "q", ""},
		{"tooManyTails429", logs.ErrTooManyTails, errScope{}, 429, "too_many_tails", "", ""},
		{"tailsBusy503", logs.ErrTailsBusy, errScope{}, 503, "busy", "", ""},
		{"otlp400", fmt.Errorf("%w: JSON", otlpingest.ErrBadRequest), errScope{}, 400, "invalid_otlp", "body", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var we *web.Error
			if got := fail(tc.err, tc.scope); !errors.As(got, &we) {
				t.Fatalf("got %v, want a *web.Error", got)
			}
			body := ""
			if we.Body != nil {
				body = fmt.Sprint(map[string]any(we.Body))
			}
			if we.Status != tc.status || we.Code != tc.code || we.Field != tc.field || body != tc.body {
				t.Errorf("got %d %s %q %s, want %d %s %q %s", we.Status, we.Code, we.Field, body, tc.status, tc.code, tc.field, tc.body)
			}
		})
	}
	for _, err := range []error{logs.ErrDuplicate, logs.ErrWriterClosed, os.ErrDeadlineExceeded} {
		if got := fail(err, errScope{}); got != err {
			t.Errorf("%v: got %v, want it passed through to the error handler", err, got)
		}
	}
}
