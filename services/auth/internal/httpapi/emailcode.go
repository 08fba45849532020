package httpapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/gofiber/fiber/v2"
)

// GET /signin/email: whether the sign-in page offers "e-mail me a code",
// whether an address without an account may sign up with it, and the
// code's length.
func (a *API) emailSignInSettings(c *fiber.Ctx) error {
	on, signUp, digits := a.svc.EmailSignIn()
	return c.JSON(fiber.Map{"enabled": on, "signUp": signUp, "codeLength": digits})
}

// POST /signin/email {email}: 202 whether or not the address belongs to an
// account (the code is mailed in the background).
func (a *API) requestSignInCode(c *fiber.Ctx) error {
	var body struct {
		Email *string `json:"email"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.Email == nil {
		return web.FieldError("email", "missing_field", "email is required")
	}
	if err := a.svc.RequestSignInCode(c.UserContext(), strings.Clone(*body.Email), client(c)); err != nil {
		return apiError(c, err)
	}
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"message": "if the address can sign in, a code and a link are on their way"})
}

// POST /signin/email/verify {email, code} or {token}: the second step of
// a sign-in by mailed code, or the link's console page. It ends as
// POST /signin does: the session cookie, or 202 with an MFA challenge.
func (a *API) verifySignInCode(c *fiber.Ctx) error {
	var body struct {
		Email *string `json:"email"`
		Code  *string `json:"code"`
		Token *string `json:"token"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	cl := client(c)
	var (
		secret string
		sess   account.Session
		res    account.SignInResult
		err    error
	)
	switch {
	case body.Token != nil:
		if body.Email != nil || body.Code != nil {
			return web.FieldError("token", "invalid_value", "send either the link's token or the e-mail and the code")
		}
		secret, sess, res, err = a.svc.SignInWithLink(c.UserContext(), strings.Clone(*body.Token), cl)
	case body.Email == nil:
		return web.FieldError("email", "missing_field", "email is required")
	case body.Code == nil:
		return web.FieldError("code", "missing_field", "code is required")
	default:
		secret, sess, res, err = a.svc.SignInWithCode(c.UserContext(), strings.Clone(*body.Email), strings.Clone(*body.Code), cl)
	}
	var te *account.ThrottledError
	var mr *account.MFARequired
	var wrong *account.EmailCodeWrong
	u := res.User
	ev := account.Event{Target: u.ID, TargetEmail: u.Email, Client: cl}
	failed := func(reason string, detail map[string]any) {
		a.opts.Meter.SignIn(SignInFailed)
		ev.Type = account.EventEmailCodeFailed
		ev.Detail = map[string]any{"reason": reason, "method": res.Method}
		for k, v := range detail {
			ev.Detail[k] = v
		}
	}
	switch {
	case errors.As(err, &mr):
		// The code was right: no session until the second factor.
		return c.Status(http.StatusAccepted).JSON(fiber.Map{
			"message": "second factor required", "mfaRequired": true,
			"challenge": mr.Challenge, "expiresAt": mr.ExpiresAt,
		})
	case err == nil:
		a.opts.Meter.SignIn(SignInOK)
		ev.Type, ev.Actor = account.EventSignIn, u.ID
		ev.Detail = map[string]any{"session": sess.PublicID, "method": res.Method}
		if res.Created {
			ev.Detail["signedUp"] = true
		}
	case errors.As(err, &wrong):
		failed("wrong_code", map[string]any{"triesLeft": wrong.TriesLeft})
		if wrong.TriesLeft == 0 {
			// The request is void from now: record it, then the failure.
			a.svc.Record(c.UserContext(), account.Event{Type: account.EventEmailCodeVoided, Target: u.ID, TargetEmail: u.Email, Client: cl})
		}
	case errors.Is(err, account.ErrEmailCodeVoid):
		failed("void", nil)
	case errors.Is(err, account.ErrInvalidToken):
		failed("invalid_link", nil)
	case errors.As(err, &te):
		a.opts.Meter.SignIn(SignInThrottled)
		ev.Type = account.EventSignInThrottled
		ev.Detail = map[string]any{"method": res.Method}
	}
	return a.signInAnswer(c, ev, err, secret, sess)
}

// POST /me/password/code: mails the caller a code that proves the
// mailbox, for POST /me/password (accounts without a password).
func (a *API) requestPasswordCode(c *fiber.Ctx) error {
	if err := a.svc.RequestPasswordCode(c.UserContext(), caller(c)); err != nil {
		return apiError(c, err)
	}
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"message": "a code is on its way to your e-mail address"})
}

// POST /me/password {code, password}: the first password of an account
// that has none, proven by the mailed code.
func (a *API) setFirstPassword(c *fiber.Ctx) error {
	var body struct {
		Code     *string `json:"code"`
		Password *string `json:"password"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.Code == nil {
		return web.FieldError("code", "missing_field", "code is required")
	}
	if body.Password == nil {
		return web.FieldError("password", "missing_field", "password is required")
	}
	u, err := a.svc.SetFirstPassword(c.UserContext(), caller(c), strings.Clone(*body.Code), *body.Password)
	if err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "password set", "user": toUserJSON(u)})
}
