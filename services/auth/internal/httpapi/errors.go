package httpapi

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/gofiber/fiber/v2"
)

// errorMap is the one place the account package's errors become what a
// client sees: status, code and message. apiError goes down it in order
// and the first row that matches answers, so the error types come first (a
// PasskeyError may wrap a sentinel such as ErrUserNotFound, and its own
// answer is the right one). A test checks that every exported error of the
// account package has a row.
var errorMap = []errorRow{
	web.ErrorAs[account.ValidationError](func(_ *fiber.Ctx, e *account.ValidationError) *web.Error {
		return web.FieldError(e.Field, e.Code, e.Message)
	}),
	web.ErrorAs[account.ThrottledError](throttled),
	web.ErrorAs[account.PasskeyError](passkeyRefused),
	web.ErrorAs[account.EmailCodeWrong](wrongEmailCode),

	is(account.ErrInvalidCredentials, http.StatusUnauthorized, "invalid_credentials", "invalid e-mail or password"),
	is(account.ErrInvalidSession, http.StatusUnauthorized, "invalid_session", "the session is unknown or has expired"),
	is(account.ErrUserGone, http.StatusUnauthorized, "unauthenticated", "the signed-in user no longer exists"),
	is(account.ErrUserNotFound, http.StatusNotFound, "user_not_found", "no user with this id"),
	is(account.ErrSessionNotFound, http.StatusNotFound, "session_not_found", "no session of yours with this id"),
	is(account.ErrEmailTaken, http.StatusConflict, "email_taken", "this e-mail is already in use"),
	is(account.ErrWrongPassword, http.StatusForbidden, "wrong_password", "the current password does not match"),
	is(account.ErrEmptyPatch, http.StatusBadRequest, "empty_patch", "send at least one property to change"),
	is(account.ErrSelfDelete, http.StatusConflict, "cannot_delete_self", "administrators cannot delete their own account"),
	is(account.ErrSelfDemote, http.StatusConflict, "cannot_demote_self", "administrators cannot remove their own admin role"),
	is(account.ErrInvalidToken, http.StatusBadRequest, "invalid_token", "the link is invalid, has expired or was already used"),
	is(account.ErrMailDisabled, http.StatusServiceUnavailable, "mail_disabled", "this platform sends no e-mail (AUTH_SMTP_HOST is not set): ask an administrator"),
	is(account.ErrBusy, http.StatusServiceUnavailable, "busy", "too many messages are waiting to be sent, try again shortly"),
	is(account.ErrEmailUnverified, http.StatusForbidden, "email_unverified", "confirm your e-mail address first: open the link sent to it"),
	is(account.ErrAlreadyVerified, http.StatusConflict, "already_verified", "the e-mail address is already verified"),
	is(account.ErrInvalidAPIKey, http.StatusUnauthorized, "invalid_api_key", "the api key is unknown, expired or revoked"),
	is(account.ErrAPIKeyNotFound, http.StatusNotFound, "api_key_not_found", "no api key of this user with this id"),
	is(account.ErrTooManyKeys, http.StatusConflict, "too_many_api_keys", "this user has the most api keys allowed (100): revoke one first"),
	is(account.ErrMFAEnabled, http.StatusConflict, "mfa_enabled", "a second factor is already enabled: disable it first"),
	is(account.ErrMFANotEnabled, http.StatusConflict, "mfa_not_enabled", "no second factor is enabled"),
	is(account.ErrNoEnrolment, http.StatusConflict, "no_enrolment", "start an enrolment first (POST /me/mfa/totp)"),
	is(account.ErrInvalidCode, http.StatusForbidden, "invalid_code", "the code is wrong or was already used"),
	is(account.ErrInvalidChallenge, http.StatusUnauthorized, "invalid_challenge", "the challenge is unknown, expired or was already used: sign in again"),
	is(account.ErrMFADisabled, http.StatusServiceUnavailable, "mfa_disabled", "second factors are not available on this platform"),
	is(account.ErrPasskeysDisabled, http.StatusServiceUnavailable, "passkeys_disabled", "passkeys are not available on this platform"),
	is(account.ErrPasskeyNotFound, http.StatusNotFound, "passkey_not_found", "no passkey of yours with this id"),
	is(account.ErrPasskeyExists, http.StatusConflict, "passkey_exists", "this passkey is already registered"),
	is(account.ErrInvalidCeremony, http.StatusBadRequest, "invalid_ceremony", "the ceremony is unknown, expired or was already used: start again"),
	is(account.ErrIdentityNotFound, http.StatusNotFound, "identity_not_found", "no linked identity with this id"),
	is(account.ErrIdentityTaken, http.StatusConflict, "identity_taken", "this identity is linked to another account (or invited already)"),
	is(account.ErrIdentityNotLinked, http.StatusForbidden, "identity_not_linked", "no account is linked to this identity: sign in with your password and link the provider from your profile, or ask an administrator"),
	is(account.ErrIdentityUnverified, http.StatusForbidden, "identity_unverified", "the provider did not confirm the e-mail address: no account can be made with it"),
	is(account.ErrIdentityDomain, http.StatusForbidden, "identity_domain", "accounts cannot be made for this e-mail domain"),
	is(account.ErrIdentityEmailTaken, http.StatusConflict, "identity_email_taken", "an account with this e-mail address exists: sign in to it and link the provider from your profile"),
	is(account.ErrLastSignInMethod, http.StatusConflict, "last_sign_in_method", "this is the last way to sign in to the account: add a passkey, link a provider or set a password first"),
	is(account.ErrMethodsBusy, http.StatusConflict, "sign_in_methods_busy", "another change to the account's ways to sign in is under way: try again"),
	is(account.ErrEmailSignInDisabled, http.StatusServiceUnavailable, "email_signin_disabled", "sign-in by e-mail code is turned off on this platform"),
	is(account.ErrWrongEmailCode, http.StatusUnauthorized, "invalid_code", "the code is wrong"),
	is(account.ErrEmailCodeVoid, http.StatusUnauthorized, "code_void", "no code is waiting for this address: it expired, was used, was replaced by a newer one or was tried 5 times; ask for a new one"),
	is(account.ErrPasswordSet, http.StatusConflict, "password_set", "the account has a password: change it with the current one, or reset it by mail"),
	is(account.ErrTooManyPasskeys, http.StatusConflict, "too_many_passkeys", "this account has the most passkeys allowed: remove one first"),

	// A request that ran out of its time (Options.RequestTimeout), most
	// often queued for a password-hash slot.
	is(context.DeadlineExceeded, http.StatusServiceUnavailable, "busy", "the service is busy, try again shortly"),

	// What the stores tell the account package, which answers them
	// itself: reaching a client would be a bug (500, logged).
	internal(account.ErrFactorNotFound),
	internal(account.ErrCodeUsed),
	internal(account.ErrPasskeyMoved),
	// SignIn's "second factor required", which signIn answers (202 with
	// the challenge) before any error.
	web.ErrorInternalType[account.MFARequired, *fiber.Ctx](),
}

// Errors of the HTTP layer itself, not of the account package.
var (
	errServiceCredential = web.Errorf(http.StatusUnauthorized, "invalid_service_credential", "a valid X-Service-Credential header is required")
	// errSignInCode: a wrong second-factor code while signing in is a
	// failed sign-in (401), not a refused change of settings (403).
	errSignInCode = web.Errorf(http.StatusUnauthorized, "invalid_code", "the code is wrong or was already used")
)

// apiError answers err as errorMap says; errors without a row pass
// through to web.ErrorHandler (503 for outages, 500 otherwise).
func apiError(c *fiber.Ctx, err error) error {
	if err == nil {
		return nil
	}
	if we, ok := web.AnswerError(errorMap, c, err); ok && we != nil {
		return we
	}
	return err
}

// errorRow is a row of errorMap (web.ErrorRow).
type errorRow = web.ErrorRow[*fiber.Ctx]

// is answers errors that wrap target with a fixed status, code and message.
func is(target error, status int, code, msg string) errorRow {
	return errorRow{Sample: target, Answer: func(_ *fiber.Ctx, err error) (*web.Error, bool) {
		if !errors.Is(err, target) {
			return nil, false
		}
		return &web.Error{Status: status, Code: code, Message: msg, Cause: err}, true
	}}
}

// throttled is 429 with Retry-After and the spec's {error, retryAfter}.
func throttled(c *fiber.Ctx, te *account.ThrottledError) *web.Error {
	secs := int64(math.Ceil(te.RetryAfter.Seconds()))
	if secs < 1 {
		secs = 1
	}
	c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(secs, 10))
	return &web.Error{Status: http.StatusTooManyRequests, Code: "throttled",
		Body: fiber.Map{"error": te.Message() + ", try again later", "retryAfter": secs}}
}

// passkeyRefused answers a refused WebAuthn response: 401 for a sign-in,
// 400 for a registration, with the account package's code.
func passkeyRefused(_ *fiber.Ctx, pe *account.PasskeyError) *web.Error {
	status, what := http.StatusBadRequest, "the passkey was not accepted: "
	if pe.SignIn {
		status, what = http.StatusUnauthorized, "the passkey sign-in failed: "
	}
	return web.Errorf(status, pe.Code, what+pe.Detail)
}

// wrongEmailCode is 401 invalid_code with the tries the code has left
// (0: it is void now).
func wrongEmailCode(_ *fiber.Ctx, e *account.EmailCodeWrong) *web.Error {
	return &web.Error{Status: http.StatusUnauthorized, Code: "invalid_code",
		Body: fiber.Map{"error": "the code is wrong", "triesLeft": e.TriesLeft}}
}

// internal marks an error that is never a client's answer.
func internal(target error) errorRow { return web.ErrorInternal[*fiber.Ctx](target) }
