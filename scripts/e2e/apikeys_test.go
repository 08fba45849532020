package e2e

// API keys through the gateway: created by a user for themselves and by an
// administrator for a service account, used as Authorization: Bearer,
// limited by scope and by the owner's role, revoked at once on every
// gateway replica, and recorded in the audit trail. (Each scope against
// each route: TestAuthorizationMatrix.)

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/scripts/stack"
)

// keyDo sends a JSON request with an API key (no cookie) through the
// OpenAPI-checked transport.
func keyDo(t *testing.T, base, key, method, path string, body any) (int, map[string]any) {
	t.Helper()
	c := apptest.NewClient(t, base).With("Authorization", key)
	c.HTTP = &http.Client{Timeout: 30 * time.Second, Transport: checked(t, base, nil)} // no cookie
	var b any
	if body != nil {
		j, _ := json.Marshal(body)
		b = j
	}
	r := c.Do(method, path, b)
	var m map[string]any
	_ = json.Unmarshal(r.Body, &m)
	return r.Status, m
}

func wantKey(t *testing.T, base, key, method, path string, body any, status int, code string) map[string]any {
	t.Helper()
	got, m := keyDo(t, base, key, method, path, body)
	if got != status || (code != "" && m["code"] != code) {
		t.Fatalf("%s %s with key: %d %v, want %d %s", method, path, got, m, status, code)
	}
	return m
}

var secretForm = regexp.MustCompile(`^acme_[A-Za-z0-9_-]{43}$`)

func TestAPIKeys(t *testing.T) {
	p, sec, logs := platformWith(t, nil, stack.Options{Gateways: 2})
	gw1, gw2 := p.GatewayURLs[0], p.GatewayURLs[1]
	admin := newClient(t, gw1)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	svcID := admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "ingest-bot@example.com", "password": "a long unused password", "fullName": "Ingest bot", "edv": "SVC", "roleName": "admin",
	})["user"].(map[string]any)["id"].(string)

	// Bad input: precise 400s.
	for _, c := range []struct {
		body      map[string]any
		code, fld string
	}{
		{map[string]any{"scopes": []string{"logs:write"}}, "missing_field", "name"},
		{map[string]any{"name": "x"}, "missing_field", "scopes"},
		{map[string]any{"name": " ", "scopes": []string{"logs:write"}}, "invalid_value", "name"},
		{map[string]any{"name": "x", "scopes": []string{}}, "invalid_scopes", "scopes"},
		{map[string]any{"name": "x", "scopes": []string{"logs:admin"}}, "invalid_scopes", "scopes"},
		{map[string]any{"name": "x", "scopes": "logs:write"}, "invalid_type", "scopes"},
		{map[string]any{"name": "x", "scopes": []string{"logs:write"}, "expiresAt": "tomorrow"}, "invalid_value", "expiresAt"},
		{map[string]any{"name": "x", "scopes": []string{"logs:write"}, "expiresAt": "2001-01-01T00:00:00Z"}, "invalid_value", "expiresAt"},
	} {
		got, m, _ := admin.do("POST", "/users/"+svcID+"/api-keys", c.body)
		if got != 400 || m["code"] != c.code || m["field"] != c.fld {
			t.Fatalf("%v: %d %v, want 400 %s %s", c.body, got, m, c.code, c.fld)
		}
	}

	// An administrator's key for a service account; the secret is shown once.
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	created := admin.mustStatus(201, "POST", "/users/"+svcID+"/api-keys", map[string]any{
		"name": "ingest", "scopes": []string{"logs:write", "logs:write"}, "expiresAt": expires.Format(time.RFC3339),
	})
	secret, _ := created["secret"].(string)
	key := created["apiKey"].(map[string]any)
	if !secretForm.MatchString(secret) || key["userId"] != svcID || key["lastUsedAt"] != nil ||
		!strings.HasPrefix(secret, key["hint"].(string)) || len(key["scopes"].([]any)) != 1 {
		t.Fatalf("created: %v", created)
	}
	bearer := "Bearer " + secret

	// Used on the second gateway (which now caches it).
	wantKey(t, gw2, bearer, "POST", "/log", map[string]string{"app": "LOGGING", "type": "log", "logBody": "from a key"}, 201, "")
	wantKey(t, gw2, bearer, "POST", "/log", map[string]string{"app": "LOGGING", "type": "log", "logBody": "again"}, 201, "")
	wantKey(t, gw2, bearer, "GET", "/log/log/1", nil, 403, "insufficient_scope")
	wantKey(t, gw2, bearer, "GET", "/files", nil, 403, "insufficient_scope")
	wantKey(t, gw2, bearer, "DELETE", "/signout", nil, 403, "api_key_not_allowed")
	list := admin.mustStatus(200, "GET", "/users/"+svcID+"/api-keys", nil)["apiKeys"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["lastUsedAt"] == nil || strings.Contains(admin.mustStatus(200, "GET", "/users/"+svcID+"/api-keys", nil)["apiKeys"].([]any)[0].(map[string]any)["hint"].(string), secret) {
		t.Fatalf("listing after use: %v", list)
	}

	// Malformed and unknown keys.
	for _, h := range []string{"Basic YTpi", "Bearer", "Bearer acme_short", "Bearer " + secret[:len(secret)-1] + "!", "Bearer acme_" + strings.Repeat("A", 43)} {
		wantKey(t, gw1, h, "POST", "/log", map[string]string{"app": "LOGGING", "type": "log", "logBody": "x"}, 401, "invalid_api_key")
	}

	// Revoked through the first gateway: the second refuses it at once.
	keyID := key["id"].(string)
	admin.mustStatus(200, "DELETE", "/users/"+svcID+"/api-keys/"+keyID, nil)
	wantKey(t, gw2, bearer, "POST", "/log", map[string]string{"app": "LOGGING", "type": "log", "logBody": "revoked"}, 401, "invalid_api_key")
	admin.mustStatus(404, "DELETE", "/users/"+svcID+"/api-keys/"+keyID, nil)
	admin.mustStatus(404, "DELETE", "/users/"+svcID+"/api-keys/not-an-id", nil)

	// A live tail opened with a key ends when the key is revoked (the
	// gateway re-checks a stream's credential every few seconds).
	tailKey := admin.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "tail", "scopes": []string{"logs:read"}})
	req, _ := http.NewRequest("GET", gw2+"/log/tail", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tailKey["secret"].(string))
	resp, err := (&http.Client{Transport: checked(t, gw2, nil)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("tail with a key: %d %v", resp.StatusCode, resp.Header)
	}
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
	admin.mustStatus(200, "DELETE", "/me/api-keys/"+tailKey["apiKey"].(map[string]any)["id"].(string), nil)
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the tail of a revoked key is still open")
	}
	admin.mustStatus(404, "DELETE", "/me/api-keys/"+tailKey["apiKey"].(map[string]any)["id"].(string), nil)

	// The owner's role bounds a key: demoted, the service account's new
	// key loses the log routes at once on every gateway.
	second := admin.mustStatus(201, "POST", "/users/"+svcID+"/api-keys", map[string]any{"name": "reader", "scopes": []string{"logs:read"}})["secret"].(string)
	wantKey(t, gw2, "Bearer "+second, "GET", "/log/log/1", nil, 201, "")
	admin.mustStatus(200, "PATCH", "/users/"+svcID, map[string]any{"roleName": "user"})
	wantKey(t, gw2, "Bearer "+second, "GET", "/log/log/1", nil, 403, "forbidden")

	// A user's own key acts as the user for files: their files only.
	for _, email := range []string{"keyuser@example.com", "other@example.com"} {
		admin.mustStatus(201, "POST", "/users", map[string]any{"email": email, "password": "correct horse battery", "fullName": "K", "edv": "E"})
	}
	ku := signIn(t, gw1, "keyuser@example.com", "correct horse battery")
	mine := ku.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "backup script", "scopes": []string{"files:read", "files:write", "logs:read"}})
	kuKey := "Bearer " + mine["secret"].(string)
	up := ku.raw("POST", "/upload/file", map[string]string{"Authorization": kuKey}, strings.NewReader("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"k.txt\"\r\nContent-Type: text/plain\r\n\r\nkey upload\r\n--b--\r\n"), "multipart/form-data; boundary=b")
	if up.status != 201 {
		t.Fatalf("upload with a key: %d %s", up.status, up.body)
	}
	fileID := up.json(t)["file"].(map[string]any)["id"].(string)
	if got := wantKey(t, gw2, kuKey, "GET", "/files", nil, 200, ""); !strings.Contains(mustJSON(t, got), fileID) {
		t.Fatalf("the key's listing lacks the upload: %v", got)
	}
	wantKey(t, gw2, kuKey, "GET", "/log/log/1", nil, 403, "forbidden") // a user's role: no logs, whatever the scopes
	other := signIn(t, gw1, "other@example.com", "correct horse battery")
	otherKey := "Bearer " + other.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "o", "scopes": []string{"files:read"}})["secret"].(string)
	if got, _ := keyDo(t, gw1, otherKey, "GET", "/retrieve/file/"+fileID, nil); got != 404 {
		t.Fatalf("another user's key read the file: %d", got)
	}
	if l := ku.mustStatus(200, "GET", "/me/api-keys", nil)["apiKeys"].([]any); len(l) != 1 {
		t.Fatalf("own listing: %v", l)
	}
	// A key cannot manage keys (or anything else of the account).
	wantKey(t, gw1, kuKey, "POST", "/me/api-keys", map[string]any{"name": "x", "scopes": []string{"files:read"}}, 403, "api_key_not_allowed")
	// Deleting the user ends its keys at once.
	kuID := ku.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)["id"].(string)
	admin.mustStatus(200, "DELETE", "/users/"+kuID, nil)
	wantKey(t, gw2, kuKey, "GET", "/files", nil, 401, "invalid_api_key")

	// The audit trail has the key's life, without its secret.
	want := map[string]bool{"apikey.created": false, "apikey.first_used": false, "apikey.revoked": false}
	deadline := time.Now().Add(30 * time.Second)
	var bodies []string
	for {
		bodies = bodies[:0]
		for _, rec := range logsOf(t, admin.mustStatus(201, "GET", "/log/log/1/ACME-AUTH?limit=500", nil)) {
			b, _ := rec["logBody"].(string)
			bodies = append(bodies, b)
			var r map[string]any
			if json.Unmarshal([]byte(b), &r) == nil && r["audit"] == true {
				if d, _ := r["detail"].(map[string]any); d != nil && d["key"] == keyID {
					if _, ok := want[r["event"].(string)]; ok {
						want[r["event"].(string)] = true
					}
				}
			}
		}
		done := true
		for _, seen := range want {
			done = done && seen
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit events of the key: %v\n%s", want, strings.Join(bodies, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range []string{secret, second, mine["secret"].(string)} {
		if strings.Contains(logs.String(), s) || strings.Contains(strings.Join(bodies, "\n"), s) {
			t.Fatal("an API key secret appears in the logs or the audit trail")
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
