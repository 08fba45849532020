package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/gofiber/fiber/v2"
)

// maxJSONBody bounds the JSON bodies of the management routes.
const maxJSONBody = 4 << 10

// deleteFile: DELETE /files/:id → 204; 404 for unknown ids and other
// people's files alike.
func (h *handler) deleteFile(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	ctx, cancel := dbContext(c)
	defer cancel()
	if err := h.svc.Delete(ctx, id, reader(c)); err != nil {
		return fail(err, errScope{fileID: id})
	}
	return c.SendStatus(http.StatusNoContent)
}

// linkJSON is a share link as listed; url is present only in the answer
// that created it (the token is not kept).
type linkJSON struct {
	ID           string    `json:"id"`
	FileID       string    `json:"fileId"`
	URL          string    `json:"url,omitempty"`
	CreatedAt    time.Time `json:"createdAt"`
	ExpiresAt    time.Time `json:"expiresAt"`
	MaxDownloads *int64    `json:"maxDownloads"`
	Downloads    int64     `json:"downloads"`
}

func toLinkJSON(l *files.Link) linkJSON {
	j := linkJSON{ID: l.ID, FileID: l.FileID, CreatedAt: l.CreatedAt.UTC(), ExpiresAt: l.ExpiresAt.UTC(), Downloads: l.Downloads}
	if l.MaxDownloads > 0 {
		n := l.MaxDownloads
		j.MaxDownloads = &n
	}
	return j
}

// linkRequest is the optional body of POST /files/:id/links.
type linkRequest struct {
	ExpiresAt    *time.Time `json:"expiresAt"`
	MaxDownloads *int64     `json:"maxDownloads"`
}

// createLink: POST /files/:id/links → 201 {id, url, expiresAt, ...}.
func (h *handler) createLink(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	var body linkRequest
	if err := decodeJSON(c, &body, true); err != nil {
		return err
	}
	var req files.LinkRequest
	if body.ExpiresAt != nil {
		req.ExpiresAt = *body.ExpiresAt
		if req.ExpiresAt.IsZero() {
			return apiErr(http.StatusBadRequest, "invalid_expires_at", "expiresAt must be a date-time in the future", "field", "expiresAt")
		}
	}
	if body.MaxDownloads != nil {
		if *body.MaxDownloads < 1 || *body.MaxDownloads > 1_000_000 {
			return apiErr(http.StatusBadRequest, "invalid_max_downloads", "maxDownloads must be an integer from 1 to 1000000", "field", "maxDownloads")
		}
		req.MaxDownloads = *body.MaxDownloads
	}
	ctx, cancel := dbContext(c)
	defer cancel()
	l, token, err := h.svc.CreateLink(ctx, id, reader(c), req)
	if err != nil {
		return fail(err, errScope{fileID: id})
	}
	j := toLinkJSON(l)
	j.URL = h.base + "/s/" + token
	return c.Status(http.StatusCreated).JSON(j)
}

// links: GET /files/:id/links → 200 {links}.
func (h *handler) links(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	ctx, cancel := dbContext(c)
	defer cancel()
	ls, err := h.svc.Links(ctx, id, reader(c))
	if err != nil {
		return fail(err, errScope{fileID: id})
	}
	out := make([]linkJSON, len(ls))
	for i, l := range ls {
		out[i] = toLinkJSON(l)
	}
	return c.JSON(fiber.Map{"links": out})
}

// revokeLink: DELETE /files/:id/links/:linkId → 204.
func (h *handler) revokeLink(c *fiber.Ctx) error {
	id, linkID := strings.Clone(c.Params("id")), strings.Clone(c.Params("linkId"))
	ctx, cancel := dbContext(c)
	defer cancel()
	if err := h.svc.RevokeLink(ctx, id, linkID, reader(c)); err != nil {
		return fail(err, errScope{fileID: id, linkID: linkID})
	}
	return c.SendStatus(http.StatusNoContent)
}

// shared: GET /s/:token → the file as an attachment, for anyone holding
// the token. Every GET of a link with a download limit takes one download
// (HEAD does not).
func (h *handler) shared(c *fiber.Ctx) error {
	token := strings.Clone(c.Params("token"))
	ctx, cancel := dbContext(c)
	defer cancel()
	f, l, err := h.svc.Shared(ctx, token)
	if err == nil && c.Method() == fiber.MethodGet {
		err = h.svc.CountDownload(ctx, l)
	}
	if err != nil {
		return fail(err, errScope{}) // a link reached by its token
	}
	c.Set(fiber.HeaderContentDisposition, contentDisposition(f.Name))
	c.Set(fiber.HeaderCacheControl, "private, no-store")
	c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
	c.Set(fiber.HeaderContentSecurityPolicy, "default-src 'none'")
	return h.serve(c, f, f.ID)
}

// usageJSON is GET /me/usage and the administrators' /usage/:userId.
type usageJSON struct {
	UserID string `json:"userId,omitempty"`
	Used   int64  `json:"used"`
	Quota  *int64 `json:"quota"` // null: no quota
	Files  int64  `json:"files"`
}

func toUsageJSON(owner string, u files.Usage) usageJSON {
	j := usageJSON{UserID: owner, Used: u.Used, Files: u.Files}
	if u.Limited {
		q := u.Quota
		j.Quota = &q
	}
	return j
}

// myUsage: GET /me/usage → {used, quota, files}.
func (h *handler) myUsage(c *fiber.Ctx) error {
	owner := strings.Clone(web.Identity(c).UserID())
	ctx, cancel := dbContext(c)
	defer cancel()
	u, err := h.svc.Usage(ctx, owner)
	if err != nil {
		return fail(err, errScope{})
	}
	j := toUsageJSON("", u)
	return c.JSON(j)
}

// userID reads the :userId of the administrators' routes: a user id as
// auth makes them (24 lower-case hex characters).
func userID(c *fiber.Ctx) (string, error) {
	id := strings.Clone(c.Params("userId"))
	ok := len(id) == 24
	for i := 0; ok && i < len(id); i++ {
		ch := id[i]
		ok = ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'f'
	}
	if !ok {
		return "", apiErr(http.StatusBadRequest, "invalid_user_id", "the user id must be 24 lower-case hex characters", "sentId", id)
	}
	return id, nil
}

// userUsage: GET /usage/:userId (administrators) → {userId, used, quota,
// files}; files reaching 0 after the user's deletion means their files
// are erased.
func (h *handler) userUsage(c *fiber.Ctx) error {
	id, err := userID(c)
	if err != nil {
		return err
	}
	ctx, cancel := dbContext(c)
	defer cancel()
	u, err := h.svc.Usage(ctx, id)
	if err != nil {
		return fail(err, errScope{})
	}
	return c.JSON(toUsageJSON(id, u))
}

// quotaRequest is the body of PUT /usage/:userId: a quota in bytes, or
// null for the default.
type quotaRequest struct {
	Quota json.RawMessage `json:"quota"` // absent, null or a number
}

// setQuota: PUT /usage/:userId (administrators) {quota} → the new usage.
func (h *handler) setQuota(c *fiber.Ctx) error {
	id, err := userID(c)
	if err != nil {
		return err
	}
	var body quotaRequest
	if err := decodeJSON(c, &body, false); err != nil {
		return err
	}
	var quota *int64
	switch q := strings.TrimSpace(string(body.Quota)); {
	case q == "":
		return apiErr(http.StatusBadRequest, "missing_quota", "quota is required (bytes, or null for the default)", "field", "quota")
	case q == "null":
	default:
		var n int64
		if err := json.Unmarshal(body.Quota, &n); err != nil || n < 0 {
			return apiErr(http.StatusBadRequest, "invalid_quota", "quota must be a non-negative integer number of bytes, or null", "field", "quota")
		}
		quota = &n
	}
	ctx, cancel := dbContext(c)
	defer cancel()
	if err := h.svc.SetQuota(ctx, id, quota); err != nil {
		return fail(err, errScope{})
	}
	u, err := h.svc.Usage(ctx, id)
	if err != nil {
		return fail(err, errScope{})
	}
	return c.JSON(toUsageJSON(id, u))
}

// decodeJSON strictly decodes a small JSON body into dst (web's rules);
// an empty body is accepted when optional.
func decodeJSON(c *fiber.Ctx, dst any, optional bool) error {
	raw, err := jsonBody(c)
	switch {
	case err != nil:
		return err
	case raw == nil && optional:
		return nil
	case raw == nil:
		return apiErr(http.StatusBadRequest, "empty_body", "request body is empty")
	}
	if err := web.DecodeJSONBytes(raw, dst); err != nil {
		// In the file endpoints' shape: {err, code, field}.
		var we *web.Error
		if errors.As(err, &we) && we.Body == nil {
			if we.Field != "" {
				return apiErr(we.Status, we.Code, we.Message, "field", we.Field)
			}
			return apiErr(we.Status, we.Code, we.Message)
		}
		return err
	}
	return nil
}

// jsonBody reads a JSON request body of at most maxJSONBody bytes (the app
// streams request bodies, so it is read here, bounded); nil when empty.
func jsonBody(c *fiber.Ctx) ([]byte, error) {
	var raw []byte
	if s := c.Context().RequestBodyStream(); s != nil {
		b, err := io.ReadAll(io.LimitReader(s, maxJSONBody+1))
		if err != nil {
			return nil, apiErr(http.StatusBadRequest, "invalid_json", "the request body could not be read")
		}
		raw = b
	} else {
		raw = c.Request().Body()
	}
	if len(raw) > maxJSONBody {
		return nil, apiErr(http.StatusRequestEntityTooLarge, "body_too_large", "the request body is too large", "limit", maxJSONBody)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if enc := c.Get(fiber.HeaderContentEncoding); enc != "" && !strings.EqualFold(enc, "identity") {
		return nil, apiErr(http.StatusUnsupportedMediaType, "unsupported_encoding", "request bodies must not be content-encoded")
	}
	mt, _, err := mime.ParseMediaType(c.Get(fiber.HeaderContentType))
	if err != nil || mt != fiber.MIMEApplicationJSON {
		return nil, apiErr(http.StatusUnsupportedMediaType, "unsupported_media_type", "content type must be application/json")
	}
	return raw, nil
}
