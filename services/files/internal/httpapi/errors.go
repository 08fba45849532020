package httpapi

import (
	"errors"
	"net/http"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/gofiber/fiber/v2"
)

// errorMap is the one place the files package's errors become what a
// client sees: status, code, message and the body's other keys (the file
// endpoints' shape, {err, code, ...}). fail goes down it in order and the
// first row that matches answers: a SourceError may wrap ErrTooLarge (the
// body passed its limit while being stored), which answers 413. A test
// checks that every exported error of the files package has a row; the tus
// server answers with the same rows (ClientError).
var errorMap = []errorRow{
	is(files.ErrNotFound, http.StatusNotFound, "file_not_found", "no file with this id", sentFileID),
	is(files.ErrIsImage, http.StatusBadRequest, "image_not_downloadable", "the id refers to an image, which is served at its own URL", sentFileID),
	is(files.ErrLinkNotFound, http.StatusNotFound, "link_not_found", "no share link with this id", sentLink),
	is(files.ErrLinkExpired, http.StatusGone, "link_expired", "the share link has expired"),
	is(files.ErrLinkExhausted, http.StatusGone, "link_exhausted", "the share link reached its download limit"),
	is(files.ErrTooLarge, http.StatusRequestEntityTooLarge, "file_too_large", "the upload exceeds the maximum size",
		limit(func(s errScope) int64 { return s.maxFile })),
	is(files.ErrQuotaExceeded, http.StatusRequestEntityTooLarge, "quota_exceeded", "the upload would exceed your storage quota"),
	web.ErrorAs[files.SourceError](func(_ errScope, e *files.SourceError) *web.Error { return malformedForm(e) }),
	is(files.ErrEmpty, http.StatusBadRequest, "empty_file", "the file is empty", field("file")),
	is(files.ErrNotImage, http.StatusUnsupportedMediaType, "unsupported_image", "the file is not a JPEG, PNG, GIF or WebP image"),
	is(files.ErrImageTooLarge, http.StatusUnprocessableEntity, "image_too_many_pixels", "the image dimensions exceed the limit",
		limit(func(s errScope) int64 { return s.maxPixels })),
	is(files.ErrImageTooMuchMemory, http.StatusUnprocessableEntity, "image_too_much_memory",
		"decoding the image would need more memory than one image may use (dimensions times bytes per pixel)",
		limit(func(s errScope) int64 { return s.maxMemory })),
	is(files.ErrImageTooComplex, http.StatusUnprocessableEntity, "image_too_complex",
		"decoding the image would take more work than one image may (a JPEG whose scans walk its blocks more times than the limit)",
		limit(func(s errScope) int64 { return s.maxScans })),
	is(files.ErrImageTimeout, http.StatusUnprocessableEntity, "image_timeout", "processing the image took longer than one image may take"),
	is(files.ErrBadImage, http.StatusUnprocessableEntity, "invalid_image", "the image data is corrupt"),
	// Nobody reads it: the client hung up while its image was processed.
	is(files.ErrClientGone, statusClientClosed, "client_closed_request", "the client closed the connection before the answer"),
	web.ErrorAs[files.BadLinkError](badLink),
	is(files.ErrBadQuota, http.StatusBadRequest, "invalid_quota", "quota must be a non-negative integer number of bytes, or null", field("quota")),
	web.ErrorAs[files.BadVariantError](badVariant),
	is(files.ErrTooManyVariants, http.StatusBadRequest, "too_many_variants",
		"the image has as many variants as it may have; ask for one of those already made",
		limit(func(s errScope) int64 { return s.maxVariants })),
	is(files.ErrBusy, http.StatusServiceUnavailable, "busy", "too many images are being processed, try again shortly"),
	is(files.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", "storage is unavailable, try again shortly"),

	// Answered inside the files package (a new id is drawn; the bytes are
	// streamed instead): reaching a client would be a bug (500, logged).
	internal(files.ErrConflict),
	internal(files.ErrNoPresign),
}

// errScope is what the request knows that an answer names.
type errScope struct {
	fileID string // the :id sent (sentId of a file's errors)
	linkID string // the :linkId sent; "" when the link came by its token
	// The limits of an upload (limit of a 413 or 422).
	maxFile, maxPixels, maxMemory, maxScans int64
	maxVariants                             int64 // variants of one image
}

// statusClientClosed is the status logged for a request whose client hung
// up before its answer (nginx's 499): not a server failure.
const statusClientClosed = 499

// uploadScope is the scope of an upload's errors.
func (h *handler) uploadScope(maxFile int64) errScope {
	return errScope{maxFile: maxFile, maxPixels: h.svc.MaxPixels(), maxMemory: h.svc.ImageMaxMemory(),
		maxScans: int64(h.svc.ImageMaxScans())}
}

// fail answers err as errorMap says; an outage of a dependency the files
// package does not name (web.IsUnavailable) is answered as its own
// ErrUnavailable, anything else goes to web.ErrorHandler (500, logged).
func fail(err error, s errScope) error {
	if we, ok := answer(err, s); ok {
		if we == nil {
			return err
		}
		return we
	}
	if web.IsUnavailable(err) {
		we, _ := answer(files.ErrUnavailable, s)
		we.Cause = err
		return we
	}
	return err
}

func answer(err error, s errScope) (*web.Error, bool) {
	return web.AnswerError(errorMap, s, err)
}

// ClientError is the status, code and message of err when it is a files
// error a client caused (a 4xx row of errorMap answered by its sentinel),
// for the tus server, which answers in tusd's errors. ok is false for
// every other error.
func ClientError(err error) (status int, code, msg string, ok bool) {
	for _, row := range errorMap {
		if row.Fixed == nil || !errors.Is(err, row.Sample) {
			continue
		}
		if row.Fixed.Status >= 500 {
			return 0, "", "", false
		}
		return row.Fixed.Status, row.Fixed.Code, row.Fixed.Message, true
	}
	return 0, "", "", false
}

// errorRow is a row of errorMap (web.ErrorRow).
type errorRow = web.ErrorRow[errScope]

// A detail adds what a row's answer names beyond its message.
type detail func(s errScope, body fiber.Map)

// is answers errors that wrap target: {err: msg, code} and the details.
func is(target error, status int, code, msg string, details ...detail) errorRow {
	fixed := &web.Error{Status: status, Code: code, Message: msg}
	return errorRow{Sample: target, Fixed: fixed, Answer: func(s errScope, err error) (*web.Error, bool) {
		if !errors.Is(err, target) {
			return nil, false
		}
		body := fiber.Map{"err": msg}
		for _, d := range details {
			d(s, body)
		}
		return &web.Error{Status: status, Code: code, Message: body["err"].(string), Body: body, Cause: err}, true
	}}
}

// sentFileID names the file id the request sent.
func sentFileID(s errScope, body fiber.Map) { body["sentId"] = s.fileID }

// sentLink names the link id the request sent; a link reached by its
// token is not named (the token is a secret).
func sentLink(s errScope, body fiber.Map) {
	if s.linkID == "" {
		body["err"] = "no share link with this token"
		return
	}
	body["sentId"] = s.linkID
}

// field names the request field at fault.
func field(name string) detail {
	return func(_ errScope, body fiber.Map) { body["field"] = name }
}

// limit names the limit that was passed.
func limit(of func(errScope) int64) detail {
	return func(s errScope, body fiber.Map) { body["limit"] = of(s) }
}

// badLink is a share link request outside the rules, in the codes of the
// checks the handler makes itself.
func badLink(_ errScope, e *files.BadLinkError) *web.Error {
	code := map[string]string{"expiresAt": "invalid_expires_at", "maxDownloads": "invalid_max_downloads"}[e.Field]
	return apiErr(http.StatusBadRequest, code, e.Field+" "+e.Msg, "field", e.Field)
}

// badVariant is an image variant request outside the rules, naming the
// query parameter at fault.
func badVariant(_ errScope, e *files.BadVariantError) *web.Error {
	return apiErr(http.StatusBadRequest, "invalid_parameter", e.Field+" "+e.Msg, "field", e.Field)
}

// malformedForm is a multipart body that could not be read to its end.
func malformedForm(cause error) *web.Error {
	return &web.Error{Status: http.StatusBadRequest, Code: "invalid_multipart", Cause: cause,
		Body: fiber.Map{"err": "the multipart body is malformed or incomplete"}}
}

// apiErr is an error with the file endpoints' body: {err, code} plus the
// given key/value pairs. For request-shape errors; the files package's
// errors are answered by errorMap.
func apiErr(status int, code, msg string, kv ...any) *web.Error {
	body := fiber.Map{"err": msg}
	for i := 0; i+1 < len(kv); i += 2 {
		body[kv[i].(string)] = kv[i+1]
	}
	return &web.Error{Status: status, Code: code, Message: msg, Body: body}
}

// internal marks an error that is never a client's answer.
func internal(target error) errorRow { return web.ErrorInternal[errScope](target) }
