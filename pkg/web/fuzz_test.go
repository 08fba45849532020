package web

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// fuzzBody has the shapes the services' request bodies use: strings,
// pointers (optional fields), a nested object and a number.
type fuzzBody struct {
	Email    *string `json:"email"`
	Password *struct {
		Old *string `json:"old"`
		New *string `json:"new"`
	} `json:"password"`
	Name  string   `json:"name"`
	Count int      `json:"count"`
	Tags  []string `json:"tags"`
}

// FuzzDecodeJSONBytes: any body either decodes or yields a 400 *Error with a
// code; whatever decodes is valid JSON and survives a round trip unchanged.
func FuzzDecodeJSONBytes(f *testing.F) {
	for _, s := range []string{`{"email":"a@b.c","password":{"old":"x","new":"y"}}`, `{}`, ``, ` `, `[]`, `{"email":1}`,
		`{"unknown":1}`, `{"name":"x"}{}`, `{"name":"x"}]`, `{"count":1e400}`, `{"tags":[null,"a"]}`, "{\"name\":\"\xff\"}", `nul`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var b fuzzBody
		err := DecodeJSONBytes(raw, &b)
		if err != nil {
			var we *Error
			if !errors.As(err, &we) || we.Status != 400 || we.Code == "" {
				t.Fatalf("error %v is not a 400 with a code", err)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
		again, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		var b2 fuzzBody
		if err := DecodeJSONBytes(again, &b2); err != nil {
			t.Fatalf("re-encoded body refused: %v (%s)", err, again)
		}
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("round trip changed the body: %+v vs %+v", b, b2)
		}
	})
}

// FuzzDecodeJSONHandler drives DecodeJSON through a Fiber app with the shared
// error handler: any content type, encoding and body gives 200 or a 4xx
// with a JSON body, never a 5xx.
func FuzzDecodeJSONHandler(f *testing.F) {
	f.Add("application/json", "", []byte(`{"name":"x"}`))
	f.Add("application/json; charset=utf-8", "gzip", []byte(`{}`))
	f.Add("text/plain", "", []byte(`{}`))
	f.Add("application/json;;", "identity", []byte(`{"count":"x"}`))
	app := fiber.New(fiber.Config{ErrorHandler: ErrorHandler(slog.New(slog.NewTextHandler(io.Discard, nil))), DisableStartupMessage: true})
	app.Post("/", func(c *fiber.Ctx) error {
		var b fuzzBody
		if err := DecodeJSON(c, &b); err != nil {
			return err
		}
		return c.JSON(b)
	})
	f.Fuzz(func(t *testing.T, ct, enc string, body []byte) {
		req := httptest.NewRequest("POST", "/", strings.NewReader(string(body)))
		if !validHeaderValue(ct) || !validHeaderValue(enc) {
			return // net/http would refuse to send it
		}
		req.Header.Set("Content-Type", ct)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 500 || resp.StatusCode != 200 && resp.StatusCode < 400 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("status %d with content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	})
}

func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
