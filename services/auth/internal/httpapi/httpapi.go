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
	// Identities serves sign-in with identity providers (/signin/oidc,
	// /me/identities, /users/:id/identities); nil: those routes are 404.
	Identities *IdentityOptions
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
	app.Get("/signin/email", a.emailSignInSettings)
	app.Post("/signin/email", a.requestSignInCode)
	app.Post("/signin/email/verify", a.verifySignInCode)
	app.Post("/me/password/code", web.RequireUser, a.requestPasswordCode)
	app.Post("/me/password", web.RequireUser, a.setFirstPassword)
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
	app.Post("/email/change/confirm", a.confirmEmailChange)

	app.Post("/users", web.RequireAdmin, a.createUser)
	app.Get("/users", web.RequireAdmin, a.listUsers)
	app.Get("/users/:id", web.RequireAdmin, a.getUser)
	app.Patch("/users/:id", web.RequireAdmin, a.patchUser)
	app.Delete("/users/:id", web.RequireAdmin, a.deleteUser)
	app.Get("/users/:id/api-keys", web.RequireAdmin, a.listAPIKeys)
	app.Post("/users/:id/api-keys", web.RequireAdmin, a.createAPIKey)
	app.Delete("/users/:id/api-keys/:key", web.RequireAdmin, a.revokeAPIKey)
	if o.Identities != nil {
		a.registerIdentities(app, o.Identities)
	}
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
