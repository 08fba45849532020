package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/golang-jwt/jwt/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Who calls, in the authorization matrix.
const (
	cNone    = "none"    // through the gateway, no cookie
	cExpired = "expired" // through the gateway, a session past its expiry
	cUser    = "user"    // through the gateway, a user's session
	cAdmin   = "admin"   // through the gateway, an administrator's session
	cDirect  = "direct"  // straight to the service, no identity token
	cForged  = "forged"  // straight to the service, an admin token signed with another key
	cOtherAu = "aud"     // straight to the service, an admin token from the real key for another service
)

// API key callers, through the gateway with Authorization: Bearer: an
// administrator's key with one scope each, and a user's key with every scope.
const (
	cKeyFR   = "k:fr" // files:read
	cKeyFW   = "k:fw" // files:write
	cKeyLR   = "k:lr" // logs:read
	cKeyLW   = "k:lw" // logs:write
	cKeyUser = "k:user"
)

var keyScopes = map[string][]string{
	cKeyFR: {"files:read"}, cKeyFW: {"files:write"}, cKeyLR: {"logs:read"}, cKeyLW: {"logs:write"},
	cKeyUser: {"files:read", "files:write", "logs:read", "logs:write"},
}

var matrixCallers = []string{cNone, cExpired, cUser, cAdmin, cDirect, cForged, cOtherAu, cKeyFR, cKeyFW, cKeyLR, cKeyLW, cKeyUser}

// expectedKey is the cell of an API key caller: keys are taken on file and
// log routes only (403 elsewhere, except public routes, where the key is
// ignored), with the scope the method needs (GET and HEAD read, the rest
// write; else 403), and on administrators' routes only when the key's
// owner is one (else 403).
func expectedKey(r matrixRoute, caller string) int {
	switch r.access {
	case aPublic, aGateway:
		return r.ok
	case aService:
		return 401
	}
	if r.service != "files" && r.service != "logs" {
		return 403
	}
	scope := r.service + ":write"
	if r.method == "GET" || r.method == "HEAD" {
		scope = r.service + ":read"
	}
	if !slices.Contains(keyScopes[caller], scope) {
		return 403
	}
	if (r.access == aAdmin || r.access == aServiceOrKey) && caller == cKeyUser {
		return 403
	}
	return r.ok
}

// Access classes and what each caller gets. ok is the route's own answer
// for a caller it admits (the row says what that is).
type access int

const (
	aPublic       access = iota // anyone through the gateway (the service sees an anonymous token)
	aSession                    // a valid session (spec §5.1: cookie sessionId)
	aAdmin                      // an administrator's session (spec §5.5 for logs; /users likewise)
	aService                    // /ms/me: the service credential, never a browser
	aServiceOrKey               // POST /v1/logs: the service credential, or an administrator's API key with logs:write
	aGateway                    // the gateway's own endpoints (health, API document)
)

// expected derives a cell from the access class: no or expired session on
// a protected route is 401, a user on an admin route 403, and any call that
// bypasses the gateway (no token, forged token, another service's token)
// 401, whatever the route. 0 means the cell does not apply.
func expected(a access, ok int, caller string) int {
	switch caller {
	case cDirect, cForged, cOtherAu:
		if a == aGateway {
			return 0 // not served by a service
		}
		return 401
	}
	switch a {
	case aPublic, aGateway:
		return ok
	case aService, aServiceOrKey:
		return 401 // no service credential from a browser
	case aSession:
		if caller == cUser || caller == cAdmin {
			return ok
		}
		return 401
	case aAdmin:
		switch caller {
		case cAdmin:
			return ok
		case cUser:
			return 403
		}
		return 401
	}
	panic("unknown access")
}

type matrixRoute struct {
	method, path, service string
	access                access
	ok                    int                     // status for an admitted caller with this request
	body                  func() (string, []byte) // content type and body, or nil
}

func jsonBody(s string) func() (string, []byte) {
	return func() (string, []byte) { return "application/json", []byte(s) }
}

func formBody(field, name string, data []byte) func() (string, []byte) {
	return func() (string, []byte) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		w, _ := mw.CreateFormFile(field, name)
		w.Write(data)
		mw.Close()
		return mw.FormDataContentType(), b.Bytes()
	}
}

// TestAuthorizationMatrix calls every route of the public API (the OpenAPI
// document's list; the test fails if the document has one the table lacks)
// as each kind of caller, against the real platform, and compares every
// status with the one derived from the route's access class.
func TestAuthorizationMatrix(t *testing.T) {
	p, sec, _ := platform(t, nil)
	ctx := context.Background()
	unknown := strings.Repeat("0", 32)
	png := testPNG(t, 4, 4)
	matrixUser := map[string]string{"email": "matrix@example.com", "password": "matrix user password"}
	routes := []matrixRoute{
		{"POST", "/signin", "auth", aPublic, 200, jsonBody(`{"email":"matrix@example.com","password":"matrix user password"}`)},
		{"GET", "/me", "auth", aSession, 200, nil},
		{"PATCH", "/me", "auth", aSession, 400, jsonBody(`{}`)}, // admitted, then refused as an empty patch
		{"GET", "/ms/me", "auth", aService, 0, jsonBody(`{"sessionId":"x"}`)},
		{"GET", "/me/sessions", "auth", aSession, 200, nil},
		{"DELETE", "/me/sessions", "auth", aSession, 200, nil},
		{"DELETE", "/me/sessions/" + unknown, "auth", aSession, 404, nil},
		{"POST", "/password/forgot", "auth", aPublic, 503, jsonBody(`{"email":"m@example.com"}`)}, // no mail on this platform
		{"POST", "/password/reset", "auth", aPublic, 503, jsonBody(`{"token":"x","password":"matrix password"}`)},
		{"POST", "/email/verify", "auth", aPublic, 503, jsonBody(`{"token":"x"}`)},
		{"POST", "/email/change/confirm", "auth", aPublic, 503, jsonBody(`{"token":"x"}`)},
		{"POST", "/me/email/verification", "auth", aSession, 503, nil},
		{"GET", "/me/api-keys", "auth", aSession, 200, nil},
		{"POST", "/me/api-keys", "auth", aSession, 400, jsonBody(`{}`)},
		{"DELETE", "/me/api-keys/" + unknown, "auth", aSession, 404, nil},
		{"POST", "/signin/mfa", "auth", aPublic, 401, jsonBody(`{"challenge":"x","code":"123456"}`)}, // unknown challenge
		{"GET", "/me/mfa", "auth", aSession, 200, nil},
		{"POST", "/me/mfa/totp", "auth", aSession, 200, nil},
		{"POST", "/me/mfa/totp/confirm", "auth", aSession, 400, jsonBody(`{}`)},
		{"POST", "/me/mfa/totp/disable", "auth", aSession, 400, jsonBody(`{}`)},
		{"DELETE", "/users/" + unknown + "/mfa", "auth", aAdmin, 404, nil},
		{"POST", "/signin/passkey/begin", "auth", aPublic, 200, nil},
		// Mailed codes: no mail on this platform (the settings say off).
		{"GET", "/signin/email", "auth", aPublic, 200, nil},
		{"POST", "/signin/email", "auth", aPublic, 503, jsonBody(`{"email":"m@example.com"}`)},
		{"POST", "/signin/email/verify", "auth", aPublic, 503, jsonBody(`{"email":"m@example.com","code":"123456"}`)},
		{"POST", "/me/password/code", "auth", aSession, 503, nil},
		{"POST", "/me/password", "auth", aSession, 503, jsonBody(`{"code":"123456","password":"matrix password 2"}`)},
		{"POST", "/signin/passkey/finish", "auth", aPublic, 400, jsonBody(`{"ceremony":"x","credential":{}}`)}, // unknown ceremony
		{"GET", "/me/passkeys", "auth", aSession, 200, nil},
		{"POST", "/me/passkeys/begin", "auth", aSession, 200, nil},
		{"POST", "/me/passkeys/finish", "auth", aSession, 400, jsonBody(`{}`)},
		{"DELETE", "/me/passkeys/" + unknown, "auth", aSession, 404, nil},
		{"GET", "/users/" + unknown + "/api-keys", "auth", aAdmin, 404, nil},
		{"POST", "/users/" + unknown + "/api-keys", "auth", aAdmin, 400, jsonBody(`{}`)},
		{"DELETE", "/users/" + unknown + "/api-keys/" + unknown, "auth", aAdmin, 404, nil},
		{"POST", "/users", "auth", aAdmin, 400, jsonBody(`{}`)},
		{"GET", "/users", "auth", aAdmin, 200, nil},
		{"GET", "/users/" + unknown, "auth", aAdmin, 404, nil},
		{"PATCH", "/users/" + unknown, "auth", aAdmin, 404, jsonBody(`{"fullName":"X"}`)},
		{"DELETE", "/users/" + unknown, "auth", aAdmin, 404, nil},
		// Identity providers: none is configured on this platform.
		{"GET", "/signin/oidc", "auth", aPublic, 200, nil},
		{"GET", "/signin/oidc/nosuch", "auth", aPublic, 302, nil},          // back to the console with error=unknown_provider
		{"GET", "/signin/oidc/nosuch/callback", "auth", aPublic, 302, nil}, // likewise
		{"GET", "/me/identities", "auth", aSession, 200, nil},
		{"POST", "/me/identities/nosuch/link", "auth", aSession, 404, nil},
		{"DELETE", "/me/identities/" + unknown, "auth", aSession, 404, nil},
		{"GET", "/users/" + unknown + "/identities", "auth", aAdmin, 404, nil},
		{"POST", "/users/" + unknown + "/identities", "auth", aAdmin, 400, jsonBody(`{}`)},
		{"DELETE", "/users/" + unknown + "/identities/" + unknown, "auth", aAdmin, 404, nil},
		{"POST", "/upload/file", "files", aSession, 201, formBody("file", "m.txt", []byte("matrix"))},
		{"POST", "/upload/image", "files", aSession, 201, formBody("file", "m.png", png)},
		{"GET", "/retrieve/file/" + unknown, "files", aSession, 404, nil},
		{"GET", "/download/file/" + unknown, "files", aSession, 404, nil},
		{"HEAD", "/download/file/" + unknown, "files", aSession, 404, nil},
		{"GET", "/images/" + unknown, "files", aPublic, 404, nil},
		{"HEAD", "/images/" + unknown, "files", aPublic, 404, nil},
		{"GET", "/files", "files", aSession, 200, nil},
		{"DELETE", "/files/" + unknown, "files", aSession, 404, nil},
		{"POST", "/files/" + unknown + "/links", "files", aSession, 404, nil},
		{"GET", "/files/" + unknown + "/links", "files", aSession, 404, nil},
		{"DELETE", "/files/" + unknown + "/links/" + unknown, "files", aSession, 404, nil},
		{"GET", "/s/" + strings.Repeat("A", 43), "files", aPublic, 404, nil},
		{"HEAD", "/s/" + strings.Repeat("A", 43), "files", aPublic, 404, nil},
		// tus, without its headers: POST answers 412 (no Tus-Resumable), an unknown upload 404.
		{"POST", "/uploads/", "files", aSession, 412, nil},
		{"HEAD", "/uploads/" + unknown + "+x", "files", aSession, 404, nil},
		{"PATCH", "/uploads/" + unknown + "+x", "files", aSession, 404, nil},
		{"DELETE", "/uploads/" + unknown + "+x", "files", aSession, 404, nil},
		{"GET", "/me/usage", "files", aSession, 200, nil},
		{"GET", "/usage/" + strings.Repeat("0", 24), "files", aAdmin, 200, nil},
		{"PUT", "/usage/" + strings.Repeat("0", 24), "files", aAdmin, 200, jsonBody(`{"quota":null}`)},
		{"POST", "/log", "logs", aAdmin, 201, jsonBody(`{"app":"LOGGING","type":"log","logBody":"matrix"}`)},
		{"GET", "/log/dead", "logs", aAdmin, 200, nil},
		{"GET", "/log/apps", "logs", aAdmin, 200, nil},
		{"GET", "/log/export", "logs", aAdmin, 200, nil},
		{"GET", "/log/stats", "logs", aAdmin, 200, nil},
		{"POST", "/v1/logs", "logs", aServiceOrKey, 200, jsonBody(`{"resourceLogs":[]}`)},
		{"GET", "/log/tail", "logs", aAdmin, 200, nil}, // a stream: its status and headers are read, then it is closed
		{"GET", "/log/error/1", "logs", aAdmin, 201, nil},
		{"GET", "/log/error/1/LOGGING", "logs", aAdmin, 201, nil},
		{"GET", "/healthz", "", aGateway, 200, nil},
		{"GET", "/readyz", "", aGateway, 200, nil},
		{"GET", "/openapi.yaml", "", aGateway, 200, nil},
		{"GET", "/openapi.json", "", aGateway, 200, nil},
		// Last: it ends the user's and the admin's sessions.
		{"DELETE", "/signout", "auth", aSession, 200, nil},
	}
	checkRoutesCoverOpenAPI(t, routes)

	// Callers: the admin, a user, and a user whose session has expired.
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	for _, email := range []string{"matrix@example.com", "expired@example.com"} {
		admin.mustStatus(201, "POST", "/users", map[string]any{"email": email, "password": matrixUser["password"], "fullName": "M", "edv": "E"})
	}
	user := signIn(t, p.GatewayURL, "matrix@example.com", matrixUser["password"])
	expired := signIn(t, p.GatewayURL, "expired@example.com", matrixUser["password"])
	expireSession(ctx, t, p, expired.cookie())
	cookies := map[string]string{cUser: user.cookie(), cAdmin: admin.cookie(), cExpired: expired.cookie()}
	keys := map[string]string{}
	for caller, scopes := range keyScopes {
		if caller == cKeyUser {
			continue
		}
		keys[caller] = admin.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": caller, "scopes": scopes})["secret"].(string)
	}
	userID := user.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)["id"].(string)
	// Without mail the sign-in page offers no mailed code.
	if s := user.mustStatus(200, "GET", "/signin/email", nil); s["enabled"] != false || s["signUp"] != false {
		t.Fatalf("GET /signin/email without mail: %v", s)
	}
	keys[cKeyUser] = admin.mustStatus(201, "POST", "/users/"+userID+"/api-keys", map[string]any{"name": "user key", "scopes": keyScopes[cKeyUser]})["secret"].(string)

	// Tokens for the direct calls: admin claims, signed with a stranger's
	// key (forged) or with the gateway's key for another audience.
	_, strangerKey, _ := identity.GenerateKey()
	gatewayKey, err := identity.ParsePrivateKey(sec.IdentityPrivatePEM)
	if err != nil {
		t.Fatal(err)
	}
	adminClaims := identity.Claims{Role: identity.RoleAdmin, SessionID: unknown, RegisteredClaims: jwt.RegisteredClaims{Subject: "000000000000000000000001"}}
	otherAudience := map[string]string{"auth": "files", "files": "logs", "logs": "auth"}

	// Redirects are answers here (a provider sign-in sends the browser on).
	hc := &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var failures []string
	var table strings.Builder
	fmt.Fprintf(&table, "%-7s %-26s  %s\n", "", "", strings.Join(matrixCallers, "  "))
	for _, r := range routes {
		fmt.Fprintf(&table, "%-7s %-26s", r.method, strings.ReplaceAll(r.path, unknown, "{id}"))
		for _, caller := range matrixCallers {
			want := expected(r.access, r.ok, caller)
			if keys[caller] != "" {
				want = expectedKey(r, caller)
			}
			if want == 0 {
				fmt.Fprintf(&table, " %*s", len(caller)+1, "-")
				continue
			}
			base := p.GatewayURL
			if caller == cDirect || caller == cForged || caller == cOtherAu {
				base = "http://" + p.Procs[r.service].Addr
				if strings.HasPrefix(r.path, "/uploads/") {
					base = p.TusURLs[0] // the files service's tus listener
				}
			}
			var body io.Reader
			ct := ""
			if r.body != nil {
				var b []byte
				ct, b = r.body()
				body = bytes.NewReader(b)
			}
			req, _ := http.NewRequest(r.method, base+r.path, body)
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			if c := cookies[caller]; c != "" {
				req.AddCookie(&http.Cookie{Name: "sessionId", Value: c})
			}
			if k := keys[caller]; k != "" {
				req.Header.Set("Authorization", "Bearer "+k)
			}
			switch caller {
			case cForged:
				tok, _ := identity.NewSigner(strangerKey, time.Minute).Sign(adminClaims, r.service)
				req.Header.Set(identity.Header, tok)
			case cOtherAu:
				tok, _ := identity.NewSigner(gatewayKey, time.Minute).Sign(adminClaims, otherAudience[r.service])
				req.Header.Set(identity.Header, tok)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("%s %s as %s: %v", r.method, r.path, caller, err)
			}
			var raw []byte
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				raw, _ = io.ReadAll(resp.Body)
			}
			resp.Body.Close()
			mark := ""
			if resp.StatusCode != want {
				mark = "!"
				failures = append(failures, fmt.Sprintf("%s %s as %s: %d, want %d: %.200s", r.method, r.path, caller, resp.StatusCode, want, raw))
			} else if want >= 400 && r.method != "HEAD" && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				mark = "?"
				failures = append(failures, fmt.Sprintf("%s %s as %s: %d without a JSON body", r.method, r.path, caller, resp.StatusCode))
			}
			fmt.Fprintf(&table, " %*s", len(caller)+1, fmt.Sprint(resp.StatusCode)+mark)
		}
		table.WriteString("\n")
	}
	t.Logf("authorization matrix (status per caller; ! = differs from the expected):\n%s", table.String())
	for _, f := range failures {
		t.Error(f)
	}
}

// expireSession moves a session's expiry into the past in the database, as
// time would.
func expireSession(ctx context.Context, t *testing.T, p interface{}, cookie string) {
	t.Helper()
	sum := sha256.Sum256([]byte(cookie))
	res, err := platformDB(t, p).Collection("sessions").UpdateOne(ctx,
		bson.M{"_id": hex.EncodeToString(sum[:])}, bson.M{"$set": bson.M{"expiresAt": time.Now().Add(-time.Minute).UTC()}})
	if err != nil || res.MatchedCount != 1 {
		t.Fatalf("expiring the session: %v (matched %v)", err, res)
	}
}

// checkRoutesCoverOpenAPI fails when the API document has an operation the
// matrix does not call.
func checkRoutesCoverOpenAPI(t *testing.T, routes []matrixRoute) {
	t.Helper()
	doc, router, err := loadAPI()
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, r := range routes {
		req, _ := http.NewRequest(r.method, "http://gw.test"+r.path, nil)
		route, _, err := router.FindRoute(req)
		if err != nil {
			t.Fatalf("%s %s is not in the API document: %v", r.method, r.path, err)
		}
		covered[r.method+" "+route.Path] = true
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !covered[method+" "+path] {
				t.Errorf("the matrix does not call %s %s", method, path)
			}
		}
	}
}
