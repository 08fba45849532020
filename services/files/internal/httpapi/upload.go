package httpapi

import (
	"context"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/gofiber/fiber/v2"
)

// maxParts bounds the parts of one upload form.
const maxParts = 8

func (h *handler) uploadFile(c *fiber.Ctx) error {
	f, err := h.upload(c, h.o.MaxUpload, h.svc.StoreFile)
	h.o.Meter.Upload(KindFile, uploadResult(err))
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(fiber.Map{"msg": "file uploaded", "file": h.toJSON(f)})
}

func (h *handler) uploadImage(c *fiber.Ctx) error {
	f, err := h.upload(c, h.o.ImageMaxBytes, h.storeImage(c))
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
	boundary, err := formBoundary(c)
	if err != nil {
		return nil, err
	}
	form := &uploadForm{h: h, c: c, store: store, scope: h.uploadScope(maxFile),
		owner:   strings.Clone(web.Identity(c).UserID()),
		maxBody: maxFile + int64(h.o.MaxMeta) + multipartOverhead,
	}
	if n := c.Request().Header.ContentLength(); n > 0 && int64(n) > form.maxBody {
		return nil, fail(files.ErrTooLarge, form.scope)
	}
	stream := c.Context().RequestBodyStream()
	if stream == nil {
		return nil, errMissingFile
	}
	declared := int64(c.Request().Header.ContentLength()) // -1: chunked
	received := &countingReader{r: stream}
	body := &countingLimit{r: &meteredReader{
		r:   &progressReader{r: received, conn: c.Context().Conn(), idle: h.o.ReadIdle},
		add: h.o.Meter.Uploaded,
	}, n: form.maxBody}

	defer func() { form.pending.Discard() }() // no-op once committed
	if err := form.read(multipart.NewReader(body, boundary)); err != nil {
		return nil, err
	}
	if form.pending == nil {
		return nil, errMissingFile
	}
	if err := wholeBody(body, received, declared, c.Context().Conn()); err != nil {
		return nil, formErr(err, form.scope)
	}
	dctx, cancel := dbContext(c)
	defer cancel()
	f, err := form.pending.Commit(dctx, form.owner, form.name, form.meta)
	if err != nil {
		return nil, fail(err, form.scope)
	}
	return f, nil
}

// Request-shape errors of an upload.
var (
	errMissingFile   = apiErr(http.StatusBadRequest, "missing_file", "the form has no file field", "field", "file")
	errTooManyParts  = apiErr(http.StatusBadRequest, "too_many_parts", "the form has too many parts")
	errDuplicateFile = apiErr(http.StatusBadRequest, "duplicate_file", "the form has more than one file field", "field", "file")
	errDuplicateMeta = apiErr(http.StatusBadRequest, "duplicate_meta", "the form has more than one meta field", "field", "meta")
	errInvalidMeta   = apiErr(http.StatusBadRequest, "invalid_meta", "meta must be UTF-8 text", "field", "meta")
)

// formBoundary checks an upload's content type and encoding and returns
// the form's boundary.
func formBoundary(c *fiber.Ctx) (string, error) {
	if enc := c.Get(fiber.HeaderContentEncoding); enc != "" && !strings.EqualFold(enc, "identity") {
		return "", apiErr(http.StatusUnsupportedMediaType, "unsupported_encoding", "request bodies must not be content-encoded")
	}
	ct := strings.Clone(c.Get(fiber.HeaderContentType))
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return "", apiErr(http.StatusUnsupportedMediaType, "unsupported_media_type", "content type must be multipart/form-data with a boundary")
	}
	return params["boundary"], nil
}

// uploadForm is one upload's form as it is read: what it was given and
// what its parts brought.
type uploadForm struct {
	h       *handler
	c       *fiber.Ctx
	store   storeFunc
	scope   errScope
	owner   string
	maxBody int64 // the most of the body read before it is refused

	pending *files.Pending // the file part, stored
	name    string
	meta    *string
}

// read reads the form's parts to its closing delimiter.
func (u *uploadForm) read(mr *multipart.Reader) error {
	for parts := 0; ; parts++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return formErr(err, u.scope)
		}
		if parts == maxParts {
			return errTooManyParts
		}
		switch p.FormName() {
		case "file":
			err = u.filePart(p)
		case "meta":
			err = u.metaPart(p)
		default:
			if _, err = io.Copy(io.Discard, p); err != nil {
				err = formErr(err, u.scope)
			}
		}
		if err != nil {
			return err
		}
	}
}

// filePart stores the file part as it arrives.
func (u *uploadForm) filePart(p *multipart.Part) error {
	if u.pending != nil {
		return errDuplicateFile
	}
	u.name = partFileName(p)
	var err error
	u.pending, err = u.store(u.c.UserContext(), u.owner, p)
	if err != nil {
		if errors.Is(err, files.ErrQuotaExceeded) || errors.Is(err, files.ErrTooLarge) {
			u.c.Locals(drainAllKey, u.maxBody)
		}
		return fail(err, u.scope)
	}
	return nil
}

// metaPart reads the meta part, UTF-8 text up to its limit.
func (u *uploadForm) metaPart(p *multipart.Part) error {
	if u.meta != nil {
		return errDuplicateMeta
	}
	limit := u.h.o.MaxMeta
	b, err := io.ReadAll(io.LimitReader(p, int64(limit)+1))
	if err != nil {
		return formErr(err, u.scope)
	}
	if len(b) > limit {
		return apiErr(http.StatusBadRequest, "meta_too_long", "meta is longer than the limit", "field", "meta", "limit", limit)
	}
	if !utf8.Valid(b) {
		return errInvalidMeta
	}
	s := string(b)
	u.meta = &s
	return nil
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

// formErr answers an error met while reading the form: the body passed
// its limit, or it is malformed or was cut off.
func formErr(err error, s errScope) error {
	if errors.Is(err, files.ErrTooLarge) {
		return fail(err, s)
	}
	return malformedForm(err)
}
