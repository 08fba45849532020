package e2e

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/scripts/stack"
	"github.com/nats-io/nats.go"
)

// restartLogs starts a new logs process in place of the platform's (same
// address, servers, secrets and environment) and stops it when the test ends.
func restartLogs(t *testing.T, p *stack.Platform, sec stack.Secrets, out io.Writer) *stack.Proc {
	t.Helper()
	v, ok := launched.Load(p)
	if !ok {
		t.Fatal("platform not launched by platform()")
	}
	l := v.(launch)
	s := l.servers
	env := []string{
		"MONGO_URL=" + s.MongoURL, "MONGO_DB=" + s.MongoDB,
		"NATS_URL=" + s.NATSURL, "NATS_SUBJECT_PREFIX=" + s.SubjectPrefix,
		"IDENTITY_PUBLIC_KEY=" + sec.IdentityPublicPEM, "SERVICE_CREDENTIAL=" + sec.ServiceCredential,
	}
	for k, v := range l.env {
		env = append(env, k+"="+v)
	}
	old := p.Procs["logs"]
	env = append(env, "LOGS_ADDR="+old.Addr)
	proc, err := stack.Start("logs", bins["logs"], old.Addr, env, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(10 * time.Second) })
	return proc
}

// listAll reads every record of path (a GET /log/... listing with its
// query, ?limit=500 included) through the gateway, cursor page after cursor
// page (stable while records arrive), and returns how many it listed,
// failing the test if one id comes twice.
func listAll(t *testing.T, c *client, path string) int {
	t.Helper()
	return countAll(t, func(u string) map[string]any { return c.mustStatus(201, "GET", u, nil) }, path)
}

// logsOf is the "logs" array of a listing.
func logsOf(t *testing.T, body map[string]any) []map[string]any {
	t.Helper()
	return apptest.Objects(t, body, "logs")
}

// Logs through the gateway: admin writes and reads, access for users and
// anonymous callers, bad input, a record published over NATS with
// pkg/logclient, and the logs process killed mid-stream: after a restart
// every published record is stored exactly once.
func TestLogsThroughGateway(t *testing.T) {
	p, sec, out := platform(t, map[string]string{"LOGS_ACK_WAIT": "2s"})
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "ada@example.com", "password": "correct horse battery", "fullName": "Ada", "edv": "E-1"})
	ada := signIn(t, gw, "ada@example.com", "correct horse battery")
	anon := newClient(t, gw)

	// POST /log: 201 with the same four fields.
	first := map[string]any{"app": "SERVER-APP-A", "type": "error", "logBody": "disk almost full", "metricsId": "m-1"}
	got := admin.mustStatus(201, "POST", "/log", first)
	for k, v := range first {
		if got[k] != v {
			t.Fatalf("POST /log answer %v, want the sent %s=%v", got, k, v)
		}
	}
	second := map[string]any{"app": "SERVER-APP-A", "type": "error", "logBody": "disk full"}
	got2 := admin.mustStatus(201, "POST", "/log", second)
	if got2["metricsId"] != nil || got2["logBody"] != "disk full" {
		t.Fatalf("POST /log without metricsId: %v", got2)
	}
	admin.mustStatus(201, "POST", "/log", map[string]any{"app": "SERVER-APP-B", "type": "error", "logBody": "other app"})

	// Newest first, on both routes.
	for _, path := range []string{"/log/error/1", "/log/error/1/SERVER-APP-A"} {
		ls := logsOf(t, admin.mustStatus(201, "GET", path, nil))
		var bodies []any
		for _, l := range ls {
			if l["app"] == "SERVER-APP-A" {
				bodies = append(bodies, l["logBody"])
			}
		}
		if len(bodies) != 2 || bodies[0] != "disk full" || bodies[1] != "disk almost full" {
			t.Fatalf("GET %s: %v", path, ls)
		}
		if ls[len(ls)-1]["id"] == nil || ls[len(ls)-1]["createdAt"] == nil || ls[len(ls)-1]["appId"] == nil {
			t.Fatalf("GET %s: record fields %v", path, ls[len(ls)-1])
		}
	}
	if ls := logsOf(t, admin.mustStatus(201, "GET", "/log/error/1/SERVER-APP-B", nil)); len(ls) != 1 || ls[0]["logBody"] != "other app" {
		t.Fatalf("GET /log/error/1/SERVER-APP-B: %v", ls)
	}

	// Access.
	ada.mustStatus(403, "POST", "/log", first)
	ada.mustStatus(403, "GET", "/log/error/1", nil)
	ada.mustStatus(403, "GET", "/log/error/1/SERVER-APP-A", nil)
	for _, c := range []struct{ method, path string }{{"POST", "/log"}, {"GET", "/log/error/1"}, {"GET", "/log/error/1/SERVER-APP-A"}} {
		var body any
		if c.method == "POST" {
			body = first
		}
		if m := anon.mustStatus(401, c.method, c.path, body); m["code"] == nil {
			t.Fatalf("anonymous %s %s: %v", c.method, c.path, m)
		}
	}

	// Bad input.
	nf := admin.mustStatus(404, "GET", "/log/error/1/NO-SUCH-APP", nil)
	if apps, _ := nf["knowApps"].([]any); nf["error"] == nil || nf["sentAppName"] != "NO-SUCH-APP" || len(apps) != 6 {
		t.Fatalf("unknown app: %v", nf)
	}
	admin.mustStatus(404, "GET", "/log/error/1/server-app-a", nil)
	for _, path := range []string{"/log/warning/1", "/log/ERROR/1", "/log/error/0", "/log/error/-1", "/log/error/1.5", "/log/error/abc",
		"/log/error/" + url.PathEscape("1000000000000000000000000000000")} {
		admin.mustStatus(400, "GET", path, nil)
	}
	admin.mustStatus(400, "POST", "/log", map[string]any{"app": "NO-SUCH-APP", "type": "error", "logBody": "x"})
	admin.mustStatus(400, "POST", "/log", map[string]any{"app": "SERVER-APP-A", "type": "warning", "logBody": "x"})

	// The query parameters beyond the spec: limit, the before cursor,
	// metricsId and a time range.
	newest := logsOf(t, admin.mustStatus(201, "GET", "/log/error/1/SERVER-APP-A?limit=1", nil))
	if len(newest) != 1 || newest[0]["logBody"] != "disk full" {
		t.Fatalf("limit=1: %v", newest)
	}
	older := logsOf(t, admin.mustStatus(201, "GET", "/log/error/1/SERVER-APP-A?limit=1&before="+newest[0]["id"].(string), nil))
	if len(older) != 1 || older[0]["logBody"] != "disk almost full" {
		t.Fatalf("before cursor: %v", older)
	}
	if ls := logsOf(t, admin.mustStatus(201, "GET", "/log/error/1?metricsId=m-1", nil)); len(ls) != 1 || ls[0]["metricsId"] != "m-1" {
		t.Fatalf("metricsId filter: %v", ls)
	}
	window := url.Values{"from": {time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}, "to": {time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}}
	if ls := logsOf(t, admin.mustStatus(201, "GET", "/log/error/1?"+window.Encode(), nil)); len(ls) != 3 {
		t.Fatalf("from/to: %d records, want 3", len(ls))
	}
	admin.mustStatus(400, "GET", "/log/error/1?before=not-an-id", nil)
	admin.mustStatus(404, "GET", "/log/error/1?before=000000000000000000000000", nil)

	// Over NATS with pkg/logclient: queryable through the gateway within seconds.
	s := testkit.Get(t)
	lv, _ := launched.Load(p)
	servers := lv.(launch).servers
	nc, err := nats.Connect(s.NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lc, err := logclient.New(nc, logclient.Options{Prefix: servers.SubjectPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	if !lc.Log("SERVER-APP-B", logclient.TypeLog, "published over NATS", "nats-1") {
		t.Fatal("logclient refused the record")
	}
	apptest.Eventually(t, 10*time.Second, func() error {
		ls := logsOf(t, admin.mustStatus(201, "GET", "/log/log/1/SERVER-APP-B", nil))
		if len(ls) != 1 || ls[0]["logBody"] != "published over NATS" || ls[0]["metricsId"] != "nats-1" {
			return fmt.Errorf("NATS record not queryable: %v", ls)
		}
		return nil
	})

	// A poison message (unknown app on the subject) is dead-lettered and
	// listed by GET /log/dead.
	poison := nats.NewMsg(servers.SubjectPrefix + ".logs.NO-SUCH-APP.error")
	poison.Header.Set("Nats-Msg-Id", "poison-1")
	poison.Data = []byte(`{"logBody":"never stored"}`)
	if err := nc.PublishMsg(poison); err != nil {
		t.Fatal(err)
	}
	apptest.Eventually(t, 10*time.Second, func() error {
		dead, _ := admin.mustStatus(200, "GET", "/log/dead?page=1&limit=10", nil)["deadLetters"].([]any)
		if len(dead) != 1 || dead[0].(map[string]any)["msgId"] != "poison-1" {
			return fmt.Errorf("poison message not dead-lettered: %v", dead)
		}
		return nil
	})
	ada.mustStatus(403, "GET", "/log/dead", nil)

	// Kill the logs process (SIGKILL) while N records are being published,
	// start a new one: exactly N stored.
	const n = 2000
	byApp := "/log/db/1/SERVER-APP-C?limit=500&metricsId=kill-run"
	byType := "/log/db/1?limit=500&metricsId=kill-run"
	ctx := context.Background()
	var wg sync.WaitGroup
	var refused int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if !lc.Log("SERVER-APP-C", logclient.TypeDB, fmt.Sprintf("record %d", i), "kill-run") {
				refused++
			}
			if i%20 == 19 {
				time.Sleep(10 * time.Millisecond) // ~1 s of publishing
			}
		}
	}()
	// Under the race detector and a parallel test run the first batch can
	// take many seconds; poll gently so the polling does not slow it more.
	var stored int
	apptest.Eventually(t, 2*time.Minute, func() error {
		if stored = listAll(t, admin, byApp); stored < 100 {
			return fmt.Errorf("only %d records stored", stored)
		}
		return nil
	})
	p.Procs["logs"].Kill()
	killedAt := time.Now()
	wg.Wait()
	if refused > 0 {
		t.Fatalf("logclient refused %d records", refused)
	}
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := lc.Flush(fctx); err != nil {
		t.Fatalf("flush: %v (%+v)", err, lc.Stats())
	}
	t.Logf("killed with at least %d of %d stored; all %d published (%+v)", stored, n, n, lc.Stats())
	if stored >= n {
		t.Fatalf("the kill came after everything was stored (%d); the test proves nothing", stored)
	}
	restartLogs(t, p, sec, out)
	// Generous: under the race detector and a parallel test run the
	// redelivered batch (JetStream back-off, then its id documents read back
	// one by one) takes far longer than it does alone (about 5 s).
	apptest.Eventually(t, 6*time.Minute, func() error {
		if a, b := listAll(t, admin, byApp), listAll(t, admin, byType); a < n || b < n {
			return fmt.Errorf("%d of %d records stored after the restart (type listing %d)", a, n, b)
		}
		return nil
	})
	// Let any redelivery (AckWait 2s) of a batch written before the kill arrive.
	if d := 5*time.Second - time.Since(killedAt); d > 0 {
		time.Sleep(d)
	}
	// Exactly n, each once, in the app's chain and in the type's.
	if a, b := listAll(t, admin, byApp), listAll(t, admin, byType); a != n || b != n {

		t.Fatalf("after the restart: %d records listed for the app, %d for the type; want exactly %d", a, b, n)
	}
	// And through the gateway, served by the new process.
	if ls := logsOf(t, admin.mustStatus(201, "GET", "/log/db/1/SERVER-APP-C?limit=10", nil)); len(ls) != 10 {
		t.Fatalf("after restart, GET /log/db/1/SERVER-APP-C: %d records", len(ls))
	}
}
