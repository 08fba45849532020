package httpapi

import (
	"context"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/gofiber/fiber/v2"
)

// maxParts bounds the parts of one upload form.
const maxParts = 8

// busyRetryAfter is the Retry-After, in seconds, of a 503 busy: image work
// is short, a few seconds frees budget again.
const busyRetryAfter = 5

func (h *handler) uploadFile(c *fiber.Ctx) error {
	f, err := h.upload(c, h.o.MaxUpload, h.svc.StoreFile)
	h.o.Meter.Upload(KindFile, uploadResult(err))
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(fiber.Map{"msg": "file uploaded", "file": h.toJSON(f)})
}

func (h *handler) uploadImage(c *fiber.Ctx) error {
	f, err := h.upload(c, h.o.ImageMaxBytes, h.svc.StoreImage)
	h.o.Meter.Upload(KindImage, uploadResult(err))
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(fiber.Map{"msg": "image uploaded", "image": fiber.Map{
		"id":     f.ID,
		"url":    h.imageURL(f.ID),
		"type":   f.Type,
		"width":  f.Width,
		"height": f.Height,
		"size":   f.Size,
	}})
}

// uploadResult classifies an upload's outcome for the metrics: errors that
// are not a *web.Error below 500 are the service's (error handler: 500/503).
func uploadResult(err error) string {
	var we *web.Error
	switch {
	case err == nil:
		return UploadOK
	case errors.As(err, &we) && we.Status < 500:
		return UploadRejected
	}
	return UploadFailed
}

type storeFunc func(ctx context.Context, owner string, src io.Reader) (*files.Pending, error)

// upload reads a multipart/form-data body part by part straight from the
// connection: the `file` part goes to store as it arrives (nothing is
// buffered but the object store's part buffer), `meta` is read up to its
// limit, other fields are dropped. The record is written only after the
// whole form was read and found valid; until then any failure removes the
// stored object.
func (h *handler) upload(c *fiber.Ctx, maxFile int64, store storeFunc) (*files.File, error) {
	owner := strings.Clone(web.Identity(c).UserID())
	if enc := c.Get(fiber.HeaderContentEncoding); enc != "" && !strings.EqualFold(enc, "identity") {
		return nil, apiErr(http.StatusUnsupportedMediaType, "unsupported_encoding", "request bodies must not be content-encoded")
	}
	ct := strings.Clone(c.Get(fiber.HeaderContentType))
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, apiErr(http.StatusUnsupportedMediaType, "unsupported_media_type", "content type must be multipart/form-data with a boundary")
	}
	maxBody := maxFile + int64(h.o.MaxMeta) + multipartOverhead
	if n := c.Request().Header.ContentLength(); n > 0 && int64(n) > maxBody {
		return nil, tooLarge(maxFile)
	}
	stream := c.Context().RequestBodyStream()
	if stream == nil {
		return nil, apiErr(http.StatusBadRequest, "missing_file", "the form has no file field", "field", "file")
	}
	declared := int64(c.Request().Header.ContentLength()) // -1: chunked
	received := &countingReader{r: stream}
	body := &countingLimit{r: &meteredReader{
		r:   &progressReader{r: received, conn: c.Context().Conn(), idle: h.o.ReadIdle},
		add: h.o.Meter.Uploaded,
	}, n: maxBody}
	mr := multipart.NewReader(body, params["boundary"])
	ctx := c.UserContext()

	var (
		pending *files.Pending
		name    string
		meta    *string
	)
	defer func() { pending.Discard() }() // no-op once committed
	for parts := 0; ; parts++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, formErr(err, maxFile)
		}
		if parts == maxParts {
			return nil, apiErr(http.StatusBadRequest, "too_many_parts", "the form has too many parts")
		}
		switch p.FormName() {
		case "file":
			if pending != nil {
				return nil, apiErr(http.StatusBadRequest, "duplicate_file", "the form has more than one file field", "field", "file")
			}
			name = partFileName(p)
			pending, err = store(ctx, owner, p)
			if err != nil {
				if errors.Is(err, files.ErrQuotaExceeded) || errors.Is(err, files.ErrTooLarge) {
					c.Locals(drainAllKey, maxBody)
				}
				return nil, h.storeErr(c, err, maxFile)
			}
		case "meta":
			if meta != nil {
				return nil, apiErr(http.StatusBadRequest, "duplicate_meta", "the form has more than one meta field", "field", "meta")
			}
			b, err := io.ReadAll(io.LimitReader(p, int64(h.o.MaxMeta)+1))
			if err != nil {
				return nil, formErr(err, maxFile)
			}
			if len(b) > h.o.MaxMeta {
				return nil, apiErr(http.StatusBadRequest, "meta_too_long", "meta is longer than the limit", "field", "meta", "limit", h.o.MaxMeta)
			}
			if !utf8.Valid(b) {
				return nil, apiErr(http.StatusBadRequest, "invalid_meta", "meta must be UTF-8 text", "field", "meta")
			}
			s := string(b)
			meta = &s
		default:
			if _, err := io.Copy(io.Discard, p); err != nil {
				return nil, formErr(err, maxFile)
			}
		}
	}
	if pending == nil {
		return nil, apiErr(http.StatusBadRequest, "missing_file", "the form has no file field", "field", "file")
	}
	if err := wholeBody(body, received, declared, c.Context().Conn()); err != nil {
		return nil, formErr(err, maxFile)
	}
	dctx, cancel := dbContext(c)
	defer cancel()
	f, err := pending.Commit(dctx, owner, name, meta)
	if err != nil {
		return nil, h.storeErr(c, err, maxFile)
	}
	return f, nil
}

// maxEpilogue bounds what may follow a form's closing delimiter.
const maxEpilogue = 64 << 10

// errIncompleteBody: the request body ended before its declared length or
// its last chunk.
var errIncompleteBody = errors.New("the request body ended before its declared length")

// wholeBody reads what follows the form's closing delimiter (the epilogue,
// at most maxEpilogue bytes) to the end of the request body and fails
// unless that end is the real one: the Content-Length reached, or the end
// of a chunked body on a connection the client still holds open. A form can be complete while its body is not
// (a client that stalls or is cut off after the closing delimiter); such
// an upload did not arrive whole and is not stored.
func wholeBody(body io.Reader, received *countingReader, declared int64, conn net.Conn) error {
	n, err := io.Copy(io.Discard, io.LimitReader(body, maxEpilogue+1))
	if err != nil {
		return err
	}
	if n > maxEpilogue {
		return errors.New("too much data after the form's closing delimiter")
	}
	if declared >= 0 && received.n != declared {
		return errIncompleteBody
	}
	// fasthttp ends a chunked body with a plain EOF when the connection
	// closes between two chunks, as it does after the last chunk: a client
	// gone right after the end is taken as cut off (it reads no answer).
	if declared < 0 && conn != nil && peerClosed(conn) {
		return errIncompleteBody
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// partFileName is the filename parameter of the part (RFC 7578, with RFC
// 2231/5987 filename* preferred when present), uncleaned: the domain cleans.
func partFileName(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// formErr maps an error met while reading the form.
func formErr(err error, maxFile int64) error {
	if errors.Is(err, files.ErrTooLarge) {
		return tooLarge(maxFile)
	}
	return &web.Error{Status: http.StatusBadRequest, Code: "invalid_multipart", Cause: err,
		Body: fiber.Map{"err": "the multipart body is malformed or incomplete"}}
}

func tooLarge(max int64) error {
	return apiErr(http.StatusRequestEntityTooLarge, "file_too_large", "the upload exceeds the maximum size", "limit", max)
}

// storeErr maps domain errors of uploads to HTTP.
func (h *handler) storeErr(c *fiber.Ctx, err error, maxFile int64) error {
	var se *files.SourceError
	switch {
	case errors.Is(err, files.ErrTooLarge):
		return tooLarge(maxFile)
	case errors.Is(err, files.ErrQuotaExceeded):
		return apiErr(http.StatusRequestEntityTooLarge, "quota_exceeded", "the upload would exceed your storage quota")
	case errors.As(err, &se):
		return formErr(se.Err, maxFile)
	case errors.Is(err, files.ErrEmpty):
		return apiErr(http.StatusBadRequest, "empty_file", "the file is empty", "field", "file")
	case errors.Is(err, files.ErrNotImage):
		return apiErr(http.StatusUnsupportedMediaType, "unsupported_image", "the file is not a JPEG, PNG, GIF or WebP image")
	case errors.Is(err, files.ErrImageTooLarge):
		return apiErr(http.StatusUnprocessableEntity, "image_too_many_pixels", "the image dimensions exceed the limit", "limit", h.svc.MaxPixels())
	case errors.Is(err, files.ErrImageTooMuchMemory):
		return apiErr(http.StatusUnprocessableEntity, "image_too_much_memory",
			"decoding the image would need more memory than one image may use (dimensions times bytes per pixel)",
			"limit", h.svc.ImageMaxMemory())
	case errors.Is(err, files.ErrBadImage):
		return apiErr(http.StatusUnprocessableEntity, "invalid_image", "the image data is corrupt")
	case errors.Is(err, files.ErrBusy):
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(busyRetryAfter))
		return &web.Error{Status: http.StatusServiceUnavailable, Code: "busy", Cause: err,
			Body: fiber.Map{"err": "too many images are being processed, try again shortly"}}
	}
	return unavailable(err)
}

// unavailable turns storage outages into 503 and leaves others to the
// error handler (500, logged).
func unavailable(err error) error {
	if errors.Is(err, files.ErrUnavailable) || web.IsUnavailable(err) {
		return &web.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Cause: err,
			Body: fiber.Map{"err": "storage is unavailable, try again shortly"}}
	}
	return err
}

// apiErr is an error with the file endpoints' body: {err, code} plus the
// given key/value pairs.
func apiErr(status int, code, msg string, kv ...any) *web.Error {
	body := fiber.Map{"err": msg}
	for i := 0; i+1 < len(kv); i += 2 {
		body[kv[i].(string)] = kv[i+1]
	}
	return &web.Error{Status: status, Code: code, Message: msg, Body: body}
}
