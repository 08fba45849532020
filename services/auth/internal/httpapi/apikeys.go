package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/gofiber/fiber/v2"
)

// apiKeyJSON is a key as listed: never its secret or hash.
type apiKeyJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	Hint       string     `json:"hint"`
	UserID     string     `json:"userId"`
	CreatedBy  string     `json:"createdBy"`
	CreatedAt  time.Time  `json:"createdAt"`
	ExpiresAt  *time.Time `json:"expiresAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
}

func toAPIKeyJSON(k account.APIKey) apiKeyJSON {
	return apiKeyJSON{ID: k.ID, Name: k.Name, Scopes: k.Scopes, Hint: k.Hint, UserID: k.UserID, CreatedBy: k.CreatedBy,
		CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, LastUsedAt: k.LastUsedAt}
}

// owner is the user whose keys a route manages: the caller on /me/api-keys,
// the :id user on /users/:id/api-keys (administrators only).
func owner(c *fiber.Ctx) string {
	if id := c.Params("id"); id != "" {
		return strings.Clone(id)
	}
	return caller(c).UserID
}

// POST /me/api-keys, /users/:id/api-keys {name, scopes, expiresAt?}
func (a *API) createAPIKey(c *fiber.Ctx) error {
	var body struct {
		Name      *string   `json:"name"`
		Scopes    *[]string `json:"scopes"`
		ExpiresAt *string   `json:"expiresAt"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.Name == nil {
		return web.FieldError("name", "missing_field", "name is required")
	}
	if body.Scopes == nil {
		return web.FieldError("scopes", "missing_field", "scopes is required")
	}
	in := account.NewAPIKeyInput{Name: *body.Name, Scopes: *body.Scopes}
	if body.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339, *body.ExpiresAt)
		if err != nil {
			return web.FieldError("expiresAt", "invalid_value", "expiresAt must be an RFC 3339 date-time such as 2030-01-31T00:00:00Z")
		}
		in.ExpiresAt = &t
	}
	k, secret, err := a.svc.CreateAPIKey(c.UserContext(), caller(c), owner(c), in)
	if err != nil {
		return apiError(c, err)
	}
	return c.Status(http.StatusCreated).JSON(fiber.Map{"message": "api key created", "apiKey": toAPIKeyJSON(k), "secret": secret})
}

// GET /me/api-keys, /users/:id/api-keys
func (a *API) listAPIKeys(c *fiber.Ctx) error {
	keys, err := a.svc.APIKeys(c.UserContext(), owner(c))
	if err != nil {
		if c.Params("id") == "" {
			return apiError(c, mapGone(err))
		}
		return apiError(c, err)
	}
	out := make([]apiKeyJSON, len(keys))
	for i, k := range keys {
		out[i] = toAPIKeyJSON(k)
	}
	return c.JSON(fiber.Map{"apiKeys": out})
}

func mapGone(err error) error {
	if errors.Is(err, account.ErrUserNotFound) {
		return account.ErrUserGone
	}
	return err
}

// DELETE /me/api-keys/:key, /users/:id/api-keys/:key
func (a *API) revokeAPIKey(c *fiber.Ctx) error {
	if err := a.svc.RevokeAPIKey(c.UserContext(), caller(c), owner(c), strings.Clone(c.Params("key"))); err != nil {
		return apiError(c, err)
	}
	return c.JSON(fiber.Map{"message": "api key revoked"})
}

// GET /ms/apikey {apiKey, clientIp?}, for gateways (X-Service-Credential):
// the key's owner and scopes.
func (a *API) serviceAPIKey(c *fiber.Ctx) error {
	if !a.validCredential(c.Get(ServiceCredentialHeader)) {
		return errServiceCredential
	}
	var body struct {
		APIKey   *string `json:"apiKey"`
		ClientIP string  `json:"clientIp"`
	}
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	if body.APIKey == nil {
		return apiError(c, account.ErrInvalidAPIKey)
	}
	u, k, err := a.svc.ResolveAPIKey(c.UserContext(), *body.APIKey, account.Client{IP: strings.Clone(body.ClientIP), UserAgent: strings.Clone(c.Get(fiber.HeaderUserAgent))})
	if err != nil {
		return apiError(c, err)
	}
	uj := toUserJSON(u)
	uj.RoleName = a.svc.EffectiveRole(u, false) // as for sessions (AUTH_MFA_REQUIRE_ADMIN)
	return c.JSON(fiber.Map{
		"message": "api key retrieved",
		"user":    uj,
		"apiKey":  toAPIKeyJSON(k),
	})
}
