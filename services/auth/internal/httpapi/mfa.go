package httpapi

import (
	"encoding/base64"
	"errors"
	"strings"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/gofiber/fiber/v2"
)

// POST /signin/mfa {challenge, code}: the second step of a sign-in; 200
// and the session cookie, as POST /signin without a second factor.
func (a *API) signInMFA(c *fiber.Ctx) error {
	var body struct {
		Challenge *string `json:"challenge"`
		Code      *string `json:"code"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.Challenge == nil {
		return web.FieldError("challenge", "missing_field", "challenge is required")
	}
	if body.Code == nil {
		return web.FieldError("code", "missing_field", "code is required")
	}
	cl := client(c)
	secret, sess, u, kind, err := a.svc.SignInMFA(c.UserContext(), *body.Challenge, *body.Code, cl)
	var te *account.ThrottledError
	ev := account.Event{Target: u.ID, TargetEmail: u.Email, Client: cl}
	switch {
	case err == nil:
		a.opts.Meter.SignIn(SignInOK)
		ev.Type, ev.Actor = account.EventSignIn, u.ID
		ev.Detail = map[string]any{"session": sess.PublicID, "factor": kind}
	case errors.Is(err, account.ErrInvalidCode):
		a.opts.Meter.SignIn(SignInFailed)
		ev.Type = account.EventMFAFailed
		err = errSignInCode
	case errors.As(err, &te):
		a.opts.Meter.SignIn(SignInThrottled)
		ev.Type = account.EventSignInThrottled
	}
	return a.signInAnswer(c, ev, err, secret, sess)
}

// GET /me/mfa
func (a *API) mfaStatus(c *fiber.Ctx) error {
	st, err := a.svc.MFAStatus(c.UserContext(), caller(c).UserID)
	if err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"totp": st.Enabled, "recoveryCodesLeft": st.RecoveryCodesLeft, "passkeys": st.Passkeys, "required": st.Required, "password": st.Password})
}

// POST /me/mfa/totp: starts (or restarts) an enrolment.
func (a *API) startTOTP(c *fiber.Ctx) error {
	e, err := a.svc.StartTOTP(c.UserContext(), caller(c))
	if err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{
		"message": "scan the QR code, then confirm with a code",
		"secret":  e.Secret,
		"uri":     e.URI,
		"qrCode":  "data:image/png;base64," + base64.StdEncoding.EncodeToString(e.QRCode),
	})
}

func codeBody(c *fiber.Ctx, withPassword bool) (string, string, error) {
	var body struct {
		Code     *string `json:"code"`
		Password *string `json:"password"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return "", "", err
	}
	if withPassword && body.Password == nil {
		return "", "", web.FieldError("password", "missing_field", "password is required")
	}
	if body.Code == nil {
		return "", "", web.FieldError("code", "missing_field", "code is required")
	}
	pw := ""
	if body.Password != nil {
		pw = *body.Password
	}
	return strings.Clone(*body.Code), pw, nil
}

// POST /me/mfa/totp/confirm {code}: 200 with the recovery codes, shown once.
func (a *API) confirmTOTP(c *fiber.Ctx) error {
	code, _, err := codeBody(c, false)
	if err != nil {
		return err
	}
	codes, err := a.svc.ConfirmTOTP(c.UserContext(), caller(c), code)
	if err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "second factor enabled", "recoveryCodes": codes})
}

// POST /me/mfa/totp/disable {password, code}
func (a *API) disableTOTP(c *fiber.Ctx) error {
	code, pw, err := codeBody(c, true)
	if err != nil {
		return err
	}
	if err := a.svc.DisableTOTP(c.UserContext(), caller(c), pw, code); err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "second factor disabled"})
}

// DELETE /users/:id/mfa: an administrator removes a user's second factor.
func (a *API) resetMFA(c *fiber.Ctx) error {
	if err := a.svc.ResetMFA(c.UserContext(), caller(c), strings.Clone(c.Params("id"))); err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "second factors reset: TOTP and passkeys removed"})
}
