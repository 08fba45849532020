package httpapi

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/acme/platform/pkg/testkit/errortable"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/gofiber/fiber/v2"
)

// Every exported error of the account package (an Err* variable or a type
// with an Error method) has a row in errorMap: a new error without one
// fails here instead of reaching clients as a 500.
func TestErrorMapCoversAccountErrors(t *testing.T) {
	inTable := errortable.NamesInTable(t, "errors.go", "errorMap", "account")
	for _, name := range errortable.ExportedErrors(t, "../account") {
		if !inTable[name] {
			t.Errorf("account.%s has no row in errorMap (errors.go)", name)
		}
	}
}

// No row is shadowed by an earlier one: each row answers its own error,
// also when wrapped.
func TestErrorMapRowsAnswerTheirOwnErrors(t *testing.T) {
	inFiber(t, func(c *fiber.Ctx) {
		for i, row := range errorMap {
			err := fmt.Errorf("wrapped: %w", row.Sample)
			if _, ok := row.Answer(c, err); !ok {
				t.Errorf("row %d does not match its own error %v", i, row.Sample)
			}
			for j := range i {
				if _, ok := errorMap[j].Answer(c, err); ok {
					t.Errorf("row %d (%v) is shadowed by row %d", i, row.Sample, j)
				}
			}
		}
	})
}

// What apiError answers for a few errors of each kind of row.
func TestAPIError(t *testing.T) {
	inFiber(t, func(c *fiber.Ctx) {
		for _, tc := range []struct {
			err    error
			status int
			code   string
		}{
			{fmt.Errorf("x: %w", account.ErrEmailTaken), 409, "email_taken"},
			{&account.ValidationError{Field: "email", Code: "invalid_email", Message: "m"}, 400, "invalid_email"},
			{&account.PasskeyError{SignIn: true, Code: "passkey_unknown", Err: account.ErrUserNotFound}, 401, "passkey_unknown"},
			{&account.PasskeyError{Code: "passkey_failed"}, 400, "passkey_failed"},
		} {
			var we *web.Error
			if got := apiError(c, tc.err); !errors.As(got, &we) {
				t.Errorf("%v: got %v, want a *web.Error", tc.err, got)
			} else if we.Status != tc.status || we.Code != tc.code {
				t.Errorf("%v: got %d %s, want %d %s", tc.err, we.Status, we.Code, tc.status, tc.code)
			}
		}
		for _, err := range []error{account.ErrCodeUsed, os.ErrClosed} {
			if got := apiError(c, err); got != err {
				t.Errorf("%v: got %v, want it passed through to the error handler", err, got)
			}
		}
		apiError(c, &account.ThrottledError{RetryAfter: 1500e6})
		if got := string(c.Response().Header.Peek(fiber.HeaderRetryAfter)); got != "2" {
			t.Errorf("Retry-After = %q, want 2", got)
		}
	})
}

// inFiber runs f with the context of a real request.
func inFiber(t *testing.T, f func(c *fiber.Ctx)) {
	t.Helper()
	app := fiber.New()
	app.Get("/", func(c *fiber.Ctx) error { f(c); return nil })
	resp, err := app.Test(httptest.NewRequest("GET", "/", nil), -1)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}
