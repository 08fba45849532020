// Package httpapi is the auth service's HTTP interface: the spec's user
// endpoints, the service endpoint /ms/me used by gateways, session
// management and user administration. Handlers translate between JSON and
// the account package and return errors that pkg/web renders.
package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/natsfence"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/gofiber/fiber/v2"
)

// CookieName is the session cookie's name (fixed by the spec).
const CookieName = "sessionId"

// ServiceCredentialHeader carries a calling service's credential to /ms/me.
const ServiceCredentialHeader = "X-Service-Credential"

// Options configure the handlers.
type Options struct {
	CookieSecure       bool
	ServiceCredentials []string      // accepted values of ServiceCredentialHeader
	RequestTimeout     time.Duration // bounds each request, including waiting for a hash slot
	Meter              Meter         // may be nil
}

// Meter is told what operators count (metrics).
type Meter interface {
	// SignIn reports a sign-in attempt that was decided: SignInOK,
	// SignInFailed or SignInThrottled. Malformed requests and outages are
	// not attempts (the request metrics show them by status).
	SignIn(result string)
}

// Sign-in results.
const (
	SignInOK        = "ok"
	SignInFailed    = "failed"
	SignInThrottled = "throttled"
)

type noMeter struct{}

func (noMeter) SignIn(string) {}

// API holds the handlers.
type API struct {
	svc   *account.Service
	opts  Options
	creds [][32]byte // SHA-256 of each accepted credential
}

// Register mounts the routes on app. /healthz and /readyz must already be
// registered: every route registered here except /ms/me and /ms/apikey, and
// every unknown path, requires an identity token.
func Register(app *fiber.App, svc *account.Service, v *identity.Verifier, o Options) error {
	if len(o.ServiceCredentials) == 0 {
		return errors.New("no service credential configured: set AUTH_SERVICE_CREDENTIALS or SERVICE_CREDENTIAL")
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.Meter == nil {
		o.Meter = noMeter{}
	}
	a := &API{svc: svc, opts: o}
	for _, c := range o.ServiceCredentials {
		a.creds = append(a.creds, sha256.Sum256([]byte(c)))
	}

	app.Use(a.deadline, noStore)
	app.Get("/ms/me", a.serviceMe)
	app.Get("/ms/apikey", a.serviceAPIKey)

	app.Use(web.RequireIdentity(v))
	app.Post("/signin", a.signIn)
	app.Post("/signin/mfa", a.signInMFA)
	app.Get("/me/mfa", web.RequireUser, a.mfaStatus)
	app.Post("/me/mfa/totp", web.RequireUser, a.startTOTP)
	app.Post("/me/mfa/totp/confirm", web.RequireUser, a.confirmTOTP)
	app.Post("/me/mfa/totp/disable", web.RequireUser, a.disableTOTP)
	app.Delete("/users/:id/mfa", web.RequireAdmin, a.resetMFA)
	app.Post("/signin/passkey/begin", a.beginPasskeySignIn)
	app.Post("/signin/passkey/finish", a.finishPasskeySignIn)
	app.Get("/me/passkeys", web.RequireUser, a.listPasskeys)
	app.Post("/me/passkeys/begin", web.RequireUser, a.beginPasskeyRegistration)
	app.Post("/me/passkeys/finish", web.RequireUser, a.finishPasskeyRegistration)
	app.Delete("/me/passkeys/:id", web.RequireUser, a.removePasskey)
	app.Delete("/signout", web.RequireUser, a.signOut)
	app.Get("/me", web.RequireUser, a.me)
	app.Patch("/me", web.RequireUser, a.patchMe)
	app.Get("/me/sessions", web.RequireUser, a.listSessions)
	app.Delete("/me/sessions", web.RequireUser, a.endOtherSessions)
	app.Delete("/me/sessions/:id", web.RequireUser, a.endSession)
	app.Post("/me/email/verification", web.RequireUser, a.resendVerification)
	app.Get("/me/api-keys", web.RequireUser, a.listAPIKeys)
	app.Post("/me/api-keys", web.RequireUser, a.createAPIKey)
	app.Delete("/me/api-keys/:key", web.RequireUser, a.revokeAPIKey)

	// Without a session: the link's token is the proof.
	app.Post("/password/forgot", a.forgotPassword)
	app.Post("/password/reset", a.resetPassword)
	app.Post("/email/verify", a.verifyEmail)

	app.Post("/users", web.RequireAdmin, a.createUser)
	app.Get("/users", web.RequireAdmin, a.listUsers)
	app.Get("/users/:id", web.RequireAdmin, a.getUser)
	app.Patch("/users/:id", web.RequireAdmin, a.patchUser)
	app.Delete("/users/:id", web.RequireAdmin, a.deleteUser)
	app.Get("/users/:id/api-keys", web.RequireAdmin, a.listAPIKeys)
	app.Post("/users/:id/api-keys", web.RequireAdmin, a.createAPIKey)
	app.Delete("/users/:id/api-keys/:key", web.RequireAdmin, a.revokeAPIKey)
	return nil
}

// deadline bounds every request so that a queue of sign-ins waiting for a
// hash slot (or a slow database) ends in a 503 instead of piling up.
func (a *API) deadline(c *fiber.Ctx) error {
	// One NATS fence per request however many cached reads it makes
	// (a sign-in reads two throttle states and a user).
	ctx, cancel := context.WithTimeout(natsfence.Once(c.UserContext()), a.opts.RequestTimeout)
	defer cancel()
	c.SetUserContext(ctx)
	return c.Next()
}

// noStore keeps user data and session cookies out of caches.
func noStore(c *fiber.Ctx) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Next()
}

// userJSON is the spec's User.
type userJSON struct {
	ID        string    `json:"id"`
	Email     string    `json:"email"`
	FullName  string    `json:"fullName"`
	Sector    *string   `json:"sector"`
	EDV       string    `json:"edv"`
	AvatarURL *string   `json:"avatarUrl"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	RoleName  string    `json:"roleName"`
	// EmailVerified: the user opened a link sent to Email.
	EmailVerified bool `json:"emailVerified"`
	// MFAEnabled: sign-in asks for a second factor.
	MFAEnabled bool `json:"mfaEnabled"`
}

func toUserJSON(u account.User) userJSON {
	return userJSON{
		ID: u.ID, Email: u.Email, FullName: u.FullName, Sector: u.Sector, EDV: u.EDV,
		AvatarURL: u.AvatarURL, CreatedAt: u.CreatedAt, UpdatedAt: u.UpdatedAt, RoleName: u.Role,
		EmailVerified: u.EmailVerified, MFAEnabled: u.MFAEnabled,
	}
}

func caller(c *fiber.Ctx) account.Caller {
	cl := web.Identity(c)
	return account.Caller{
		UserID:    cl.UserID(),
		SessionID: cl.SessionID,
		Client:    client(c),
	}
}

func client(c *fiber.Ctx) account.Client {
	var ip string
	if cl := web.Identity(c); cl != nil {
		ip = cl.ClientIP
	}
	return account.Client{IP: ip, UserAgent: strings.Clone(c.Get(fiber.HeaderUserAgent))}
}

// setSessionCookie sets the cookie for a new session.
func (a *API) setSessionCookie(c *fiber.Ctx, secret string, s account.Session) {
	ck := http.Cookie{
		Name: CookieName, Value: secret, Path: "/",
		MaxAge:   int(math.Ceil(time.Until(s.ExpiresAt).Seconds())),
		Expires:  s.ExpiresAt,
		HttpOnly: true, Secure: a.opts.CookieSecure, SameSite: http.SameSiteLaxMode,
	}
	c.Response().Header.Add(fiber.HeaderSetCookie, ck.String())
}

// clearSessionCookie removes the cookie (same attributes, Max-Age=0).
func (a *API) clearSessionCookie(c *fiber.Ctx) {
	ck := http.Cookie{
		Name: CookieName, Value: "", Path: "/", MaxAge: -1, Expires: time.Unix(0, 0),
		HttpOnly: true, Secure: a.opts.CookieSecure, SameSite: http.SameSiteLaxMode,
	}
	c.Response().Header.Add(fiber.HeaderSetCookie, ck.String())
}

// validCredential compares against every configured credential in constant time.
func (a *API) validCredential(got string) bool {
	if got == "" {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	ok := 0
	for i := range a.creds {
		ok |= subtle.ConstantTimeCompare(sum[:], a.creds[i][:])
	}
	return ok == 1
}

// Error codes beyond pkg/web's.
var (
	errInvalidCredentials = web.Errorf(http.StatusUnauthorized, "invalid_credentials", "invalid e-mail or password")
	errInvalidSession     = web.Errorf(http.StatusUnauthorized, "invalid_session", "the session is unknown or has expired")
	errServiceCredential  = web.Errorf(http.StatusUnauthorized, "invalid_service_credential", "a valid X-Service-Credential header is required")
	errUserGone           = web.Errorf(http.StatusUnauthorized, "unauthenticated", "the signed-in user no longer exists")
	errUserNotFound       = web.Errorf(http.StatusNotFound, "user_not_found", "no user with this id")
	errSessionNotFound    = web.Errorf(http.StatusNotFound, "session_not_found", "no session of yours with this id")
	errEmailTaken         = web.Errorf(http.StatusConflict, "email_taken", "this e-mail is already in use")
	errWrongPassword      = web.Errorf(http.StatusForbidden, "wrong_password", "the current password does not match")
	errEmptyPatch         = web.Errorf(http.StatusBadRequest, "empty_patch", "send at least one property to change")
	errSelfDelete         = web.Errorf(http.StatusConflict, "cannot_delete_self", "administrators cannot delete their own account")
	errSelfDemote         = web.Errorf(http.StatusConflict, "cannot_demote_self", "administrators cannot remove their own admin role")
	errInvalidToken       = web.Errorf(http.StatusBadRequest, "invalid_token", "the link is invalid, has expired or was already used")
	errMailDisabled       = web.Errorf(http.StatusServiceUnavailable, "mail_disabled", "this platform sends no e-mail (AUTH_SMTP_HOST is not set): ask an administrator")
	errMailBusy           = web.Errorf(http.StatusServiceUnavailable, "busy", "too many messages are waiting to be sent, try again shortly")
	errEmailUnverified    = web.Errorf(http.StatusForbidden, "email_unverified", "confirm your e-mail address first: open the link sent to it")
	errAlreadyVerified    = web.Errorf(http.StatusConflict, "already_verified", "the e-mail address is already verified")
	errInvalidAPIKey      = web.Errorf(http.StatusUnauthorized, "invalid_api_key", "the api key is unknown, expired or revoked")
	errAPIKeyNotFound     = web.Errorf(http.StatusNotFound, "api_key_not_found", "no api key of this user with this id")
	errMFAEnabled         = web.Errorf(http.StatusConflict, "mfa_enabled", "a second factor is already enabled: disable it first")
	errMFANotEnabled      = web.Errorf(http.StatusConflict, "mfa_not_enabled", "no second factor is enabled")
	errNoEnrolment        = web.Errorf(http.StatusConflict, "no_enrolment", "start an enrolment first (POST /me/mfa/totp)")
	errInvalidCode        = web.Errorf(http.StatusForbidden, "invalid_code", "the code is wrong or was already used")
	errInvalidChallenge   = web.Errorf(http.StatusUnauthorized, "invalid_challenge", "the challenge is unknown, expired or was already used: sign in again")
	errMFADisabled        = web.Errorf(http.StatusServiceUnavailable, "mfa_disabled", "second factors are not available on this platform")
	errPasskeysDisabled   = web.Errorf(http.StatusServiceUnavailable, "passkeys_disabled", "passkeys are not available on this platform")
	errPasskeyNotFound    = web.Errorf(http.StatusNotFound, "passkey_not_found", "no passkey of yours with this id")
	errPasskeyExists      = web.Errorf(http.StatusConflict, "passkey_exists", "this passkey is already registered")
	errInvalidCeremony    = web.Errorf(http.StatusBadRequest, "invalid_ceremony", "the ceremony is unknown, expired or was already used: start again")
	errTooManyPasskeys    = web.Errorf(http.StatusConflict, "too_many_passkeys", "this account has the most passkeys allowed: remove one first")
	errTooManyKeys        = web.Errorf(http.StatusConflict, "too_many_api_keys", "this user has the most api keys allowed (100): revoke one first")
)

// apiError maps domain errors to HTTP errors; others pass through to
// web.ErrorHandler (503 for outages, 500 otherwise).
func apiError(c *fiber.Ctx, err error) error {
	var ve *account.ValidationError
	var te *account.ThrottledError
	var pe *account.PasskeyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ve):
		return web.FieldError(ve.Field, ve.Code, ve.Message)
	case errors.As(err, &te):
		secs := int64(math.Ceil(te.RetryAfter.Seconds()))
		if secs < 1 {
			secs = 1
		}
		c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(secs, 10))
		return &web.Error{Status: http.StatusTooManyRequests, Code: "throttled",
			Body: fiber.Map{"error": te.Message() + ", try again later", "retryAfter": secs}}
	case errors.Is(err, account.ErrInvalidCredentials):
		return errInvalidCredentials
	case errors.Is(err, account.ErrInvalidSession):
		return errInvalidSession
	case errors.Is(err, account.ErrUserGone):
		return errUserGone
	case errors.Is(err, account.ErrUserNotFound):
		return errUserNotFound
	case errors.Is(err, account.ErrSessionNotFound):
		return errSessionNotFound
	case errors.Is(err, account.ErrEmailTaken):
		return errEmailTaken
	case errors.Is(err, account.ErrWrongPassword):
		return errWrongPassword
	case errors.Is(err, account.ErrEmptyPatch):
		return errEmptyPatch
	case errors.Is(err, account.ErrSelfDelete):
		return errSelfDelete
	case errors.Is(err, account.ErrSelfDemote):
		return errSelfDemote
	case errors.Is(err, account.ErrInvalidToken):
		return errInvalidToken
	case errors.Is(err, account.ErrMailDisabled):
		return errMailDisabled
	case errors.Is(err, account.ErrBusy):
		return errMailBusy
	case errors.Is(err, account.ErrEmailUnverified):
		return errEmailUnverified
	case errors.Is(err, account.ErrAlreadyVerified):
		return errAlreadyVerified
	case errors.Is(err, account.ErrInvalidAPIKey):
		return errInvalidAPIKey
	case errors.Is(err, account.ErrAPIKeyNotFound):
		return errAPIKeyNotFound
	case errors.Is(err, account.ErrMFAEnabled):
		return errMFAEnabled
	case errors.Is(err, account.ErrMFANotEnabled):
		return errMFANotEnabled
	case errors.Is(err, account.ErrNoEnrolment):
		return errNoEnrolment
	case errors.Is(err, account.ErrInvalidCode):
		return errInvalidCode
	case errors.Is(err, account.ErrInvalidChallenge):
		return errInvalidChallenge
	case errors.Is(err, account.ErrMFADisabled):
		return errMFADisabled
	case errors.As(err, &pe):
		return passkeyError(pe)
	case errors.Is(err, account.ErrPasskeysDisabled):
		return errPasskeysDisabled
	case errors.Is(err, account.ErrPasskeyNotFound):
		return errPasskeyNotFound
	case errors.Is(err, account.ErrPasskeyExists):
		return errPasskeyExists
	case errors.Is(err, account.ErrInvalidCeremony):
		return errInvalidCeremony
	case errors.Is(err, account.ErrTooManyPasskeys):
		return errTooManyPasskeys
	case errors.Is(err, account.ErrTooManyKeys):
		return errTooManyKeys
	case errors.Is(err, context.DeadlineExceeded):
		return &web.Error{Status: http.StatusServiceUnavailable, Code: "busy", Message: "the service is busy, try again shortly", Cause: err}
	}
	return err
}
