package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/idp"
	"github.com/gofiber/fiber/v2"
)

// StateCookieName binds a provider sign-in to the browser that began it.
const StateCookieName = "idpState"

// stateCookiePath limits the state cookie to the callbacks.
const stateCookiePath = "/signin/oidc/"

// IdentityOptions turn on sign-in with identity providers.
type IdentityOptions struct {
	Flow       *idp.Flow
	Identities *account.Identities
	PublicURL  string // the gateway's public address; the console is PublicURL + /console/
	Log        *slog.Logger
}

type identityAPI struct {
	*API
	flow *idp.Flow
	ids  *account.Identities
	base string
	log  *slog.Logger
}

// registerIdentities mounts the provider routes (after RequireIdentity).
func (a *API) registerIdentities(app *fiber.App, o *IdentityOptions) {
	x := &identityAPI{API: a, flow: o.Flow, ids: o.Identities, base: strings.TrimRight(o.PublicURL, "/"), log: o.Log}
	if x.log == nil {
		x.log = slog.Default()
	}
	app.Get("/signin/oidc", x.providers)
	app.Get("/signin/oidc/:provider", x.begin)
	app.Get("/signin/oidc/:provider/callback", x.callback)
	app.Get("/me/identities", web.RequireUser, x.list)
	app.Post("/me/identities/:provider/link", web.RequireUser, x.beginLink)
	app.Delete("/me/identities/:id", web.RequireUser, x.unlink)
	app.Get("/users/:id/identities", web.RequireAdmin, x.adminList)
	app.Post("/users/:id/identities", web.RequireAdmin, x.invite)
	app.Delete("/users/:id/identities/:identity", web.RequireAdmin, x.remove)
}

// GET /signin/oidc: the providers to offer, for the sign-in page's buttons.
func (x *identityAPI) providers(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"providers": x.flow.Providers()})
}

// console is the console's address for a page and its query.
func (x *identityAPI) console(page string, q url.Values) string {
	u := x.base + "/console/#/" + page
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// refuse sends the browser back to the console with the code of err, which
// the page turns into a sentence.
func (x *identityAPI) refuse(c *fiber.Ctx, page string, err error) error {
	code := "internal"
	var ie *idp.Error
	var we *web.Error
	switch {
	case errors.As(err, &ie):
		code = ie.Code
	case errors.As(apiError(c, err), &we):
		code = we.Code
	case web.IsUnavailable(err):
		code = "unavailable"
	}
	if code == "internal" || code == idp.CodeProviderUnavailable {
		x.log.ErrorContext(c.UserContext(), "identity provider sign-in", "err", err)
	}
	c.Response().Header.Del(fiber.HeaderRetryAfter)
	return c.Redirect(x.console(page, url.Values{"error": {code}}), http.StatusFound)
}

func (x *identityAPI) setStateCookie(c *fiber.Ctx, b idp.Begun) {
	ck := http.Cookie{Name: StateCookieName, Value: b.State, Path: stateCookiePath,
		MaxAge: int(time.Until(b.ExpiresAt).Seconds()), HttpOnly: true, Secure: x.opts.CookieSecure,
		// Lax: the provider's redirect back is a top-level GET from
		// another site, which must carry it.
		SameSite: http.SameSiteLaxMode}
	c.Response().Header.Add(fiber.HeaderSetCookie, ck.String())
}

func (x *identityAPI) clearStateCookie(c *fiber.Ctx) {
	ck := http.Cookie{Name: StateCookieName, Value: "", Path: stateCookiePath, MaxAge: -1, Expires: time.Unix(0, 0),
		HttpOnly: true, Secure: x.opts.CookieSecure, SameSite: http.SameSiteLaxMode}
	c.Response().Header.Add(fiber.HeaderSetCookie, ck.String())
}

// GET /signin/oidc/:provider: 302 to the provider, with the state cookie.
// The begin is admitted like a passkey sign-in begun (per client address,
// and one of the pending flows' slots); a refused one is sent back to the
// console with error=throttled, as a browser navigating here expects a
// page, not JSON.
func (x *identityAPI) begin(c *fiber.Ctx) error {
	name := strings.Clone(c.Params("provider"))
	if !x.flow.Known(name) {
		return x.refuse(c, "signin", idp.ErrUnknownProvider)
	}
	cl := client(c)
	if err := x.ids.Check(c.UserContext(), cl); err != nil {
		return x.refuse(c, "signin", err)
	}
	var b idp.Begun
	err := x.ids.Begin(c.UserContext(), cl, true, func(slot string) (err error) {
		b, err = x.flow.Begin(c.UserContext(), name, idp.PurposeSignIn, "", slot)
		return err
	})
	if err != nil {
		return x.refuse(c, "signin", err)
	}
	x.setStateCookie(c, b)
	return c.Redirect(b.URL, http.StatusFound)
}

// POST /me/identities/:provider/link: begins linking a provider to the caller;
// 200 {url}: the console sends the browser there.
func (x *identityAPI) beginLink(c *fiber.Ctx) error {
	name := strings.Clone(c.Params("provider"))
	if !x.flow.Known(name) {
		return web.Errorf(http.StatusNotFound, idp.CodeUnknownProvider, "no identity provider with this name is configured")
	}
	var b idp.Begun
	err := x.ids.Begin(c.UserContext(), client(c), false, func(slot string) (err error) {
		b, err = x.flow.Begin(c.UserContext(), name, idp.PurposeLink, caller(c).UserID, slot)
		return err
	})
	var ie *idp.Error
	switch {
	case errors.As(err, &ie): // the provider's discovery failed
		x.log.ErrorContext(c.UserContext(), "identity provider link", "err", err)
		return &web.Error{Status: http.StatusServiceUnavailable, Code: ie.Code, Message: ie.Message, Cause: err}
	case err != nil:
		return apiError(c, err)
	}
	x.setStateCookie(c, b)
	return c.JSON(fiber.Map{"url": b.URL})
}

// GET /signin/oidc/:provider/callback: the provider's answer. Whatever
// happens, the browser goes back to the console: signed in, asked for its
// second factor, or told why not.
func (x *identityAPI) callback(c *fiber.Ctx) error {
	name := strings.Clone(c.Params("provider"))
	cl := client(c)
	bound := strings.Clone(c.Cookies(StateCookieName))
	x.clearStateCookie(c)
	res, err := x.flow.Finish(c.UserContext(), name, bound, idp.Callback{
		State: strings.Clone(c.Query("state")), Code: strings.Clone(c.Query("code")),
		Error: strings.Clone(c.Query("error")), ErrorDescription: strings.Clone(c.Query("error_description")),
	})
	page := "signin"
	if res.Purpose == idp.PurposeLink {
		page = "profile"
	}
	if err != nil {
		return x.flowFailed(c, page, name, cl, err)
	}
	if res.Purpose == idp.PurposeLink {
		return x.finishLink(c, res, cl)
	}
	secret, sess, u, err := x.ids.SignIn(c.UserContext(), res.Identity, res.Policy, cl)
	ev := account.Event{Target: u.ID, TargetEmail: u.Email, Client: cl,
		Detail: map[string]any{"provider": name, "subject": res.Identity.Subject}}
	var mr *account.MFARequired
	var te *account.ThrottledError
	switch {
	case errors.As(err, &mr):
		return c.Redirect(x.console("signin", url.Values{"challenge": {mr.Challenge}}), http.StatusFound)
	case err == nil:
		a := x.API
		a.opts.Meter.SignIn(SignInOK)
		ev.Type, ev.Actor = account.EventSignIn, u.ID
		ev.Detail["session"] = sess.PublicID
		a.svc.Record(c.UserContext(), ev)
		a.setSessionCookie(c, secret, sess)
		return c.Redirect(x.console("profile", nil), http.StatusFound)
	case errors.As(err, &te):
		x.opts.Meter.SignIn(SignInThrottled)
		ev.Type = account.EventSignInThrottled
	case errors.Is(err, account.ErrEmailUnverified):
		ev.Type = account.EventSignInUnverified
	case web.IsUnavailable(err):
	default:
		x.opts.Meter.SignIn(SignInFailed)
		ev.Type, ev.TargetEmail = account.EventSignInFailed, res.Identity.Email
		ev.Detail["reason"] = err.Error()
	}
	if ev.Type != "" {
		x.svc.Record(c.UserContext(), ev)
	}
	return x.refuse(c, "signin", err)
}

// flowFailed records a flow the provider's answer did not finish, and
// counts it against the client address like a failed sign-in. A callback
// without this browser's state cookie is refused before that: any web page
// can make a visitor's browser send one (an <img>), so counting it would
// let a stranger lock the sign-ins of everyone behind the visitor's
// address.
func (x *identityAPI) flowFailed(c *fiber.Ctx, page, name string, cl account.Client, err error) error {
	var ie *idp.Error
	if idp.IsUnbound(err) || !errors.As(err, &ie) || ie.Code == idp.CodeProviderUnavailable || ie.Code == idp.CodeUnknownProvider {
		return x.refuse(c, page, err)
	}
	x.opts.Meter.SignIn(SignInFailed)
	x.svc.Record(c.UserContext(), account.Event{Type: account.EventSignInFailed, Client: cl,
		Detail: map[string]any{"provider": name, "reason": ie.Code}})
	if terr := x.ids.Failed(c.UserContext(), cl); terr != nil {
		var te *account.ThrottledError
		if !errors.As(terr, &te) {
			x.log.WarnContext(c.UserContext(), "count a failed provider sign-in", "err", terr)
		}
	}
	return x.refuse(c, page, err)
}

func (x *identityAPI) finishLink(c *fiber.Ctx, res idp.Result, cl account.Client) error {
	id, err := x.ids.Link(c.UserContext(), account.Caller{UserID: res.UserID, Client: cl}, res.Identity)
	if err != nil {
		return x.refuse(c, "profile", err)
	}
	return c.Redirect(x.console("profile", url.Values{"linked": {id.Provider}}), http.StatusFound)
}

type identityJSON struct {
	ID         string     `json:"id"`
	Provider   string     `json:"provider"`
	Email      string     `json:"email"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"` // null for an invitation
	Pending    bool       `json:"pending"`
}

func toIdentityJSON(i account.Identity) identityJSON {
	j := identityJSON{ID: i.ID, Provider: i.Provider, Email: i.Email, CreatedAt: i.CreatedAt, Pending: i.Pending}
	if !i.Pending {
		j.LastUsedAt = &i.LastUsedAt
	}
	return j
}

func identitiesJSON(list []account.Identity) []identityJSON {
	out := make([]identityJSON, 0, len(list))
	for _, i := range list {
		out = append(out, toIdentityJSON(i))
	}
	return out
}

// GET /me/identities
func (x *identityAPI) list(c *fiber.Ctx) error {
	list, err := x.ids.List(c.UserContext(), caller(c).UserID)
	if err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"identities": identitiesJSON(list), "providers": x.flow.Providers()})
}

// DELETE /me/identities/:id
func (x *identityAPI) unlink(c *fiber.Ctx) error {
	if err := x.ids.Unlink(c.UserContext(), caller(c), strings.Clone(c.Params("id"))); err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "identity unlinked"})
}

// GET /users/:id/identities (administrators)
func (x *identityAPI) adminList(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	if _, err := x.svc.User(c.UserContext(), id); err != nil {
		return apiError(c, err)
	}
	list, err := x.ids.List(c.UserContext(), id)
	if err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"identities": identitiesJSON(list)})
}

// POST /users/:id/identities {provider} (administrators): the user's first
// sign-in with the provider, with the user's address verified by it, links
// the identity, whatever the provider's sign-up policy.
func (x *identityAPI) invite(c *fiber.Ctx) error {
	var body struct {
		Provider *string `json:"provider"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.Provider == nil {
		return web.FieldError("provider", "missing_field", "provider is required")
	}
	if _, ok := x.flow.Policy(*body.Provider); !ok {
		return web.Errorf(http.StatusNotFound, idp.CodeUnknownProvider, "no identity provider with this name is configured")
	}
	id, err := x.ids.Invite(c.UserContext(), caller(c), strings.Clone(c.Params("id")), *body.Provider)
	if err != nil {
		return apiError(c, err)
	}
	return c.Status(http.StatusCreated).JSON(fiber.Map{"message": "identity invited", "identity": toIdentityJSON(id)})
}

// DELETE /users/:id/identities/:identity (administrators): unlinks an
// identity or withdraws an invitation.
func (x *identityAPI) remove(c *fiber.Ctx) error {
	if err := x.ids.Remove(c.UserContext(), caller(c), strings.Clone(c.Params("id")), strings.Clone(c.Params("identity"))); err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "identity removed"})
}
