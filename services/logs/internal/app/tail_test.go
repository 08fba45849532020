package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/testkit/apptest"
)

// sseEvent is one server-sent event.
type sseEvent struct{ event, id, data string }

// openTail opens GET /log/tail and returns its events as they come.
func (v *svc) openTail(query, token string) (*http.Response, <-chan sseEvent) {
	v.t.Helper()
	req, _ := http.NewRequest("GET", v.base+"/log/tail"+query, nil)
	req.Header.Set(identity.Header, token)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		v.t.Fatal(err)
	}
	ch := make(chan sseEvent, 64)
	if res.StatusCode != http.StatusOK {
		close(ch)
		return res, ch
	}
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(res.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" || ev.data != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	}()
	return res, ch
}

func next(t *testing.T, ch <-chan sseEvent, within time.Duration, skip func(sseEvent) bool) sseEvent {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("stream ended")
			}
			if skip != nil && skip(ev) {
				continue
			}
			return ev
		case <-deadline:
			t.Fatalf("no event within %v", within)
		}
	}
}

func TestTailAccessAndInput(t *testing.T) {
	v := startService(t, nil)
	cases := []struct {
		name, query, token string
		want               int
		code               string
	}{
		{"tail401_noToken", "", "", 401, "identity_required"},
		{"tail401_anonymous", "", v.token("", ""), 401, "unauthenticated"},
		{"tail403_user", "", v.token("u1", identity.RoleUser), 403, "forbidden"},
		{"tail400_type", "?type=warn", v.admin(), 400, "invalid_type"},
		{"tail400_app", "?app=NOPE", v.admin(), 400, "unknown_app"},
		{"tail400_appCase", "?app=logging", v.admin(), 400, "unknown_app"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, body := v.do("GET", "/log/tail"+c.query, c.token, nil)
			if st != c.want || body["code"] != c.code {
				t.Fatalf("got %d %v, want %d %s", st, body, c.want, c.code)
			}
		})
	}
}

func TestListApps(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_APPS": "LOGGING,ACME-S3,SERVER-X"})
	if st, body := v.do("GET", "/log/apps", v.token("u1", identity.RoleUser), nil); st != 403 {
		t.Fatalf("user: %d %v", st, body)
	}
	st, body := v.do("GET", "/log/apps", v.admin(), nil)
	if st != 200 {
		t.Fatalf("%d %v", st, body)
	}
	var names []string
	for _, a := range body["apps"].([]any) {
		m := a.(map[string]any)
		if m["id"] == "" {
			t.Errorf("app without id: %v", m)
		}
		names = append(names, m["name"].(string))
	}
	if strings.Join(names, ",") != "LOGGING,ACME-S3,SERVER-X" {
		t.Fatalf("apps %v", names)
	}
}

func TestTailStreamsNewRecords(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_TAIL_HEARTBEAT": "200ms"})
	stream := strings.ToUpper(v.prefix()) + "_LOGS"
	consumers := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := v.s.JS.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	base := consumers()
	// HEAD answers the headers and opens nothing.
	head, _ := http.NewRequest("HEAD", v.base+"/log/tail", nil)
	head.Header.Set(identity.Header, v.admin())
	if res, err := http.DefaultClient.Do(head); err != nil || res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("HEAD: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	if got := consumers(); got != base {
		t.Fatalf("HEAD opened a consumer (%d, want %d)", got, base)
	}

	// A record published before the tail opened is not replayed.
	v.publish(logclient.Subject(v.prefix(), "ACME-AUTH", "error"), "before-1", payload("ACME-AUTH", "error", "old news"))

	res, all := v.openTail("", v.admin())
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	if ev := next(t, all, 5*time.Second, nil); ev.event != "ready" {
		t.Fatalf("first event %+v, want ready", ev)
	}
	res2, errorsOfAuth := v.openTail("?type=error&app=ACME-AUTH", v.admin())
	defer res2.Body.Close()
	next(t, errorsOfAuth, 5*time.Second, nil) // ready

	keepAlive := func(ev sseEvent) bool { return ev.event == "" }
	sent := time.Now()
	v.publish(logclient.Subject(v.prefix(), "SERVER-APP-A", "log"), "tail-1", payload("SERVER-APP-A", "log", "hello tail"))
	ev := next(t, all, time.Second, keepAlive)
	if ev.event != "log" || ev.id != v.recordID("tail-1") {
		t.Fatalf("event %+v, want log with id %s", ev, v.recordID("tail-1"))
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(ev.data), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["logBody"] != "hello tail" || rec["app"] != "SERVER-APP-A" || rec["type"] != "log" || rec["id"] != ev.id {
		t.Fatalf("record %v", rec)
	}
	t.Logf("published → event in %v", time.Since(sent))

	// The filtered tail skipped that one and gets the matching one; a
	// poison message (wrong payload) is skipped by both.
	v.publish(logclient.Subject(v.prefix(), "ACME-AUTH", "error"), "tail-poison", []byte(`{"nope":1}`))
	v.publish(logclient.Subject(v.prefix(), "ACME-AUTH", "error"), "tail-2", payload("ACME-AUTH", "error", "auth broke"))
	if ev := next(t, errorsOfAuth, 2*time.Second, keepAlive); ev.id != v.recordID("tail-2") {
		t.Fatalf("filtered tail got %+v, want tail-2", ev)
	}
	if ev := next(t, all, 2*time.Second, keepAlive); ev.id != v.recordID("tail-2") {
		t.Fatalf("tail got %+v, want tail-2 (not the poison message)", ev)
	}

	// The stored record has the id the tail announced.
	apptest.Until(t, 10*time.Second, "tail-1 stored", func() bool { return v.count(v.byMsgID("tail-1")) == 1 })

	// Clients going away end their subscriptions: the server side notices
	// at the next heartbeat and the ephemeral consumers go.
	if got := consumers(); got != base+2 {
		t.Fatalf("%d consumers with two tails open, want %d", got, base+2)
	}
	res.Body.Close()
	res2.Body.Close()
	apptest.Until(t, 20*time.Second, "tail consumers removed", func() bool { return consumers() == base })
}

func TestTailEndsOnShutdown(t *testing.T) {
	v := startService(t, nil) // heartbeat 15s: only the shutdown can end it in time
	res, ch := v.openTail("", v.admin())
	defer res.Body.Close()
	next(t, ch, 5*time.Second, nil)
	start := time.Now()
	v.stop()
	for range ch {
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("shutdown with an open tail took %v", d)
	}
}

// One user's live tails are bounded below the replica's: with every
// session and API key of the user counted together, the user's extra
// tails get 429 too_many_tails with Retry-After (the heartbeat), another
// administrator still gets a stream, and a slot comes back once a stream
// ends (its viewer left: noticed at the next heartbeat).
func TestTailPerUserBound(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_TAIL_HEARTBEAT": "1s", "LOGS_TAIL_MAX_PER_USER": "3", "LOGS_TAIL_MAX_OPEN": "4"})
	session := func(sid string) string {
		return v.id.Token(t, identity.Claims{Role: identity.RoleAdmin, SessionID: sid, RegisteredClaims: jwtSubject("admin-1")}, "logs")
	}
	// Three tails of admin-1: two browser sessions and a key (no session).
	var open []*http.Response
	for _, tok := range []string{session("s1"), session("s2"), v.admin()} {
		res, ch := v.openTail("", tok)
		if res.StatusCode != 200 {
			t.Fatalf("tail %d of the user: %d", len(open)+1, res.StatusCode)
		}
		next(t, ch, 5*time.Second, nil) // ready
		open = append(open, res)
	}
	defer func() {
		for _, res := range open {
			res.Body.Close()
		}
	}()

	// refused opens a tail that must be refused, and returns the answer.
	refused := func(tok string) (status int, code, retryAfter string) {
		t.Helper()
		res, _ := v.openTail("", tok)
		defer res.Body.Close()
		if res.StatusCode == 200 {
			open = append(open, res)
			t.Fatal("a tail over the bound was opened")
		}
		var body map[string]any
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		code, _ = body["code"].(string)
		return res.StatusCode, code, res.Header.Get("Retry-After")
	}

	// A fourth, from any of the user's credentials: 429.
	for _, tok := range []string{session("s3"), v.admin()} {
		if st, code, retry := refused(tok); st != 429 || code != "too_many_tails" || retry != "1" {
			t.Fatalf("tail 4 of the user: %d %s Retry-After %q, want 429 too_many_tails 1", st, code, retry)
		}
	}

	// Another administrator takes the replica's last slot; after that the
	// replica is full: 503 busy for a third administrator.
	res, ch := v.openTail("", v.token("admin-2", identity.RoleAdmin))
	if res.StatusCode != 200 {
		t.Fatalf("another administrator: %d, want 200", res.StatusCode)
	}
	next(t, ch, 5*time.Second, nil)
	open = append(open, res)
	if st, code, _ := refused(v.token("admin-3", identity.RoleAdmin)); st != 503 || code != "busy" {
		t.Fatalf("a full replica: %d %s, want 503 busy", st, code)
	}

	// The user closes one tab: within a heartbeat or two the slot is theirs again.
	open[0].Body.Close()
	apptest.Until(t, 10*time.Second, "the closed tail's slot given back", func() bool {
		res, ch := v.openTail("", v.admin())
		if res.StatusCode != 200 {
			res.Body.Close()
			return false
		}
		next(t, ch, 5*time.Second, nil)
		open = append(open, res)
		return true
	})
}
