package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/gofiber/fiber/v2"
)

type passkeyJSON struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	CreatedAt    time.Time  `json:"createdAt"`
	LastUsedAt   *time.Time `json:"lastUsedAt"`
	CloneWarning bool       `json:"cloneWarning"`
	BackedUp     bool       `json:"backedUp"`
	Transports   []string   `json:"transports"`
}

func toPasskeyJSON(p account.Passkey) passkeyJSON {
	j := passkeyJSON{ID: p.ID, Name: p.Name, CreatedAt: p.CreatedAt, CloneWarning: p.CloneWarning,
		BackedUp: p.Credential.Flags.BackupState, Transports: []string{}}
	if !p.LastUsedAt.IsZero() {
		j.LastUsedAt = &p.LastUsedAt
	}
	for _, t := range p.Credential.Transport {
		j.Transports = append(j.Transports, string(t))
	}
	return j
}

func ceremonyJSON(pc account.PasskeyCeremony, message string) fiber.Map {
	return fiber.Map{"message": message, "ceremony": pc.ID, "expiresAt": pc.ExpiresAt, "publicKey": pc.Options}
}

// ceremonyBody decodes {ceremony, credential, name?}: credential is the
// PublicKeyCredential as JSON, passed on unparsed to the WebAuthn library.
func ceremonyBody(c *fiber.Ctx, withName bool) (string, string, []byte, error) {
	var body struct {
		Ceremony   *string         `json:"ceremony"`
		Credential json.RawMessage `json:"credential"`
		Name       *string         `json:"name"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return "", "", nil, err
	}
	if body.Ceremony == nil {
		return "", "", nil, web.FieldError("ceremony", "missing_field", "ceremony is required")
	}
	if len(body.Credential) == 0 || string(body.Credential) == "null" {
		return "", "", nil, web.FieldError("credential", "missing_field", "credential (the PublicKeyCredential as JSON) is required")
	}
	if body.Credential[0] != '{' {
		return "", "", nil, web.FieldError("credential", "invalid_type", "credential must be an object")
	}
	if !withName && body.Name != nil {
		return "", "", nil, web.FieldError("name", "unknown_field", "name is not accepted here")
	}
	name := ""
	if body.Name != nil {
		name = strings.Clone(*body.Name)
	}
	return strings.Clone(*body.Ceremony), name, append([]byte(nil), body.Credential...), nil
}

// POST /signin/passkey/begin: options for navigator.credentials.get and
// the ceremony id to finish with.
func (a *API) beginPasskeySignIn(c *fiber.Ctx) error {
	if err := noBody(c); err != nil {
		return err
	}
	pc, err := a.svc.BeginPasskeySignIn(c.UserContext(), client(c))
	if err != nil {
		return apiError(c, err)
	}
	return c.JSON(ceremonyJSON(pc, "pass the options to navigator.credentials.get, then finish with the ceremony"))
}

// POST /signin/passkey/finish {ceremony, credential}: 200 and the session
// cookie, as POST /signin.
func (a *API) finishPasskeySignIn(c *fiber.Ctx) error {
	ceremony, _, resp, err := ceremonyBody(c, false)
	if err != nil {
		return err
	}
	cl := client(c)
	secret, sess, u, p, err := a.svc.FinishPasskeySignIn(c.UserContext(), ceremony, resp, cl)
	var te *account.ThrottledError
	var pe *account.PasskeyError
	ev := account.Event{Target: u.ID, TargetEmail: u.Email, Client: cl}
	switch {
	case err == nil:
		a.opts.Meter.SignIn(SignInOK)
		ev.Type, ev.Actor = account.EventSignIn, u.ID
		ev.Detail = map[string]any{"session": sess.PublicID, "factor": "passkey", "passkey": p.ID}
	case errors.As(err, &pe):
		a.opts.Meter.SignIn(SignInFailed)
		ev.Type = account.EventPasskeyFailed
		ev.Detail = map[string]any{"reason": pe.Code}
		if p.ID != "" {
			ev.Detail["passkey"] = p.ID
		}
	case errors.As(err, &te):
		a.opts.Meter.SignIn(SignInThrottled)
		ev.Type = account.EventSignInThrottled
	case errors.Is(err, account.ErrEmailUnverified):
		ev.Type = account.EventSignInUnverified
	}
	return a.signInAnswer(c, ev, err, secret, sess)
}

// GET /me/passkeys
func (a *API) listPasskeys(c *fiber.Ctx) error {
	list, err := a.svc.Passkeys(c.UserContext(), caller(c).UserID)
	if err != nil {
		return apiError(c, err)
	}
	out := make([]passkeyJSON, 0, len(list))
	for _, p := range list {
		out = append(out, toPasskeyJSON(p))
	}
	return c.JSON(fiber.Map{"passkeys": out})
}

// POST /me/passkeys/begin: options for navigator.credentials.create.
func (a *API) beginPasskeyRegistration(c *fiber.Ctx) error {
	if err := noBody(c); err != nil {
		return err
	}
	pc, err := a.svc.BeginPasskeyRegistration(c.UserContext(), caller(c))
	if err != nil {
		return apiError(c, err)
	}
	return c.JSON(ceremonyJSON(pc, "pass the options to navigator.credentials.create, then finish with the ceremony"))
}

// POST /me/passkeys/finish {ceremony, credential, name?}: 201 and the
// passkey.
func (a *API) finishPasskeyRegistration(c *fiber.Ctx) error {
	ceremony, name, resp, err := ceremonyBody(c, true)
	if err != nil {
		return err
	}
	p, err := a.svc.FinishPasskeyRegistration(c.UserContext(), caller(c), ceremony, name, resp)
	if err != nil {
		return apiError(c, err)
	}
	return c.Status(http.StatusCreated).JSON(fiber.Map{"message": "passkey registered", "passkey": toPasskeyJSON(p)})
}

// DELETE /me/passkeys/:id
func (a *API) removePasskey(c *fiber.Ctx) error {
	if err := a.svc.RemovePasskey(c.UserContext(), caller(c), strings.Clone(c.Params("id"))); err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "passkey removed"})
}

// noBody admits an empty body, or an empty JSON object.
func noBody(c *fiber.Ctx) error {
	if len(c.Body()) == 0 {
		return nil
	}
	var none struct{}
	return web.DecodeJSON(c, &none)
}
