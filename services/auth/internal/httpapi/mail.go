package httpapi

import (
	"net/http"

	"github.com/acme/platform/pkg/web"
	"github.com/gofiber/fiber/v2"
)

// POST /password/forgot {email}: 202 whether or not the address belongs to
// an account (the link is sent in the background).
func (a *API) forgotPassword(c *fiber.Ctx) error {
	var body struct {
		Email *string `json:"email"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.Email == nil {
		return web.FieldError("email", "missing_field", "email is required")
	}
	if err := a.svc.ForgotPassword(c.UserContext(), *body.Email, client(c)); err != nil {
		return apiError(c, err)
	}
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"message": "if the address belongs to an account, a link to reset its password is on its way"})
}

// POST /password/reset {token, password}: the new password; every session
// of the user ends.
func (a *API) resetPassword(c *fiber.Ctx) error {
	var body struct {
		Token    *string `json:"token"`
		Password *string `json:"password"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.Token == nil {
		return web.FieldError("token", "missing_field", "token is required")
	}
	if body.Password == nil {
		return web.FieldError("password", "missing_field", "password is required")
	}
	if _, err := a.svc.ResetPassword(c.UserContext(), *body.Token, *body.Password, client(c)); err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "password changed"})
}

// POST /email/verify {token}: the address the link was sent to is verified
// (and becomes the user's address if it was a change): 200. 202 when the
// link is the new address's side of a change that waits for the current
// address's confirmation too.
func (a *API) verifyEmail(c *fiber.Ctx) error {
	token, err := linkToken(c)
	if err != nil {
		return err
	}
	_, done, err := a.svc.VerifyEmail(c.UserContext(), token, client(c))
	if err != nil {
		return apiError(c, err)
	}
	if !done {
		return c.Status(http.StatusAccepted).JSON(fiber.Map{"message": "new address confirmed; the change takes effect once it is confirmed from the current address too"})
	}
	return c.JSON(fiber.Map{"message": "e-mail verified"})
}

// POST /email/change/confirm {token}: the link sent to the current address
// of an address change asked for without the password. 200 when the
// change took effect (the new address had confirmed), 202 while it waits
// for the new address.
func (a *API) confirmEmailChange(c *fiber.Ctx) error {
	token, err := linkToken(c)
	if err != nil {
		return err
	}
	_, done, err := a.svc.ConfirmEmailChange(c.UserContext(), token, client(c))
	if err != nil {
		return apiError(c, err)
	}
	if !done {
		return c.Status(http.StatusAccepted).JSON(fiber.Map{"message": "change confirmed from the current address; it takes effect once the new address is confirmed too"})
	}
	return c.JSON(fiber.Map{"message": "e-mail address changed"})
}

// linkToken is the token of a mailed link's body {token}.
func linkToken(c *fiber.Ctx) (string, error) {
	var body struct {
		Token *string `json:"token"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return "", err
	}
	if body.Token == nil {
		return "", web.FieldError("token", "missing_field", "token is required")
	}
	return *body.Token, nil
}

// POST /me/email/verification: a new link for the caller's address.
func (a *API) resendVerification(c *fiber.Ctx) error {
	if err := a.svc.ResendVerification(c.UserContext(), caller(c).UserID); err != nil {
		return apiError(c, err)
	}
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"message": "verification link sent"})
}
