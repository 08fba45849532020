package web

import (
	"errors"
	"net/http"
	"testing"
)

func TestDecodeJSONBytes(t *testing.T) {
	type body struct {
		Email    string `json:"email"`
		Password *struct {
			Old string `json:"old"`
		} `json:"password"`
		N int `json:"n"`
	}
	cases := []struct {
		name, in    string
		status      int
		code, field string
	}{
		{"ok200", `{"email":"a@b.c","n":1}`, 0, "", ""},
		{"empty400", ``, 400, "empty_body", ""},
		{"spaces400", "  \n", 400, "empty_body", ""},
		{"array400", `[1]`, 400, "invalid_json", ""},
		{"malformed400", `{"email":`, 400, "invalid_json", ""},
		{"unknownField400", `{"email":"x","admin":true}`, 400, "unknown_field", "admin"},
		{"wrongType400", `{"email":5}`, 400, "invalid_type", "email"},
		{"nestedWrongType400", `{"password":{"old":1}}`, 400, "invalid_type", "password.old"},
		{"trailing400", `{"email":"x"} {"email":"y"}`, 400, "invalid_json", ""},
		{"null400", `null`, 400, "invalid_json", ""},
		{"caseFolded400", `{"Email":"x"}`, 400, "unknown_field", "Email"},
		{"duplicate400", `{"email":"x","email":"y"}`, 400, "duplicate_field", "email"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b body
			err := DecodeJSONBytes([]byte(c.in), &b)
			if c.status == 0 {
				if err != nil {
					t.Fatalf("unexpected %v", err)
				}
				return
			}
			var we *Error
			if !errors.As(err, &we) {
				t.Fatalf("got %v, want *Error", err)
			}
			if we.Status != c.status || we.Code != c.code || we.Field != c.field {
				t.Fatalf("got %d %s %q, want %d %s %q", we.Status, we.Code, we.Field, c.status, c.code, c.field)
			}
		})
	}
}

func TestCodeForStatus(t *testing.T) {
	if CodeForStatus(http.StatusRequestEntityTooLarge) != "body_too_large" || CodeForStatus(599) != "internal" {
		t.Fatal("codes")
	}
}
