package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestServiceMe(t *testing.T) {
	h := newHarness(t, map[string]string{"AUTH_SERVICE_CREDENTIALS": credential + ",second-credential-abcdefgh"})
	secret := h.signIn(adminEmail, adminPassword)
	body := map[string]string{"sessionId": secret}

	for _, tc := range []struct {
		name   string
		cred   string
		body   any
		status int
		code   string
	}{
		{"msme401NoCredential", "", body, 401, "invalid_service_credential"},
		{"msme401WrongCredential", "wrong-credential", body, 401, "invalid_service_credential"},
		{"msme401PrefixOfCredential", credential[:10], body, 401, "invalid_service_credential"},
		{"msme200", credential, body, 200, ""},
		{"msme200SecondCredential", "second-credential-abcdefgh", body, 200, ""},
		{"msme401UnknownSession", credential, map[string]string{"sessionId": strings.Repeat("A", 43)}, 401, "invalid_session"},
		{"msme401MalformedSession", credential, map[string]string{"sessionId": "not a session"}, 401, "invalid_session"},
		{"msme401TamperedSession", credential, map[string]string{"sessionId": secret[:42] + flip(secret[42])}, 401, "invalid_session"},
		{"msme401NoSessionID", credential, map[string]string{}, 401, "invalid_session"},
		{"msme400WrongType", credential, map[string]int{"sessionId": 5}, 400, "invalid_type"},
		{"msme400EmptyBody", credential, "", 400, "empty_body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(req{method: "GET", path: "/ms/me", body: tc.body, headers: map[string]string{"X-Service-Credential": tc.cred}})
			want(t, r, tc.status, tc.code)
			if tc.status != 200 {
				return
			}
			if r.body["message"] != "user retrieved" {
				t.Fatalf("message: %s", r.raw)
			}
			u := r.body["user"].(map[string]any)
			assertUserShape(t, u)
			if u["email"] != adminEmail || u["roleName"] != "admin" {
				t.Fatalf("user: %s", r.raw)
			}
			s := r.body["session"].(map[string]any)
			id, _ := s["id"].(string)
			exp, err := time.Parse(time.RFC3339Nano, s["expiresAt"].(string))
			if len(id) != 32 || err != nil || !exp.After(time.Now()) {
				t.Fatalf("session: %s", r.raw)
			}
		})
	}

	t.Run("msme401Expired", func(t *testing.T) {
		s := h.signIn(adminEmail, adminPassword)
		setSession(t, h, s, bson.M{"expiresAt": time.Now().Add(-time.Second)})
		r, _ := h.msMe(s)
		want(t, r, 401, "invalid_session")
	})
	t.Run("msme401Idle", func(t *testing.T) {
		s := h.signIn(adminEmail, adminPassword)
		setSession(t, h, s, bson.M{"lastSeenAt": time.Now().Add(-24*time.Hour - time.Second)})
		r, _ := h.msMe(s)
		want(t, r, 401, "invalid_session")
	})
	t.Run("msme200IdleResetByUse", func(t *testing.T) {
		s := h.signIn(adminEmail, adminPassword)
		seen := time.Now().Add(-23 * time.Hour).UTC().Truncate(time.Millisecond)
		setSession(t, h, s, bson.M{"lastSeenAt": seen})
		r, _ := h.msMe(s)
		want(t, r, 200, "")
		var doc struct {
			LastSeenAt time.Time `bson:"lastSeenAt"`
		}
		_ = h.db.Collection("sessions").FindOne(context.Background(), bson.M{"_id": sha256Hex(s)}).Decode(&doc)
		if !doc.LastSeenAt.After(seen.Add(time.Hour)) {
			t.Fatalf("lastSeenAt not updated: %v", doc.LastSeenAt)
		}
		// Used again within a minute: no write.
		setSession(t, h, s, bson.M{"lastSeenAt": time.Now().Add(-30 * time.Second).UTC().Truncate(time.Millisecond)})
		_ = h.db.Collection("sessions").FindOne(context.Background(), bson.M{"_id": sha256Hex(s)}).Decode(&doc)
		before := doc.LastSeenAt
		want(t, h.do(req{method: "GET", path: "/ms/me", body: map[string]string{"sessionId": s}, headers: map[string]string{"X-Service-Credential": credential}}), 200, "")
		_ = h.db.Collection("sessions").FindOne(context.Background(), bson.M{"_id": sha256Hex(s)}).Decode(&doc)
		if !doc.LastSeenAt.Equal(before) {
			t.Fatalf("lastSeenAt written twice within a minute: %v then %v", before, doc.LastSeenAt)
		}
	})
	t.Run("msme401DeletedUser", func(t *testing.T) {
		admin := h.adminToken()
		id := h.createUser(admin, "gone@example.com", "gone-password")
		s := h.signIn("gone@example.com", "gone-password")
		if _, err := h.db.Collection("users").DeleteOne(context.Background(), bson.M{"_id": mustOID(t, id)}); err != nil {
			t.Fatal(err)
		}
		r, _ := h.msMe(s)
		want(t, r, 401, "invalid_session")
	})
}

func TestServiceMeSharedCredential(t *testing.T) {
	h := newHarness(t, map[string]string{"AUTH_SERVICE_CREDENTIALS": "", "SERVICE_CREDENTIAL": "shared-credential-0123456789"})
	s := h.signIn(adminEmail, adminPassword)
	r := h.do(req{method: "GET", path: "/ms/me", body: map[string]string{"sessionId": s}, headers: map[string]string{"X-Service-Credential": "shared-credential-0123456789"}})
	want(t, r, 200, "")
}

func flip(b byte) string {
	if b == 'A' {
		return "B"
	}
	return "A"
}

func setSession(t *testing.T, h *harness, secret string, set bson.M) {
	t.Helper()
	res, err := h.db.Collection("sessions").UpdateOne(context.Background(), bson.M{"_id": sha256Hex(secret)}, bson.M{"$set": set})
	if err != nil || res.MatchedCount != 1 {
		t.Fatalf("update session: %v %+v", err, res)
	}
}

func mustOID(t *testing.T, id string) bson.ObjectID {
	t.Helper()
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		t.Fatal(err)
	}
	return oid
}

// assertUserShape checks the spec's User: exactly these fields, no hash.
func assertUserShape(t *testing.T, u map[string]any) {
	t.Helper()
	wantKeys := []string{"id", "email", "fullName", "sector", "edv", "avatarUrl", "createdAt", "updatedAt", "roleName", "emailVerified", "mfaEnabled"}
	if len(u) != len(wantKeys) {
		t.Fatalf("user has fields %v, want exactly %v", keys(u), wantKeys)
	}
	for _, k := range wantKeys {
		if _, ok := u[k]; !ok {
			t.Fatalf("user lacks %s: %v", k, u)
		}
	}
	for _, k := range []string{"createdAt", "updatedAt"} {
		if _, err := time.Parse(time.RFC3339Nano, u[k].(string)); err != nil {
			t.Fatalf("%s is not a date: %v", k, u[k])
		}
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestMe(t *testing.T) {
	h := newHarness(t, nil)
	admin := h.adminToken()
	id := h.createUser(admin, "carol@example.com", "carol-password")
	tok, _ := h.tokenFor(h.signIn("carol@example.com", "carol-password"))

	r := h.do(req{method: "GET", path: "/me", token: tok})
	want(t, r, 200, "")
	u := r.body["user"].(map[string]any)
	assertUserShape(t, u)
	if r.body["message"] != "user retrieved" || u["id"] != id || u["email"] != "carol@example.com" || u["sector"] != nil || u["avatarUrl"] != nil {
		t.Fatalf("body %s", r.raw)
	}
	want(t, h.do(req{method: "GET", path: "/me", token: h.anonToken()}), 401, "unauthenticated")
	want(t, h.do(req{method: "GET", path: "/me"}), 401, "identity_required")

	// Deleted (through the service, which announces it to every replica's
	// user cache): 401 on the next request.
	want(t, h.do(req{method: "DELETE", path: "/users/" + id, token: admin}), 200, "")
	want(t, h.do(req{method: "GET", path: "/me", token: tok}), 401, "unauthenticated")

	// Without the user cache, even a deletion behind the service's back is
	// seen at once.
	h0 := newHarness(t, map[string]string{"AUTH_USER_CACHE_TTL": "0s"})
	admin0 := h0.adminToken()
	id0 := h0.createUser(admin0, "dave@example.com", "dave-password")
	tok0, _ := h0.tokenFor(h0.signIn("dave@example.com", "dave-password"))
	want(t, h0.do(req{method: "GET", path: "/me", token: tok0}), 200, "")
	if _, err := h0.db.Collection("users").DeleteOne(context.Background(), bson.M{"_id": mustOID(t, id0)}); err != nil {
		t.Fatal(err)
	}
	want(t, h0.do(req{method: "GET", path: "/me", token: tok0}), 401, "unauthenticated")
}

func TestPatchMe(t *testing.T) {
	h := newHarness(t, nil)
	admin := h.adminToken()
	h.createUser(admin, "dave@example.com", "dave-password")
	h.createUser(admin, "erin@example.com", "erin-password")
	tok, _ := h.tokenFor(h.signIn("dave@example.com", "dave-password"))
	patch := func(body any, ct string) resp {
		return h.do(req{method: "PATCH", path: "/me", token: tok, body: body, contentType: ct})
	}

	for _, tc := range []struct {
		name  string
		body  any
		ct    string
		code  string
		field string
	}{
		{"patch400Empty", map[string]any{}, "", "empty_patch", ""},
		{"patch400EmptyBody", "", "", "empty_body", ""},
		{"patch400Malformed", `{"fullName":`, "", "invalid_json", ""},
		{"patch400NotObject", `["fullName"]`, "", "invalid_json", ""},
		{"patch400Unknown", map[string]any{"roleName": "admin"}, "", "unknown_field", "roleName"},
		{"patch400WrongTypeFullName", map[string]any{"fullName": 5}, "", "invalid_type", "fullName"},
		{"patch400WrongTypePassword", map[string]any{"password": "x"}, "", "invalid_type", "password"},
		{"patch400EmptyFullName", map[string]any{"fullName": "  "}, "", "invalid_value", "fullName"},
		{"patch400InvalidEmail", map[string]any{"email": "not-an-email"}, "", "invalid_email", "email"},
		{"patch400EmailWithName", map[string]any{"email": "Dave <dave@example.com>"}, "", "invalid_email", "email"},
		{"patch400RelativeURL", map[string]any{"avatarUrl": "/img/a.png"}, "", "invalid_url", "avatarUrl"},
		{"patch400FtpURL", map[string]any{"avatarUrl": "ftp://example.com/a.png"}, "", "invalid_url", "avatarUrl"},
		{"patch400JavascriptURL", map[string]any{"avatarUrl": "javascript:alert(1)"}, "", "invalid_url", "avatarUrl"},
		{"patch400ShortNewPassword", map[string]any{"password": map[string]string{"old": "dave-password", "new": "short"}}, "", "invalid_password", "password.new"},
		{"patch400LongNewPassword", map[string]any{"password": map[string]string{"old": "dave-password", "new": strings.Repeat("y", 1025)}}, "", "invalid_password", "password.new"},
		{"patch400MissingOld", map[string]any{"password": map[string]string{"new": "new-password-1"}}, "", "missing_field", "password.old"},
		// This harness sends no mail: nothing could confirm an address
		// change, so the password is required (with mail, e-mail alone
		// is accepted: internal/account/email_test.go and
		// TestHostileEmailEnumeration).
		{"patch400EmailWithoutPasswordNoMail", map[string]any{"email": "erin@example.com"}, "", "missing_field", "currentPassword"},
		{"patch400EmailEmptyPasswordNoMail", map[string]any{"email": "dave2@example.com", "currentPassword": ""}, "", "missing_field", "currentPassword"},
		{"patch400WrongTypeCurrentPassword", map[string]any{"email": "dave2@example.com", "currentPassword": 1}, "", "invalid_type", "currentPassword"},
		{"patch400FullNameNewline", map[string]any{"fullName": "Dave\nAdmin"}, "", "invalid_characters", "fullName"},
		{"patch400FullNameNUL", map[string]any{"fullName": "Dave\x00"}, "", "invalid_characters", "fullName"},
		{"patch400FullNameC1", map[string]any{"fullName": "Dave\u0085"}, "", "invalid_characters", "fullName"},
		{"patch400FullNameRLO", map[string]any{"fullName": "Dave\u202Egpj.exe"}, "", "invalid_characters", "fullName"},
		{"patch400FullNameIsolate", map[string]any{"fullName": "Dave\u2066x\u2069"}, "", "invalid_characters", "fullName"},
		{"patch400FullNameZWSP", map[string]any{"fullName": "Da\u200Bve"}, "", "invalid_characters", "fullName"},
		{"patch400FullNameBOM", map[string]any{"fullName": "\uFEFFDave"}, "", "invalid_characters", "fullName"},
		{"patch400SectorTab", map[string]any{"sector": "Fin\tance"}, "", "invalid_characters", "sector"},
		{"patch400AvatarBidi", map[string]any{"avatarUrl": "https://cdn.example.com/\u202Ea.png"}, "", "invalid_characters", "avatarUrl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := patch(tc.body, tc.ct)
			want(t, r, 400, tc.code)
			if tc.field != "" && r.body["field"] != tc.field {
				t.Fatalf("field %v, want %s; %s", r.body["field"], tc.field, r.raw)
			}
		})
	}
	t.Run("patch415", func(t *testing.T) {
		want(t, patch(`{"fullName":"x"}`, "text/plain"), 415, "unsupported_media_type")
	})
	t.Run("patch409EmailTaken", func(t *testing.T) {
		// Without mail the change applies at once, so a taken address
		// can only be refused; the password is needed all the same.
		want(t, patch(map[string]any{"email": "ERIN@example.com", "currentPassword": "dave-password"}, ""), 409, "email_taken")
	})
	t.Run("patch403WrongCurrentPassword", func(t *testing.T) {
		want(t, patch(map[string]any{"email": "dave2@example.com", "currentPassword": "not-the-password"}, ""), 403, "wrong_password")
		h.signIn("dave@example.com", "dave-password") // nothing changed
	})
	t.Run("patch403WrongPassword", func(t *testing.T) {
		want(t, patch(map[string]any{"password": map[string]string{"old": "not-the-password", "new": "new-password-1"}}, ""), 403, "wrong_password")
		// nothing changed
		h.signIn("dave@example.com", "dave-password")
	})
	t.Run("patch200", func(t *testing.T) {
		sub := h.revocations()
		r := patch(map[string]any{"fullName": "Dave D.", "sector": "Finance", "avatarUrl": "https://cdn.example.com/a.png", "email": "Dave.New@example.com", "currentPassword": "dave-password"}, "")
		want(t, r, 200, "")
		u := r.body["user"].(map[string]any)
		assertUserShape(t, u)
		if r.body["message"] != "user edited" || u["fullName"] != "Dave D." || u["sector"] != "Finance" ||
			u["avatarUrl"] != "https://cdn.example.com/a.png" || u["email"] != "Dave.New@example.com" || u["updatedAt"] == u["createdAt"] {
			t.Fatalf("body %s", r.raw)
		}
		if len(r.header.Values("Set-Cookie")) != 0 {
			t.Fatal("an edit without password change set a cookie")
		}
		rev := nextRevocation(t, sub)
		if !contains(rev.Users, u["id"].(string)) {
			t.Fatalf("revocation %+v lacks the user", rev)
		}
		// The new e-mail signs in, case-insensitively; clearing with "".
		h.signIn("dave.new@EXAMPLE.com", "dave-password")
		r = patch(map[string]any{"sector": "", "avatarUrl": ""}, "")
		want(t, r, 200, "")
		if u := r.body["user"].(map[string]any); u["sector"] != nil || u["avatarUrl"] != nil {
			t.Fatalf("clear: %s", r.raw)
		}
	})
}

func TestPasswordChange(t *testing.T) {
	h := newHarness(t, nil)
	admin := h.adminToken()
	id := h.createUser(admin, "frank@example.com", "frank-password")
	current := h.signIn("frank@example.com", "frank-password")
	other := h.signIn("frank@example.com", "frank-password")
	tok, _ := h.tokenFor(current)
	sub := h.revocations()

	r := h.do(req{method: "PATCH", path: "/me", token: tok, body: map[string]any{
		"password": map[string]string{"old": "frank-password", "new": "frank-new-password"},
	}})
	want(t, r, 200, "")
	c := sessionCookie(t, r)
	if c.Value == current || c.Value == other || !c.HttpOnly || !c.Secure || c.MaxAge <= 0 {
		t.Fatalf("new cookie %s", c.Raw)
	}
	for name, s := range map[string]string{"current": current, "other": other} {
		if r, _ := h.msMe(s); r.status != 401 {
			t.Fatalf("%s session still valid after password change: %d", name, r.status)
		}
	}
	if r, _ := h.msMe(c.Value); r.status != 200 {
		t.Fatalf("new session refused: %s", r.raw)
	}
	rev := nextRevocation(t, sub)
	if !contains(rev.Sessions, sha256Hex(current)) || !contains(rev.Sessions, sha256Hex(other)) || !contains(rev.Users, id) || contains(rev.Sessions, sha256Hex(c.Value)) {
		t.Fatalf("revocation %+v", rev)
	}
	want(t, h.do(req{method: "POST", path: "/signin", token: h.anonToken(), body: map[string]string{"email": "frank@example.com", "password": "frank-password"}}), 401, "invalid_credentials")
	h.signIn("frank@example.com", "frank-new-password")
}

func TestSignout(t *testing.T) {
	h := newHarness(t, nil)
	secret := h.signIn(adminEmail, adminPassword)
	keep := h.signIn(adminEmail, adminPassword)
	tok, _ := h.tokenFor(secret)
	sub := h.revocations()

	r := h.do(req{method: "DELETE", path: "/signout", token: tok})
	want(t, r, 200, "")
	if r.body["message"] != "signed out" {
		t.Fatalf("body %s", r.raw)
	}
	c := sessionCookie(t, r)
	if c.Value != "" || c.MaxAge != -1 || !strings.Contains(c.Raw, "Max-Age=0") || !c.HttpOnly || !c.Secure || c.Path != "/" || c.SameSite != 2 {
		t.Fatalf("cleared cookie %s", c.Raw)
	}
	if r, _ := h.msMe(secret); r.status != 401 {
		t.Fatalf("signed-out session still valid: %s", r.raw)
	}
	if r, _ := h.msMe(keep); r.status != 200 {
		t.Fatalf("other session ended by sign-out: %s", r.raw)
	}
	rev := nextRevocation(t, sub)
	if len(rev.Sessions) != 1 || rev.Sessions[0] != sha256Hex(secret) {
		t.Fatalf("revocation %+v, want the session's hash", rev)
	}
	want(t, h.do(req{method: "DELETE", path: "/signout", token: h.anonToken()}), 401, "unauthenticated")
}

func TestMySessions(t *testing.T) {
	h := newHarness(t, nil)
	admin := h.adminToken()
	h.createUser(admin, "gina@example.com", "gina-password")
	a := h.signIn("gina@example.com", "gina-password")
	b := h.signIn("gina@example.com", "gina-password")
	c := h.signIn("gina@example.com", "gina-password")
	tok, me := h.tokenFor(a)
	_, sb := h.tokenFor(b)
	_, adminSess := h.tokenFor(h.signIn(adminEmail, adminPassword))

	r := h.do(req{method: "GET", path: "/me/sessions", token: tok})
	want(t, r, 200, "")
	list := r.body["sessions"].([]any)
	if len(list) != 3 {
		t.Fatalf("sessions %s", r.raw)
	}
	currents := 0
	for _, x := range list {
		s := x.(map[string]any)
		for _, k := range []string{"id", "createdAt", "lastSeenAt", "expiresAt", "userAgent", "ip", "current"} {
			if _, ok := s[k]; !ok {
				t.Fatalf("session lacks %s: %v", k, s)
			}
		}
		if s["current"] == true {
			currents++
			if s["id"] != me.publicID {
				t.Fatalf("current session %v, want %s", s["id"], me.publicID)
			}
		}
		if len(s["id"].(string)) != 32 || strings.Contains(r.raw, sha256Hex(a)) {
			t.Fatal("listing exposes a secret or its hash")
		}
	}
	if currents != 1 {
		t.Fatalf("%d current sessions", currents)
	}

	sub := h.revocations()
	want(t, h.do(req{method: "DELETE", path: "/me/sessions/" + sb.publicID, token: tok}), 200, "")
	if r, _ := h.msMe(b); r.status != 401 {
		t.Fatal("ended session still valid")
	}
	if rev := nextRevocation(t, sub); len(rev.Sessions) != 1 || rev.Sessions[0] != sha256Hex(b) {
		t.Fatalf("revocation %+v", rev)
	}
	want(t, h.do(req{method: "DELETE", path: "/me/sessions/" + sb.publicID, token: tok}), 404, "session_not_found")
	want(t, h.do(req{method: "DELETE", path: "/me/sessions/" + adminSess.publicID, token: tok}), 404, "session_not_found")
	if r, _ := h.msMe(c); r.status != 200 {
		t.Fatal("unrelated session ended")
	}

	r = h.do(req{method: "DELETE", path: "/me/sessions", token: tok})
	want(t, r, 200, "")
	if n, _ := r.body["ended"].(float64); n != 1 {
		t.Fatalf("ended %s, want 1", r.raw)
	}
	if r, _ := h.msMe(c); r.status != 401 {
		t.Fatal("other session survived DELETE /me/sessions")
	}
	if r, _ := h.msMe(a); r.status != 200 {
		t.Fatal("current session ended by DELETE /me/sessions")
	}
	if rev := nextRevocation(t, sub); len(rev.Sessions) != 1 || rev.Sessions[0] != sha256Hex(c) {
		t.Fatalf("revocation %+v", rev)
	}
}
