package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/services/logs/internal/app"
)

var defaultApps = []string{"LOGGING", "ACME-S3", "ACME-AUTH", "SERVER-APP-A", "SERVER-APP-B", "SERVER-APP-C"}

func TestHealthWithoutToken(t *testing.T) {
	v := startService(t, nil)
	for _, p := range []string{"/healthz", "/readyz"} {
		if st, body := v.do("GET", p, "", nil); st != http.StatusOK {
			t.Errorf("%s: %d %v", p, st, body)
		}
	}
}

func TestAccess(t *testing.T) {
	v := startService(t, nil)
	other := testkitIdentityToken(t, v) // signed by another key
	wrongAud := v.id.Token(t, identity.Claims{Role: identity.RoleAdmin, RegisteredClaims: jwtSubject("a")}, "files")
	cases := []struct {
		name, method, path, token string
		want                      int
		code                      string
	}{
		{"post401_noToken", "POST", "/log", "", 401, "identity_required"},
		{"get401_noToken", "GET", "/log/log/1", "", 401, "identity_required"},
		{"dead401_noToken", "GET", "/log/dead", "", 401, "identity_required"},
		{"get401_otherKey", "GET", "/log/log/1", other, 401, "identity_required"},
		{"get401_wrongAudience", "GET", "/log/log/1", wrongAud, 401, "identity_required"},
		{"post401_anonymous", "POST", "/log", v.token("", ""), 401, "unauthenticated"},
		{"get401_anonymous", "GET", "/log/log/1/LOGGING", v.token("", ""), 401, "unauthenticated"},
		{"post403_user", "POST", "/log", v.token("u1", identity.RoleUser), 403, "forbidden"},
		{"get403_user", "GET", "/log/log/1", v.token("u1", identity.RoleUser), 403, "forbidden"},
		{"getApp403_user", "GET", "/log/db/1/LOGGING", v.token("u1", identity.RoleUser), 403, "forbidden"},
		{"dead403_user", "GET", "/log/dead", v.token("u1", identity.RoleUser), 403, "forbidden"},
		{"get201_admin", "GET", "/log/log/1", v.admin(), 201, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.method == "POST" {
				body = map[string]any{"app": "LOGGING", "logBody": "x", "type": "log"}
			}
			st, got := v.do(c.method, c.path, c.token, body)
			if st != c.want {
				t.Fatalf("status %d, want %d (%v)", st, c.want, got)
			}
			if c.code != "" && got["code"] != c.code {
				t.Fatalf("code %v, want %s", got["code"], c.code)
			}
		})
	}
	if n := v.count(nil); n != 0 {
		t.Fatalf("%d records stored by refused requests", n)
	}
}

func testkitIdentityToken(t *testing.T, _ *svc) string {
	return testkit.NewIdentity(t).Token(t, identity.Claims{Role: identity.RoleAdmin, RegisteredClaims: jwtSubject("admin-1")}, "logs")
}

func TestPostLog(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_MAX_BODY": "1KiB"})
	admin := v.admin()

	t.Run("post201", func(t *testing.T) {
		st, got := v.do("POST", "/log", admin, map[string]any{"app": "ACME-AUTH", "logBody": "user signed in", "type": "log"})
		if st != 201 {
			t.Fatalf("status %d: %v", st, got)
		}
		if got["app"] != "ACME-AUTH" || got["logBody"] != "user signed in" || got["type"] != "log" || got["metricsId"] != nil {
			t.Fatalf("body %v", got)
		}
		// The four fields sent, plus the id and createdAt the issue allows.
		keys := slices.Sorted(maps.Keys(got))
		if !slices.Equal(keys, []string{"app", "createdAt", "id", "logBody", "metricsId", "type"}) {
			t.Fatalf("fields %v", keys)
		}
		if id, _ := got["id"].(string); len(id) != 24 {
			t.Fatalf("id %v", got["id"])
		}
		if ts, _ := got["createdAt"].(string); ts == "" {
			t.Fatalf("createdAt %v", got["createdAt"])
		} else if at, err := time.Parse(time.RFC3339Nano, ts); err != nil || time.Since(at) > time.Minute {
			t.Fatalf("createdAt %q: %v", ts, err)
		}
	})
	t.Run("post201_metricsId", func(t *testing.T) {
		st, got := v.do("POST", "/log", admin, map[string]any{"app": "SERVER-APP-B", "logBody": "slow query", "type": "db", "metricsId": "m-42"})
		if st != 201 || got["metricsId"] != "m-42" || got["type"] != "db" {
			t.Fatalf("status %d: %v", st, got)
		}
	})
	t.Run("post201_maxBody", func(t *testing.T) {
		st, got := v.do("POST", "/log", admin, map[string]any{"app": "LOGGING", "logBody": strings.Repeat("a", 1024), "type": "error"})
		if st != 201 {
			t.Fatalf("status %d: %v", st, got)
		}
	})

	for _, app := range []string{"NOPE", "logging", "Acme-Auth", "acme-s3", "LOGGING ", ""} {
		t.Run("post400_unknownApp_"+app, func(t *testing.T) {
			st, got := v.do("POST", "/log", admin, map[string]any{"app": app, "logBody": "x", "type": "log"})
			if st != 400 || got["code"] != "unknown_app" || got["sentAppName"] != app || got["error"] == nil {
				t.Fatalf("status %d: %v", st, got)
			}
			checkKnowApps(t, got)
		})
	}
	for _, typ := range []string{"LOG", "Error", "warn", "", " log", "db "} {
		t.Run("post400_type_"+typ, func(t *testing.T) {
			st, got := v.do("POST", "/log", admin, map[string]any{"app": "LOGGING", "logBody": "x", "type": typ})
			if st != 400 || got["field"] != "type" || got["knownTypes"] == nil {
				t.Fatalf("status %d: %v", st, got)
			}
		})
	}
	bad := []struct {
		name, body, field string
		want              int
	}{
		{"post400_emptyBody", `{"app":"LOGGING","logBody":"","type":"log"}`, "logBody", 400},
		{"post400_oversizedBody", `{"app":"LOGGING","logBody":"` + strings.Repeat("a", 1025) + `","type":"log"}`, "logBody", 400},
		{"post400_metricsIdTooLong", `{"app":"LOGGING","logBody":"x","type":"log","metricsId":"` + strings.Repeat("m", 257) + `"}`, "metricsId", 400},
		{"post400_appNumber", `{"app":1,"logBody":"x","type":"log"}`, "app", 400},
		{"post400_logBodyBool", `{"app":"LOGGING","logBody":true,"type":"log"}`, "logBody", 400},
		{"post400_logBodyObject", `{"app":"LOGGING","logBody":{"a":1},"type":"log"}`, "logBody", 400},
		{"post400_typeArray", `{"app":"LOGGING","logBody":"x","type":["log"]}`, "type", 400},
		{"post400_metricsIdNumber", `{"app":"LOGGING","logBody":"x","type":"log","metricsId":7}`, "metricsId", 400},
		{"post400_missingApp", `{"logBody":"x","type":"log"}`, "app", 400},
		{"post400_nullType", `{"app":"LOGGING","logBody":"x","type":null}`, "type", 400},
		{"post400_missingLogBody", `{"app":"LOGGING","type":"log"}`, "logBody", 400},
		{"post400_unknownField", `{"app":"LOGGING","logBody":"x","type":"log","level":3}`, "level", 400},
		{"post400_notObject", `["LOGGING"]`, "", 400},
		{"post400_malformed", `{"app":"LOGGING",`, "", 400},
		{"post400_empty", ``, "", 400},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			st, got := v.do("POST", "/log", admin, c.body)
			if st != c.want {
				t.Fatalf("status %d, want %d: %v", st, c.want, got)
			}
			if got["code"] == nil {
				t.Fatalf("no code: %v", got)
			}
			if c.field != "" && got["field"] != c.field {
				t.Fatalf("field %v, want %s: %v", got["field"], c.field, got)
			}
		})
	}
	t.Run("post413_requestTooLarge", func(t *testing.T) {
		r := testkit.RawRequest(t, v.base, "POST", "/log", map[string]string{identity.Header: admin},
			`{"app":"LOGGING","type":"log","logBody":"`+strings.Repeat("a", 200<<10)+`"}`)
		if r.Status != 413 || !strings.Contains(string(r.Body), `"code"`) {
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
	})
	t.Run("post415_contentType", func(t *testing.T) {
		apptest.NewClient(t, v.base).With(identity.Header, admin).
			Do("POST", "/log", `{"app":"LOGGING","logBody":"x","type":"log"}`, map[string]string{"Content-Type": "text/plain"}).
			Expect(t, 415)
	})
	if n := v.count(nil); n != 3 {
		t.Fatalf("%d records stored, want 3", n)
	}
}

func checkKnowApps(t *testing.T, got map[string]any) {
	t.Helper()
	apps, ok := got["knowApps"].([]any)
	if !ok || len(apps) != len(defaultApps) {
		t.Fatalf("knowApps %v", got["knowApps"])
	}
	for i, a := range apps {
		m, _ := a.(map[string]any)
		if m["name"] != defaultApps[i] {
			t.Fatalf("knowApps[%d] = %v, want name %s", i, a, defaultApps[i])
		}
		if id, _ := m["id"].(string); id == "" {
			t.Fatalf("knowApps[%d] has no id: %v", i, a)
		}
	}
}

func TestListLogs(t *testing.T) {
	v := startService(t, nil)
	admin := v.admin()
	post := func(app, typ, body, metricsID string) map[string]any {
		t.Helper()
		req := map[string]any{"app": app, "logBody": body, "type": typ}
		if metricsID != "" {
			req["metricsId"] = metricsID
		}
		st, got := v.do("POST", "/log", admin, req)
		if st != 201 {
			t.Fatalf("seed: %d %v", st, got)
		}
		time.Sleep(2 * time.Millisecond) // distinct createdAt
		return got
	}
	var authErrors []map[string]any
	for i := range 7 {
		authErrors = append(authErrors, post("ACME-AUTH", "error", fmt.Sprint("auth error ", i), ""))
		post("ACME-S3", "error", fmt.Sprint("s3 error ", i), "")
	}
	mid := time.Now().UTC()
	time.Sleep(5 * time.Millisecond)
	post("ACME-S3", "log", "s3 log", "m-1")
	post("SERVER-APP-A", "db", "db 1", "m-1")
	last := post("ACME-AUTH", "error", "auth error last", "m-2")
	authErrors = append(authErrors, last)

	get := func(path string) (int, map[string]any) { t.Helper(); return v.do("GET", path, admin, nil) }

	t.Run("list201_typeNewestFirst", func(t *testing.T) {
		st, got := get("/log/error/1")
		if st != 201 {
			t.Fatalf("status %d %v", st, got)
		}
		ls := logsOf(t, got)
		if len(ls) != 15 {
			t.Fatalf("%d logs, want 15", len(ls))
		}
		if ls[0]["logBody"] != "auth error last" || ls[0]["id"] != last["id"] {
			t.Fatalf("first is %v", ls[0])
		}
		for i := 1; i < len(ls); i++ {
			a, _ := time.Parse(time.RFC3339Nano, ls[i-1]["createdAt"].(string))
			b, _ := time.Parse(time.RFC3339Nano, ls[i]["createdAt"].(string))
			if a.Before(b) {
				t.Fatalf("not newest first at %d", i)
			}
		}
		for _, l := range ls {
			for _, k := range []string{"id", "logBody", "createdAt", "type", "metricsId", "appId"} {
				if _, ok := l[k]; !ok {
					t.Fatalf("record lacks %s: %v", k, l)
				}
			}
			if l["type"] != "error" {
				t.Fatalf("wrong type: %v", l)
			}
		}
		if ls[0]["metricsId"] != "m-2" || ls[1]["metricsId"] != nil {
			t.Fatalf("metricsId: %v / %v", ls[0]["metricsId"], ls[1]["metricsId"])
		}
		if id, _ := ls[0]["appId"].(string); len(id) != 24 || ls[0]["app"] != "ACME-AUTH" {
			t.Fatalf("app: %v", ls[0])
		}
	})
	t.Run("list201_byAppPaged", func(t *testing.T) {
		var seen []string
		for page := 1; page <= 3; page++ {
			st, got := get(fmt.Sprintf("/log/error/%d/ACME-AUTH?limit=3", page))
			if st != 201 {
				t.Fatalf("status %d %v", st, got)
			}
			for _, l := range logsOf(t, got) {
				if l["app"] != "ACME-AUTH" {
					t.Fatalf("other app: %v", l)
				}
				seen = append(seen, l["id"].(string))
			}
		}
		if len(seen) != len(authErrors) {
			t.Fatalf("%d records over pages, want %d", len(seen), len(authErrors))
		}
		for i, id := range seen {
			if want := authErrors[len(authErrors)-1-i]["id"]; id != want {
				t.Fatalf("page order: %d is %s, want %s", i, id, want)
			}
		}
	})
	t.Run("list201_pageBeyondEnd", func(t *testing.T) {
		st, got := get("/log/error/99")
		if st != 201 || len(logsOf(t, got)) != 0 {
			t.Fatalf("status %d %v", st, got)
		}
	})
	t.Run("list201_otherTypeAndApp", func(t *testing.T) {
		st, got := get("/log/db/1/SERVER-APP-A")
		if ls := logsOf(t, got); st != 201 || len(ls) != 1 || ls[0]["logBody"] != "db 1" {
			t.Fatalf("status %d %v", st, got)
		}
		st, got = get("/log/db/1/SERVER-APP-C")
		if st != 201 || len(logsOf(t, got)) != 0 {
			t.Fatalf("status %d %v", st, got)
		}
	})
	t.Run("list201_metricsId", func(t *testing.T) {
		st, got := get("/log/error/1?metricsId=m-2")
		if ls := logsOf(t, got); st != 201 || len(ls) != 1 || ls[0]["id"] != last["id"] {
			t.Fatalf("status %d %v", st, got)
		}
	})
	t.Run("list201_timeRange", func(t *testing.T) {
		st, got := get("/log/error/1?from=" + url.QueryEscape(mid.Format(time.RFC3339Nano)))
		if ls := logsOf(t, got); st != 201 || len(ls) != 1 || ls[0]["id"] != last["id"] {
			t.Fatalf("from: status %d %v", st, got)
		}
		st, got = get("/log/error/1/ACME-AUTH?to=" + url.QueryEscape(mid.Format(time.RFC3339Nano)))
		if ls := logsOf(t, got); st != 201 || len(ls) != 7 {
			t.Fatalf("to: status %d, %d logs", st, len(ls))
		}
	})
	t.Run("list201_cursor", func(t *testing.T) {
		cursor := authErrors[4]["id"].(string)
		st, got := get("/log/error/1/ACME-AUTH?limit=2&before=" + cursor)
		ls := logsOf(t, got)
		if st != 201 || len(ls) != 2 || ls[0]["id"] != authErrors[3]["id"] || ls[1]["id"] != authErrors[2]["id"] {
			t.Fatalf("status %d %v", st, got)
		}
		// New records do not shift a cursor page.
		post("ACME-AUTH", "error", "newer", "")
		_, again := get("/log/error/1/ACME-AUTH?limit=2&before=" + cursor)
		if ls2 := logsOf(t, again); ls2[0]["id"] != ls[0]["id"] || ls2[1]["id"] != ls[1]["id"] {
			t.Fatalf("cursor page moved: %v", again)
		}
	})

	for _, typ := range []string{"LOG", "Error", "warn", "info", "dead", "%20log"} {
		t.Run("list400_type_"+typ, func(t *testing.T) {
			st, got := get("/log/" + typ + "/1")
			if st != 400 || got["code"] != "invalid_type" || got["field"] != "type" {
				t.Fatalf("status %d %v", st, got)
			}
			known, _ := got["knownTypes"].([]any)
			if len(known) != 3 || known[0] != "log" || known[1] != "error" || known[2] != "db" {
				t.Fatalf("knownTypes %v", got["knownTypes"])
			}
		})
	}
	for _, page := range []string{"0", "-1", "1.5", "abc", "1e3", "+1", "0x10", "1000000000000000000000000000000", "100001", "%201"} {
		t.Run("list400_page_"+page, func(t *testing.T) {
			for _, p := range []string{"/log/log/" + page, "/log/log/" + page + "/LOGGING"} {
				st, got := get(p)
				if st != 400 || got["field"] != "page" {
					t.Fatalf("%s: status %d %v", p, st, got)
				}
			}
		})
	}
	for _, app := range []string{"NOPE", "logging", "Acme-Auth", "acme-s3", "SERVER-APP-D", "LOGGING%20"} {
		t.Run("list404_app_"+app, func(t *testing.T) {
			st, got := get("/log/log/1/" + app)
			if st != 404 || got["code"] != "unknown_app" || got["error"] == nil {
				t.Fatalf("status %d %v", st, got)
			}
			if got["sentAppName"] != app {
				t.Fatalf("sentAppName %v, want %s", got["sentAppName"], app)
			}
			checkKnowApps(t, got)
		})
	}
	queries := []struct{ name, q, field string }{
		{"list400_limit0", "limit=0", "limit"},
		{"list400_limit501", "limit=501", "limit"},
		{"list400_limitAbc", "limit=abc", "limit"},
		{"list400_from", "from=yesterday", "from"},
		{"list400_to", "to=2024-13-01T00:00:00Z", "to"},
		{"list400_range", "from=2024-02-01T00:00:00Z&to=2024-01-01T00:00:00Z", "to"},
		{"list400_before", "before=nothex", "before"},
		{"list400_metricsId", "metricsId=" + strings.Repeat("m", 257), "metricsId"},
	}
	for _, c := range queries {
		t.Run(c.name, func(t *testing.T) {
			st, got := get("/log/log/1?" + c.q)
			if st != 400 || got["field"] != c.field {
				t.Fatalf("status %d %v", st, got)
			}
		})
	}
	t.Run("list404_cursorUnknown", func(t *testing.T) {
		st, got := get("/log/log/1?before=0123456789abcdef01234567")
		if st != 404 || got["code"] != "cursor_not_found" {
			t.Fatalf("status %d %v", st, got)
		}
	})
	t.Run("list201_limit500", func(t *testing.T) {
		if st, got := get("/log/log/1?limit=500"); st != 201 {
			t.Fatalf("status %d %v", st, got)
		}
	})
}

// Apps come from configuration: another org word changes the names.
func TestAppsFromConfig(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_ORG": "OTHER"})
	st, got := v.do("GET", "/log/log/1/ACME-S3", v.admin(), nil)
	if st != 404 {
		t.Fatalf("status %d %v", st, got)
	}
	apps := got["knowApps"].([]any)
	if len(apps) != 6 || apps[1].(map[string]any)["name"] != "OTHER-S3" {
		t.Fatalf("knowApps %v", apps)
	}
	if st, got := v.do("GET", "/log/log/1/OTHER-AUTH", v.admin(), nil); st != 201 {
		t.Fatalf("status %d %v", st, got)
	}
	w := startService(t, map[string]string{"LOGS_APPS": "ONE, TWO"})
	st, got = w.do("POST", "/log", w.admin(), map[string]any{"app": "LOGGING", "logBody": "x", "type": "log"})
	if st != 400 || len(got["knowApps"].([]any)) != 2 {
		t.Fatalf("status %d %v", st, got)
	}
}

// LOGS_READ_TIMEOUT bounds how long a request may take to arrive: a client
// that sends half its headers and stalls is cut off after it, and a normal
// request on another connection is served meanwhile. A timeout that is not
// positive is refused at start-up.
func TestReadTimeout(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_READ_TIMEOUT": "500ms"})
	u, err := url.Parse(v.base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	if st, _ := v.do("GET", "/healthz", "", nil); st != 200 {
		t.Fatalf("healthz beside the stalled client: %d", st)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(conn) // whatever the server says, it must close
	if err != nil {
		t.Fatalf("stalled connection not closed by the server: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stalled connection closed after %v, want about 500ms", d)
	}

	_, env, _ := newEnv(t, map[string]string{"LOGS_READ_TIMEOUT": "0s"})
	if err := app.Run(context.Background(), env.Getenv, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "LOGS_READ_TIMEOUT") {
		t.Fatalf("LOGS_READ_TIMEOUT=0s: %v", err)
	}
}

// A filtered listing that looked at as many chunks as LOGS_FILTER_SCAN
// allows says where to read on (Logs-Resume-Before); following it lists
// every match once, newest first, and the last page has no such header.
func TestFilteredListingResumes(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_FILTER_SCAN": "1"})
	admin := v.admin()
	var want []string
	for i := range 9 {
		body := map[string]any{"app": "ACME-AUTH", "type": "error", "logBody": fmt.Sprint("error ", i)}
		if i%3 == 0 {
			body["metricsId"] = "req-7"
			want = append([]string{fmt.Sprint("error ", i)}, want...)
		}
		if st, got := v.do("POST", "/log", admin, body); st != 201 {
			t.Fatalf("post %d: %d %v", i, st, got)
		}
	}
	var got []string
	path, resumes := "/log/error/1/ACME-AUTH?metricsId=req-7", 0
	for {
		r := testkit.RawRequest(t, v.base, "GET", path, map[string]string{identity.Header: admin}, "")
		if r.Status != 201 {
			t.Fatalf("%s: %d %s", path, r.Status, r.Body)
		}
		var page struct {
			Logs []struct {
				LogBody string `json:"logBody"`
			} `json:"logs"`
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatalf("%s: %v: %s", path, err, r.Body)
		}
		for _, l := range page.Logs {
			got = append(got, l.LogBody)
		}
		next := r.Header.Get("Logs-Resume-Before")
		if next == "" {
			break
		}
		if resumes++; resumes > 20 {
			t.Fatal("the listing does not end")
		}
		path = "/log/error/1/ACME-AUTH?metricsId=req-7&before=" + next
	}
	if resumes == 0 || !slices.Equal(got, want) {
		t.Fatalf("after %d resumes: %q, want %q", resumes, got, want)
	}
}
