package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// DecodeJSON strictly decodes the request body into dst: the content type must
// be application/json, the body must be one JSON object with no unknown
// fields and no trailing data, and it must not be content-encoded (Fiber's
// c.Body() would inflate gzip without a limit). Errors are 4xx *Error values
// naming the field where one is at fault.
func DecodeJSON(c *fiber.Ctx, dst any) error {
	if enc := c.Get(fiber.HeaderContentEncoding); enc != "" && !strings.EqualFold(enc, "identity") {
		return Errorf(http.StatusUnsupportedMediaType, "unsupported_encoding", "request bodies must not be content-encoded")
	}
	ct := c.Get(fiber.HeaderContentType)
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || mt != fiber.MIMEApplicationJSON {
		return Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "content type must be application/json")
	}
	return DecodeJSONBytes(c.Request().Body(), dst)
}

// DecodeJSONBytes applies DecodeJSON's rules to raw bytes.
func DecodeJSONBytes(raw []byte, dst any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return Errorf(http.StatusBadRequest, "empty_body", "request body is empty")
	}
	if bytes.TrimSpace(raw)[0] != '{' {
		return Errorf(http.StatusBadRequest, "invalid_json", "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(http.StatusBadRequest, "invalid_json", "unexpected data after the JSON object")
	}
	return nil
}

func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Errorf(http.StatusBadRequest, "invalid_json", "request body is not valid JSON")
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return Errorf(http.StatusBadRequest, "invalid_json", "request body must be a JSON object")
		}
		return FieldError(field, "invalid_type", fmt.Sprintf("%s must be of type %s", field, jsonType(te.Type.Kind().String())))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return FieldError(field, "unknown_field", fmt.Sprintf("unknown field %q", field))
	default:
		return Errorf(http.StatusBadRequest, "invalid_json", "request body is not valid JSON")
	}
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "struct", "map", "ptr":
		return "object"
	case "slice", "array":
		return "array"
	case "bool":
		return "boolean"
	default:
		return "number"
	}
}
