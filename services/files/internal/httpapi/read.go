package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/handoff"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/gofiber/fiber/v2"
)

// fileJSON is the File record of the spec (id, type, path, meta, createdAt)
// plus what we add: name, size, sha256, kind, and for images width, height
// and url.
type fileJSON struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Path      string    `json:"path"`
	Meta      *string   `json:"meta"`
	CreatedAt time.Time `json:"createdAt"`
	Name      string    `json:"name"`
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256"`
	Kind      string    `json:"kind"`
	Width     int       `json:"width,omitempty"`
	Height    int       `json:"height,omitempty"`
	URL       string    `json:"url,omitempty"`
}

func (h *handler) toJSON(f *files.File) fileJSON {
	j := fileJSON{
		ID: f.ID, Type: f.Type, Path: f.Key, Meta: f.Meta, CreatedAt: f.CreatedAt.UTC(),
		Name: f.Name, Size: f.Size, SHA256: f.SHA256, Kind: string(f.Kind),
	}
	if f.Kind == files.KindImage {
		j.Width, j.Height, j.URL = f.Width, f.Height, h.imageURL(f.ID)
	}
	return j
}

func (h *handler) imageURL(id string) string    { return h.base + "/images/" + id }
func (h *handler) downloadURL(id string) string { return h.base + "/download/file/" + id }

func reader(c *fiber.Ctx) files.Reader {
	cl := web.Identity(c)
	return files.Reader{UserID: cl.UserID(), Admin: cl.IsAdmin()}
}

// retrieve: GET /retrieve/file/:id → 200 {file, downloadUrl}. For an image
// downloadUrl is its public URL (the download route refuses images).
func (h *handler) retrieve(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	ctx, cancel := dbContext(c)
	defer cancel()
	f, err := h.svc.Get(ctx, id, reader(c))
	if err != nil {
		return fail(err, errScope{fileID: id})
	}
	url := h.downloadURL(f.ID)
	if f.Kind == files.KindImage {
		url = h.imageURL(f.ID)
	}
	return c.JSON(fiber.Map{"file": h.toJSON(f), "downloadUrl": url})
}

// download: GET /download/file/:id → the bytes as an attachment.
func (h *handler) download(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	ctx, cancel := dbContext(c)
	f, err := h.svc.Download(ctx, id, reader(c))
	cancel()
	if err != nil {
		return fail(err, errScope{fileID: id})
	}
	c.Set(fiber.HeaderContentDisposition, contentDisposition(f.Name))
	c.Set(fiber.HeaderCacheControl, "private, no-cache")
	return h.serve(c, f, id)
}

// image: GET /images/:id → the image, public and immutable.
func (h *handler) image(c *fiber.Ctx) error {
	id := strings.Clone(c.Params("id"))
	if c.Request().URI().QueryArgs().Len() > 0 {
		return h.variant(c, id)
	}
	ctx, cancel := dbContext(c)
	f, err := h.svc.Image(ctx, id)
	cancel()
	if err != nil {
		return fail(err, errScope{fileID: id})
	}
	c.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
	c.Set(fiber.HeaderContentSecurityPolicy, "default-src 'none'")
	return h.serve(c, f, id)
}

// serve streams a stored object with validators, conditional requests and
// single byte ranges. A gzip-stored file goes out as stored (Content-Encoding:
// gzip) to clients that accept gzip, and is inflated on the fly for the
// others; ranges apply to what is sent, so they are refused (whole body, 200)
// only when inflating.
func (h *handler) serve(c *fiber.Ctx, f *files.File, id string) error {
	gz := f.Encoding == files.EncodingGzip
	sendGzip := gz && acceptsGzip(c.Get(fiber.HeaderAcceptEncoding))
	etag, length := f.ETag(), f.Size
	if sendGzip {
		etag, length = f.GzipETag(), f.Stored
	}
	rangeable := !gz || sendGzip

	c.Set(fiber.HeaderContentType, f.Type)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderETag, etag)
	c.Set(fiber.HeaderLastModified, f.CreatedAt.UTC().Format(http.TimeFormat))
	if gz {
		c.Set(fiber.HeaderVary, fiber.HeaderAcceptEncoding)
	}
	if sendGzip {
		c.Set(fiber.HeaderContentEncoding, "gzip")
	}
	if rangeable {
		c.Set(fiber.HeaderAcceptRanges, "bytes")
	} else {
		c.Set(fiber.HeaderAcceptRanges, "none")
	}

	if notModified(c, etag, f.CreatedAt) {
		c.Response().Header.Del(fiber.HeaderContentType)
		return c.SendStatus(http.StatusNotModified)
	}

	start, end, status := int64(0), int64(-1), http.StatusOK
	if rh := c.Get(fiber.HeaderRange); rh != "" && rangeable && ifRange(c.Get(fiber.HeaderIfRange), etag, f.CreatedAt) {
		s, e, ok, satisfiable := parseRange(rh, length)
		if ok && !satisfiable {
			c.Set(fiber.HeaderContentRange, "bytes */"+strconv.FormatInt(length, 10))
			return apiErr(http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable", "the range is outside the file", "sentId", id)
		}
		if ok {
			start, end, status = s, e, http.StatusPartialContent
			c.Set(fiber.HeaderContentRange, fmt.Sprintf("bytes %d-%d/%d", s, e, length))
		}
	}
	n := length
	if end >= 0 {
		n = end - start + 1
	}
	c.Status(status)
	if c.Method() == fiber.MethodHead {
		c.Response().Header.SetContentLength(int(n))
		c.Response().SkipBody = true
		return nil
	}

	if h.handoff(c, f, start, end, n, gz && !sendGzip) {
		return nil
	}
	obj, err := h.svc.Open(c.UserContext(), f, start, end)
	if err != nil {
		if errors.Is(err, files.ErrNotFound) {
			h.o.Log.ErrorContext(c.UserContext(), "record without object", "id", f.ID, "key", f.Key)
		}
		return fail(err, errScope{fileID: id})
	}
	var body io.ReadCloser = obj.Body
	if gz && !sendGzip {
		zr, err := handoff.Inflate(obj.Body, n)
		if err != nil {
			return fmt.Errorf("opening gzip object %s: %w", f.Key, err)
		}
		body = zr
	} else if obj.Size != n {
		obj.Body.Close()
		return fmt.Errorf("object %s: size %d, record says %d", f.Key, obj.Size, n)
	}
	// fasthttp reads (and meters) body as it sends it, and closes it.
	c.Context().SetBodyStream(&meteredBody{meteredReader{body, h.o.Meter.Downloaded}, body}, int(n))
	return nil
}

// handoff answers a GET that offers it (the gateway's Offer header) with a
// presigned GET of the stored bytes start..end (n of them) and an empty
// body: the gateway fetches and sends them (package handoff). A file to be
// inflated (a gzip-stored one for a client that does not accept gzip) is
// handed off whole with its encoding when the gateway can inflate it: it
// fetches the f.Stored bytes and sends their n inflated ones. It does not
// hand off when handoff is off, when the gateway cannot inflate, or when
// presigning fails (logged; the bytes are then streamed here).
func (h *handler) handoff(c *fiber.Ctx, f *files.File, start, end, n int64, inflate bool) bool {
	offer := c.Get(handoff.Offer)
	if h.o.HandoffTTL <= 0 || c.Method() != fiber.MethodGet || offer == "" || inflate && !handoff.Decodes(offer, f.Encoding) {
		return false
	}
	url, nodes, err := h.svc.Presign(c.UserContext(), f, h.o.HandoffTTL)
	if err != nil {
		h.o.Log.WarnContext(c.UserContext(), "handoff: presign failed, streaming", "id", f.ID, "err", err)
		return false
	}
	a := handoff.Answer{URL: url, Start: start, End: end, Length: n, Nodes: nodes, File: f.ID}
	if inflate {
		a.Encoding, a.Stored = f.Encoding, f.Stored // start 0, end -1: never a range
	}
	a.Set(func(k, v string) { c.Set(k, v) })
	h.o.Meter.Downloaded(int(n))
	c.Response().Header.SetContentLength(0)
	return true
}

// list: GET /files?page=&limit= → the caller's own records, newest first.
func (h *handler) list(c *fiber.Ctx) error {
	page, err := queryInt(c, "page", 1, 1, 1_000_000)
	if err != nil {
		return err
	}
	limit, err := queryInt(c, "limit", 20, 1, 100)
	if err != nil {
		return err
	}
	ctx, cancel := dbContext(c)
	defer cancel()
	list, more, err := h.svc.List(ctx, strings.Clone(web.Identity(c).UserID()), page, limit)
	if err != nil {
		return fail(err, errScope{})
	}
	out := make([]fileJSON, len(list))
	for i, f := range list {
		out[i] = h.toJSON(f)
	}
	return c.JSON(fiber.Map{"files": out, "page": page, "limit": limit, "hasMore": more})
}

func queryInt(c *fiber.Ctx, key string, def, min, max int) (int, error) {
	v := c.Query(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		return 0, apiErr(http.StatusBadRequest, "invalid_"+key, fmt.Sprintf("%s must be an integer from %d to %d", key, min, max), "field", key)
	}
	return n, nil
}
