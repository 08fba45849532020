package e2e

// Hostile-input cases of auth's text fields (issue 43, row 7): invisible
// and format characters, replayed through the gateway against the real
// processes.

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// TestHostileInvisibleCharacters: invisible and format characters in a
// name or an address are refused with 400 invalid_characters naming the
// field, and nothing is stored (three accounts that show as one address
// cannot be created); a user agent that holds them is stored cleaned, as
// GET /me/sessions and the audit trail show it.
func TestHostileInvisibleCharacters(t *testing.T) {
	p, sec, _ := platform(t, nil)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	const pw = "correct horse battery"
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "root@example.com", "password": pw, "fullName": "Root", "edv": "E-1"})

	// A sign-in whose user agent reverses what follows it.
	const evilUA = "Mozilla/5.0 \u202eevil\u2060 (X11)"
	const cleanUA = "Mozilla/5.0 evil (X11)"
	user := newClient(t, p.GatewayURL)
	j, _ := json.Marshal(map[string]string{"email": "root@example.com", "password": pw})
	if r := user.api.Do("POST", "/signin", j, map[string]string{"Content-Type": "application/json", "User-Agent": evilUA}); r.Status != 200 {
		t.Fatalf("sign-in: %d %s", r.Status, r.Body)
	}
	before := user.mustStatus(200, "GET", "/me", nil)["user"]
	users := admin.mustStatus(200, "GET", "/users", nil)["total"]

	for _, r := range []rune{
		0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x206A, 0x206B, 0x206C, 0x206D, 0x206E, 0x206F,
		0x180E, 0x00AD, 0x034F, 0x3164, 0x115F, 0xFFA0, 0xE0001, 0xE0041, 0xFFF9, 0xFFFA, 0xFFFB,
	} {
		t.Run(fmt.Sprintf("U+%04X", r), func(t *testing.T) {
			for _, name := range []string{"Ro" + string(r) + "ot", string(r), "Root" + string(r)} {
				got, m, _ := user.do("PATCH", "/me", map[string]any{"fullName": name})
				if got != 400 || m["code"] != "invalid_characters" || m["field"] != "fullName" {
					t.Errorf("PATCH /me {fullName:%q}: %d %v, want 400 invalid_characters naming fullName", name, got, m)
				}
			}
		})
	}
	// Three addresses that display as root@example.com.
	for _, email := range []string{"ro\u2060ot@example.com", "root\U000e0041@example.com", "root@example.com\u00ad"} {
		got, m, _ := admin.do("POST", "/users", map[string]any{"email": email, "password": pw, "fullName": "Impostor", "edv": "E-2"})
		if got != 400 || m["code"] != "invalid_characters" || m["field"] != "email" {
			t.Errorf("POST /users {email:%q}: %d %v, want 400 invalid_characters naming email", email, got, m)
		}
	}

	if after := user.mustStatus(200, "GET", "/me", nil)["user"]; !reflect.DeepEqual(after, before) {
		t.Fatalf("the user changed:\n%v\n%v", before, after)
	}
	if n := admin.mustStatus(200, "GET", "/users", nil)["total"]; n != users {
		t.Fatalf("users: %v, was %v", n, users)
	}

	// The user agent, cleaned, in the session list and the audit trail.
	var agents []string
	for _, s := range user.mustStatus(200, "GET", "/me/sessions", nil)["sessions"].([]any) {
		agents = append(agents, s.(map[string]any)["userAgent"].(string))
	}
	if len(agents) != 1 || agents[0] != cleanUA {
		t.Fatalf("sessions show the user agents %q, want [%q]", agents, cleanUA)
	}
	rootID := before.(map[string]any)["id"].(string)
	awaitAuditEvents(t, admin, map[string]func(string, map[string]any) bool{
		"signin.succeeded": func(_ string, r map[string]any) bool { return r["actor"] == rootID },
	}, func(_ string, _, r map[string]any) {
		if r["event"] == "signin.succeeded" && r["actor"] == rootID && r["userAgent"] != cleanUA {
			t.Fatalf("the audit trail shows the user agent %q, want %q", r["userAgent"], cleanUA)
		}
	})
}
