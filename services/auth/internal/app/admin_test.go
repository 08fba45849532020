package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestAdminUsers(t *testing.T) {
	h := newHarness(t, nil)
	admin, adminSess := h.tokenFor(h.signIn(adminEmail, adminPassword))

	// create
	r := h.do(req{method: "POST", path: "/users", token: admin, body: map[string]any{
		"email": "Hank@Example.com", "password": "hank-password", "fullName": "Hank", "edv": "E-42",
		"sector": "Ops", "avatarUrl": "https://example.com/h.png",
	}})
	want(t, r, 201, "")
	u := r.body["user"].(map[string]any)
	assertUserShape(t, u)
	if r.body["message"] != "user created" || u["email"] != "Hank@Example.com" || u["roleName"] != "user" || u["sector"] != "Ops" || u["edv"] != "E-42" {
		t.Fatalf("create: %s", r.raw)
	}
	id := u["id"].(string)
	var stored bson.M
	_ = h.db.Collection("users").FindOne(context.Background(), bson.M{"_id": mustOID(t, id)}).Decode(&stored)
	if hash, _ := stored["passwordHash"].(string); !strings.HasPrefix(hash, "$argon2id$v=19$m=1024,t=1,p=1$") || strings.Contains(r.raw, hash) {
		t.Fatalf("stored hash %q", stored["passwordHash"])
	}

	for _, tc := range []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"create409SameEmailOtherCase", map[string]any{"email": "hank@example.COM", "password": "hank-password", "fullName": "H2", "edv": "E"}, 409, "email_taken"},
		{"create400MissingEdv", map[string]any{"email": "i@example.com", "password": "ivan-password", "fullName": "Ivan"}, 400, "missing_field"},
		{"create400BadRole", map[string]any{"email": "i@example.com", "password": "ivan-password", "fullName": "Ivan", "edv": "E", "roleName": "root"}, 400, "invalid_role"},
		{"create400ShortPassword", map[string]any{"email": "i@example.com", "password": "short", "fullName": "Ivan", "edv": "E"}, 400, "invalid_password"},
		{"create400Unknown", map[string]any{"email": "i@example.com", "password": "ivan-password", "fullName": "Ivan", "edv": "E", "isAdmin": true}, 400, "unknown_field"},
		{"create201Admin", map[string]any{"email": "judy@example.com", "password": "judy-password", "fullName": "Judy", "edv": "E", "roleName": "admin"}, 201, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want(t, h.do(req{method: "POST", path: "/users", token: admin, body: tc.body}), tc.status, tc.code)
		})
	}

	// list: admin, hank, judy
	r = h.do(req{method: "GET", path: "/users?page=1&limit=2", token: admin})
	want(t, r, 200, "")
	if users := r.body["users"].([]any); len(users) != 2 || r.body["total"] != float64(3) || r.body["page"] != float64(1) || r.body["limit"] != float64(2) {
		t.Fatalf("list: %s", r.raw)
	}
	r = h.do(req{method: "GET", path: "/users?page=2&limit=2", token: admin})
	if users := r.body["users"].([]any); len(users) != 1 || users[0].(map[string]any)["email"] != "judy@example.com" {
		t.Fatalf("page 2: %s", r.raw)
	}
	want(t, h.do(req{method: "GET", path: "/users?limit=1000", token: admin}), 400, "invalid_value")
	want(t, h.do(req{method: "GET", path: "/users?page=x", token: admin}), 400, "invalid_value")

	// get
	r = h.do(req{method: "GET", path: "/users/" + id, token: admin})
	want(t, r, 200, "")
	if r.body["user"].(map[string]any)["id"] != id {
		t.Fatalf("get: %s", r.raw)
	}
	want(t, h.do(req{method: "GET", path: "/users/not-an-id", token: admin}), 404, "user_not_found")
	want(t, h.do(req{method: "GET", path: "/users/" + bson.NewObjectID().Hex(), token: admin}), 404, "user_not_found")

	// patch: role change revokes the user's cached identities
	hankSession := h.signIn("hank@example.com", "hank-password")
	sub := h.revocations()
	r = h.do(req{method: "PATCH", path: "/users/" + id, token: admin, body: map[string]any{"roleName": "admin", "sector": "", "edv": "E-43"}})
	want(t, r, 200, "")
	if u := r.body["user"].(map[string]any); u["roleName"] != "admin" || u["sector"] != nil || u["edv"] != "E-43" {
		t.Fatalf("patch: %s", r.raw)
	}
	if rev := nextRevocation(t, sub); !contains(rev.Users, id) {
		t.Fatalf("revocation %+v", rev)
	}
	if r, s := h.msMe(hankSession); r.status != 200 || s.role != "admin" {
		t.Fatalf("session after role change: %s", r.raw)
	}
	want(t, h.do(req{method: "PATCH", path: "/users/" + id, token: admin, body: map[string]any{"email": "judy@example.com"}}), 409, "email_taken")
	want(t, h.do(req{method: "PATCH", path: "/users/" + id, token: admin, body: map[string]any{}}), 400, "empty_patch")
	want(t, h.do(req{method: "PATCH", path: "/users/" + bson.NewObjectID().Hex(), token: admin, body: map[string]any{"fullName": "x"}}), 404, "user_not_found")
	want(t, h.do(req{method: "PATCH", path: "/users/" + adminSess.userID, token: admin, body: map[string]any{"roleName": "user"}}), 409, "cannot_demote_self")

	// admin password reset ends the user's sessions
	r = h.do(req{method: "PATCH", path: "/users/" + id, token: admin, body: map[string]any{"password": map[string]string{"new": "hank-new-password"}}})
	want(t, r, 200, "")
	if rev := nextRevocation(t, sub); !contains(rev.Sessions, sha256Hex(hankSession)) {
		t.Fatalf("revocation %+v", rev)
	}
	if r, _ := h.msMe(hankSession); r.status != 401 {
		t.Fatal("session survived an admin password reset")
	}
	hankSession = h.signIn("hank@example.com", "hank-new-password")

	// delete
	want(t, h.do(req{method: "DELETE", path: "/users/" + adminSess.userID, token: admin}), 409, "cannot_delete_self")
	r = h.do(req{method: "DELETE", path: "/users/" + id, token: admin})
	want(t, r, 200, "")
	rev := nextRevocation(t, sub)
	if !contains(rev.Users, id) || !contains(rev.Sessions, sha256Hex(hankSession)) {
		t.Fatalf("revocation %+v", rev)
	}
	if r, _ := h.msMe(hankSession); r.status != 401 {
		t.Fatal("session of a deleted user still valid")
	}
	if n, _ := h.db.Collection("sessions").CountDocuments(context.Background(), bson.M{"userId": id}); n != 0 {
		t.Fatalf("%d sessions left for the deleted user", n)
	}
	want(t, h.do(req{method: "DELETE", path: "/users/" + id, token: admin}), 404, "user_not_found")
	want(t, h.do(req{method: "GET", path: "/users/" + id, token: admin}), 404, "user_not_found")
}

func TestAdminRoutesRefuseOthers(t *testing.T) {
	h := newHarness(t, nil)
	admin := h.adminToken()
	id := h.createUser(admin, "kim@example.com", "kim-password")
	user, _ := h.tokenFor(h.signIn("kim@example.com", "kim-password"))
	body := map[string]any{"email": "x@example.com", "password": "x-password", "fullName": "X", "edv": "E"}
	for _, rt := range []struct{ method, path string }{
		{"POST", "/users"}, {"GET", "/users"}, {"GET", "/users/" + id}, {"PATCH", "/users/" + id}, {"DELETE", "/users/" + id},
	} {
		var b any
		if rt.method == "POST" || rt.method == "PATCH" {
			b = body
		}
		t.Run(fmt.Sprintf("%s%s403", rt.method, rt.path), func(t *testing.T) {
			want(t, h.do(req{method: rt.method, path: rt.path, token: user, body: b}), 403, "forbidden")
			want(t, h.do(req{method: rt.method, path: rt.path, token: h.anonToken(), body: b}), 401, "unauthenticated")
			want(t, h.do(req{method: rt.method, path: rt.path, body: b}), 401, "identity_required")
		})
	}
	if n, _ := h.db.Collection("users").CountDocuments(context.Background(), bson.M{}); n != 2 {
		t.Fatalf("%d users, refused requests changed data", n)
	}
}
