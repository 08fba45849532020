package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
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
	return exactKeys(raw, dst)
}

// exactKeys refuses what encoding/json lets through: a top-level key that
// matches a field only case-insensitively ("App" for "app"), and a key
// given twice (the last would silently win). raw is known to be valid.
func exactKeys(raw []byte, dst any) error {
	t := reflect.TypeOf(dst)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	names := jsonNames(t)
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return jsonError(err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return jsonError(err)
		}
		key, _ := tok.(string)
		if !names[key] {
			return FieldError(key, "unknown_field", fmt.Sprintf("unknown field %q (names are case-sensitive)", key))
		}
		if seen[key] {
			return FieldError(key, "duplicate_field", fmt.Sprintf("field %q is given twice", key))
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return jsonError(err)
		}
	}
	return nil
}

// jsonNames lists the JSON names of t's exported fields as encoding/json
// sees them (tags, untagged names, embedded structs' fields).
func jsonNames(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = true
	}
	return out
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
