package e2e

// The multi-replica stack test (issue 5, "the same topology, tested here"):
// two gateways and two replicas of each service, as separate processes,
// against the test kit's real servers; the topology `docker compose up
// --scale auth=2 --scale files=2 --scale logs=2` runs, with a second
// gateway. Where a check needs to know which replica served a request, the
// test calls that replica directly with an identity token signed by the
// platform's own key, exactly as a gateway signs one.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/scripts/stack"
	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// direct calls one service process, bypassing the gateways, with a token
// for claims.
type direct struct {
	t      *testing.T
	proc   *stack.Proc
	aud    string
	signer *identity.Signer
	claims identity.Claims
}

func directTo(t *testing.T, sec stack.Secrets, proc *stack.Proc, aud string, claims identity.Claims) direct {
	t.Helper()
	key, err := identity.ParsePrivateKey(sec.IdentityPrivatePEM)
	if err != nil {
		t.Fatal(err)
	}
	return direct{t: t, proc: proc, aud: aud, signer: identity.NewSigner(key, 30*time.Second), claims: claims}
}

func (d direct) do(method, path string, body io.Reader, contentType string) rawResp {
	d.t.Helper()
	tok, err := d.signer.Sign(d.claims, d.aud)
	if err != nil {
		d.t.Fatal(err)
	}
	c := apptest.NewClient(d.t, "http://"+d.proc.Addr).With(identity.Header, tok)
	c.HTTP = &http.Client{Timeout: time.Minute}
	r, err := c.Send(method, path, body, map[string]string{"Content-Type": contentType})
	if err != nil {
		d.t.Fatalf("%s %s on %s: %v", method, path, d.proc.Name, err)
	}
	return rawResp{r.Status, r.Header, r.Body}
}

func (d direct) json(method, path string, body any) (int, map[string]any) {
	d.t.Helper()
	var r io.Reader
	ct := ""
	if body != nil {
		b, _ := json.Marshal(body)
		r, ct = bytes.NewReader(b), "application/json"
	}
	resp := d.do(method, path, r, ct)
	var m map[string]any
	_ = json.Unmarshal(resp.body, &m)
	return resp.status, m
}

// countAll lists every record of path (a GET /log/... listing with
// ?limit=500) by cursor through get, failing on an id listed twice.
func countAll(t *testing.T, get func(path string) map[string]any, path string) int {
	t.Helper()
	seen := map[string]bool{}
	cursor := ""
	for {
		u := path
		if cursor != "" {
			u += "&before=" + cursor
		}
		ls := logsOf(t, get(u))
		for _, r := range ls {
			id, _ := r["id"].(string)
			if seen[id] {
				t.Fatalf("%s: record %s listed twice", path, id)
			}
			seen[id] = true
			cursor = id
		}
		if len(ls) < 500 {
			return len(seen)
		}
	}
}

// viaReplica lists through one logs process directly.
func viaReplica(d direct) func(string) map[string]any {
	return func(path string) map[string]any {
		status, m := d.json("GET", path, nil)
		if status != 201 {
			d.t.Fatalf("GET %s on %s: %d %v", path, d.proc.Name, status, m)
		}
		return m
	}
}

// viaGateway lists through a gateway.
func viaGateway(c *client) func(string) map[string]any {
	return func(path string) map[string]any { return c.mustStatus(201, "GET", path, nil) }
}

// linesOf returns the output lines of one process (prefixed by its label).
func linesOf(out, label string) []string {
	prefix := fmt.Sprintf("%-8s| ", label)
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			ls = append(ls, strings.TrimPrefix(l, prefix))
		}
	}
	return ls
}

// errorLines are the error-level log lines of one process.
func errorLines(out, label string) []string {
	var errs []string
	for _, l := range linesOf(out, label) {
		if strings.Contains(l, `"level":"ERROR"`) {
			errs = append(errs, l)
		}
	}
	return errs
}

// metric reads one series (its name and labels as /metrics writes them)
// from a /metrics URL; ok is false when it is not there.
func metric(t *testing.T, url, series string) (v float64, ok bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatalf("%s %s: %v", series, m[1], err)
	}
	return f, true
}

// logsMetric reads one of a logs replica's own metrics (<ns>_logs_<name>).
func logsMetric(t *testing.T, proc *stack.Proc, name string) int {
	t.Helper()
	v, ok := metric(t, "http://"+proc.Addr+"/metrics", metrics.Namespace+"_logs_"+name)
	if !ok {
		t.Fatalf("%s: no logs_%s in /metrics", proc.Name, name)
	}
	return int(v)
}

// ingested reads a logs replica's ingested-records counter.
func ingested(t *testing.T, proc *stack.Proc) int { return logsMetric(t, proc, "ingested_total") }

func newLogClient(t *testing.T, prefix string) *logclient.Client {
	t.Helper()
	nc, err := nats.Connect(testkit.Get(t).NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	lc, err := logclient.New(nc, logclient.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close(context.Background()); nc.Close() })
	return lc
}

func servicesOf(t *testing.T, p *stack.Platform) stack.Servers {
	t.Helper()
	v, ok := launched.Load(p)
	if !ok {
		t.Fatal("platform not launched by platformWith()")
	}
	return v.(launch).servers
}

// TestStack runs two gateways and two replicas of auth, files and logs.
func TestStack(t *testing.T) {
	start := time.Now()
	// A short ack wait, so the killed replica's unacknowledged batch is
	// redelivered soon; longer under the race detector, where a batch write
	// can take seconds and would be redelivered (with a doubling back-off)
	// while still being written.
	ackWait := 2 * time.Second
	if raceBuilt() {
		ackWait = 8 * time.Second
	}
	p, sec, out := platformWith(t, map[string]string{"LOGS_ACK_WAIT": ackWait.String(), "LOGS_METRICS_INTERVAL": "250ms"},
		stack.Options{Gateways: 2, Replicas: 2})
	t.Logf("platform of %d processes started in %s", len(p.Replicas["auth"])+len(p.Replicas["files"])+len(p.Replicas["logs"])+len(p.Replicas["gateway"]), time.Since(start).Round(time.Millisecond))
	for _, name := range stack.Services {
		if len(p.Replicas[name]) != 2 {
			t.Fatalf("%s: %d processes, want 2", name, len(p.Replicas[name]))
		}
	}
	gwA, gwB := p.GatewayURLs[0], p.GatewayURLs[1]
	servers := servicesOf(t, p)

	// Bootstrap: both auth replicas (and both logs replicas) started at the
	// same moment on an empty database. One administrator, six App records,
	// no error logged by any of them.
	t.Run("bootstrap", func(t *testing.T) {
		mc, err := mongo.Connect(options.Client().ApplyURI(servers.MongoURL))
		if err != nil {
			t.Fatal(err)
		}
		defer mc.Disconnect(context.Background())
		db := mc.Database(servers.MongoDB)
		ctx := context.Background()
		if n, err := db.Collection("users").CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
			t.Fatalf("users after two auth replicas started together: %d (%v), want 1", n, err)
		}
		testkit.AllowScan(servers.MongoDB, "users", "{roleName: string}") // the test's own count
		if n, err := db.Collection("users").CountDocuments(ctx, bson.D{{Key: "roleName", Value: "admin"}}); err != nil || n != 1 {
			t.Fatalf("administrators: %d (%v), want 1", n, err)
		}
		if n, err := db.Collection("log_apps").CountDocuments(ctx, bson.D{}); err != nil || n != 6 {
			t.Fatalf("App records after two logs replicas started together: %d (%v), want 6", n, err)
		}
		for _, proc := range p.Replicas["logs"] {
			admin := directTo(t, sec, proc, "logs", identity.Claims{Role: identity.RoleAdmin, RegisteredClaims: subjectClaims("bootstrap-check")})
			if status, m := admin.json("GET", "/log/error/1/NO-SUCH-APP", nil); status != 404 || len(m["knowApps"].([]any)) != 6 {
				t.Fatalf("%s: unknown app: %d %v", proc.Name, status, m)
			}
		}
		for _, label := range []string{"auth-1", "auth-2", "logs-1", "logs-2", "files-1", "files-2", "gateway-1", "gateway-2"} {
			if len(linesOf(out.String(), label)) == 0 {
				t.Fatalf("no output from %s", label)
			}
			if errs := errorLines(out.String(), label); len(errs) > 0 {
				t.Fatalf("%s logged errors at start-up:\n%s", label, strings.Join(errs, "\n"))
			}
		}
	})

	admin := signIn(t, gwA, sec.AdminEmail, sec.AdminPassword)
	const users = 4
	for i := range users {
		admin.mustStatus(201, "POST", "/users", map[string]any{"email": fmt.Sprintf("user%d@example.com", i),
			"password": "correct horse battery", "fullName": fmt.Sprintf("User %d", i), "edv": fmt.Sprintf("E-%d", i)})
	}
	// withCookie is a client of gateway base carrying the session cookie.
	withCookie := func(base, cookie string) *client {
		c := newClient(t, base)
		u, _ := http.NewRequest("GET", base, nil)
		c.http.Jar.SetCookies(u.URL, []*http.Cookie{{Name: "sessionId", Value: cookie}})
		return c
	}

	// A session created through one gateway works through the other, in
	// both directions.
	t.Run("session across gateways", func(t *testing.T) {
		for i := range users {
			from, to := gwA, gwB
			if i%2 == 1 {
				from, to = gwB, gwA
			}
			c := signIn(t, from, fmt.Sprintf("user%d@example.com", i), "correct horse battery")
			mine := c.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)
			other := withCookie(to, c.cookie()).mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)
			if other["id"] != mine["id"] || other["email"] != fmt.Sprintf("user%d@example.com", i) {
				t.Fatalf("session %d: /me through the other gateway: %v, want %v", i, other, mine)
			}
		}
	})

	// GET /me is answered by the gateway from its session entry (and auth
	// reads users through its own cache): a change made through one gateway
	// and one auth replica shows on the very next GET /me through the other
	// gateway, which had just cached the old answer. No sleep anywhere.
	t.Run("user changes seen at once through the other gateway", func(t *testing.T) {
		for i := range 20 {
			from, to := gwA, gwB
			if i%2 == 1 {
				from, to = gwB, gwA
			}
			c := signIn(t, from, "user1@example.com", "correct horse battery")
			there := withCookie(to, c.cookie())
			for range 3 {
				there.mustStatus(200, "GET", "/me", nil)
			}
			name := fmt.Sprintf("User One, edit %d", i)
			c.mustStatus(200, "PATCH", "/me", map[string]any{"fullName": name})
			if got := there.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)["fullName"]; got != name {
				t.Fatalf("round %d: fullName through the other gateway right after the edit: %v, want %q", i, got, name)
			}
		}
		// An administrator's change of role, through the other gateway.
		c := signIn(t, gwA, "user2@example.com", "correct horse battery")
		there := withCookie(gwB, c.cookie())
		me := there.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)
		id, _ := me["id"].(string)
		if me["roleName"] != "user" {
			t.Fatalf("before: %v", me)
		}
		admin.mustStatus(200, "PATCH", "/users/"+id, map[string]any{"roleName": "admin"})
		if got := there.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)["roleName"]; got != "admin" {
			t.Fatalf("role through the other gateway right after the change: %v", got)
		}
		admin.mustStatus(200, "PATCH", "/users/"+id, map[string]any{"roleName": "user"})
		if got := c.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)["roleName"]; got != "user" {
			t.Fatalf("role back: %v", got)
		}
	})

	// Signing out through one gateway is refused by the other on the very
	// next request, although that gateway has just used (and cached) the
	// session. No sleep anywhere: "at once".
	t.Run("sign-out refused at once by the other gateway", func(t *testing.T) {
		// Sessions first (sign-ins hash passwords: slow), alternating the
		// gateway they are created through.
		const rounds = 60
		cookies := make([]string, rounds)
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Go(func() {
				for i := w; i < rounds; i += 6 {
					cookies[i] = signIn(t, []string{gwA, gwB}[i%2], fmt.Sprintf("user%d@example.com", i%users), "correct horse battery").cookie()
				}
			})
		}
		wg.Wait()
		// The sign-out and the request right after it go over plain
		// keep-alive connections (no checking in between), so the next
		// request reaches the other gateway as soon as it can.
		plain := &http.Client{Timeout: 30 * time.Second}
		send := func(method, base, cookie string) (int, string) {
			req, _ := http.NewRequest(method, base+"/me", nil)
			if method == "DELETE" {
				req, _ = http.NewRequest(method, base+"/signout", nil)
			}
			req.AddCookie(&http.Cookie{Name: "sessionId", Value: cookie})
			resp, err := plain.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var m map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&m)
			code, _ := m["code"].(string)
			return resp.StatusCode, code
		}
		for i, cookie := range cookies {
			from, to := gwA, gwB
			if i%2 == 1 {
				from, to = gwB, gwA
			}
			for range 3 { // cached on the other gateway
				if status, _ := send("GET", to, cookie); status != 200 {
					t.Fatalf("round %d: GET /me through the other gateway before sign-out: %d", i, status)
				}
			}
			if status, _ := send("DELETE", from, cookie); status != 200 {
				t.Fatalf("round %d: sign-out: %d", i, status)
			}
			if status, code := send("GET", to, cookie); status != 401 || code != "invalid_session" {
				t.Fatalf("round %d: GET /me through the other gateway right after sign-out: %d %s, want 401 invalid_session", i, status, code)
			}
			if status, _ := send("GET", from, cookie); status != 401 {
				t.Fatalf("round %d: GET /me through the same gateway after sign-out: %d", i, status)
			}
		}
		// A password change ends the user's other sessions everywhere, at once.
		ada := signIn(t, gwA, "user0@example.com", "correct horse battery")
		phone := signIn(t, gwB, "user0@example.com", "correct horse battery")
		phone.mustStatus(200, "GET", "/me", nil)
		ada.mustStatus(200, "PATCH", "/me", map[string]any{"password": map[string]string{"old": "correct horse battery", "new": "new secret phrase"}})
		phone.mustStatus(401, "GET", "/me", nil)
		withCookie(gwB, ada.cookie()).mustStatus(200, "GET", "/me", nil)
		ada.mustStatus(200, "PATCH", "/me", map[string]any{"password": map[string]string{"old": "new secret phrase", "new": "correct horse battery"}})
	})

	// A file uploaded through one files replica downloads through the other.
	t.Run("files across replicas", func(t *testing.T) {
		c := signIn(t, gwA, "user1@example.com", "correct horse battery")
		me := c.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)
		claims := identity.Claims{Role: identity.RoleUser, RegisteredClaims: subjectClaims(me["id"].(string))}
		f1 := directTo(t, sec, p.Replicas["files"][0], "files", claims)
		f2 := directTo(t, sec, p.Replicas["files"][1], "files", claims)
		data := bytes.Repeat([]byte("replicated bytes \x00\x01\x02 "), 40000) // ~800 KB
		for i, way := range []struct{ up, down direct }{{f1, f2}, {f2, f1}} {
			body, ct := multipartBody(part{field: "file", filename: fmt.Sprintf("r%d.bin", i), data: bytes.NewReader(data)})
			up := way.up.do("POST", "/upload/file", body, ct)
			if up.status != 201 {
				t.Fatalf("upload on %s: %d %s", way.up.proc.Name, up.status, up.body)
			}
			id, _ := up.json(t)["file"].(map[string]any)["id"].(string)
			down := way.down.do("GET", "/download/file/"+id, nil, "")
			if down.status != 200 || !bytes.Equal(down.body, data) {
				t.Fatalf("uploaded on %s, downloaded on %s: %d, %d bytes (want %d)", way.up.proc.Name, way.down.proc.Name, down.status, len(down.body), len(data))
			}
			if status, m := way.down.json("GET", "/retrieve/file/"+id, nil); status != 200 || m["file"].(map[string]any)["size"] != float64(len(data)) {
				t.Fatalf("retrieve on %s: %d %v", way.down.proc.Name, status, m)
			}
			// And through the gateway that did not take part.
			if d := withCookie(gwB, c.cookie()).raw("GET", "/download/file/"+id, nil, nil, ""); d.status != 200 || !bytes.Equal(d.body, data) {
				t.Fatalf("download through gateway B: %d, %d bytes", d.status, len(d.body))
			}
		}
		// Through the gateways: several uploads via A (round-robin over both
		// replicas), each downloaded via B from both.
		for i := range 4 {
			r := c.upload("/upload/file", part{field: "file", filename: fmt.Sprintf("g%d.bin", i), data: bytes.NewReader(data[:1000*(i+1)])})
			if r.status != 201 {
				t.Fatalf("upload via A: %d %s", r.status, r.body)
			}
			id := r.json(t)["file"].(map[string]any)["id"].(string)
			for range 2 {
				if d := withCookie(gwB, c.cookie()).raw("GET", "/download/file/"+id, nil, nil, ""); d.status != 200 || !bytes.Equal(d.body, data[:1000*(i+1)]) {
					t.Fatalf("download via B: %d", d.status)
				}
			}
		}
	})

	// Sign-in throttling is shared by the auth replicas.
	t.Run("throttling across auth replicas", func(t *testing.T) {
		for i, email := range []string{"thr1@example.com", "thr2@example.com"} {
			admin.mustStatus(201, "POST", "/users", map[string]any{"email": email, "password": "correct horse battery", "fullName": "T", "edv": fmt.Sprintf("T-%d", i)})
		}
		anon := func(proc *stack.Proc, ip string) direct {
			return directTo(t, sec, proc, "auth", identity.Claims{ClientIP: ip})
		}
		a1, a2 := anon(p.Replicas["auth"][0], "198.51.100.1"), anon(p.Replicas["auth"][1], "198.51.100.1")
		wrong := map[string]string{"email": "thr1@example.com", "password": "wrong password!"}
		right := map[string]string{"email": "thr1@example.com", "password": "correct horse battery"}
		// Five failures (AUTH_THROTTLE_ACCOUNT_MAX), alternating replicas,
		// one after the other: the counts add up exactly on any store.
		for i := range 5 {
			r := []direct{a1, a2}[i%2]
			if status, m := r.json("POST", "/signin", wrong); status != 401 || m["code"] != "invalid_credentials" {
				t.Fatalf("failure %d on %s: %d %v", i+1, r.proc.Name, status, m)
			}
		}
		for _, r := range []direct{a2, a1} {
			if status, m := r.json("POST", "/signin", right); status != 429 || m["code"] != "throttled" {
				t.Fatalf("right password on %s after 5 failures spread over both replicas: %d %v, want 429", r.proc.Name, status, m)
			}
		}
		for _, gw := range []string{gwA, gwB} {
			if status, m, _ := newClient(t, gw).do("POST", "/signin", right); status != 429 {
				t.Fatalf("through %s: %d %v, want 429", gw, status, m)
			}
		}
		// Failures at the same moment on both replicas: each attempt is
		// admitted by inserting a slot with a unique _id, on any store, so
		// every answer is 401 or 429, never an error, at most
		// AUTH_THROTTLE_ACCOUNT_MAX of them are 401, and once locked both
		// replicas refuse the account.
		b1, b2 := anon(p.Replicas["auth"][0], "198.51.100.2"), anon(p.Replicas["auth"][1], "198.51.100.2")
		wrong2 := map[string]string{"email": "thr2@example.com", "password": "wrong password!"}
		var wg sync.WaitGroup
		statuses := make([]int, 8)
		for i := range statuses {
			wg.Go(func() { statuses[i], _ = []direct{b1, b2}[i%2].json("POST", "/signin", wrong2) })
		}
		wg.Wait()
		tried := 0
		for i, s := range statuses {
			if s != 401 && s != 429 {
				t.Fatalf("concurrent failure %d: %d", i, s)
			}
			if s == 401 {
				tried++
			}
		}
		if tried > 5 {
			t.Fatalf("8 concurrent failures over two replicas: %d tried (401), want at most 5: %v", tried, statuses)
		}
		locked := false
		for i := range 6 {
			status, _ := []direct{b1, b2}[i%2].json("POST", "/signin", wrong2)
			if status == 429 {
				locked = true
				break
			}
			if status != 401 {
				t.Fatalf("failure after the burst: %d", status)
			}
		}
		if !locked {
			t.Fatalf("8 concurrent and 5 sequential failures did not lock the account (burst answers %v)", statuses)
		}
		for _, r := range []direct{b1, b2} {
			if status, _ := r.json("POST", "/signin", map[string]string{"email": "thr2@example.com", "password": "correct horse battery"}); status != 429 {
				t.Fatalf("locked account on %s: %d, want 429", r.proc.Name, status)
			}
		}
		t.Logf("concurrent failures answered %v", statuses)
	})

	// Logs published on NATS while one of the two logs replicas is killed
	// (SIGKILL): the other takes over (the killed one's unacknowledged batch
	// is redelivered to it), every record is stored once; after the killed
	// replica is back, both serve exactly the same set.
	t.Run("logs with a replica killed", func(t *testing.T) {
		const n, firstPart = 600, 200
		lc := newLogClient(t, servers.SubjectPrefix)
		byApp := "/log/db/1/SERVER-APP-C?limit=500&metricsId=stack-kill"
		byType := "/log/db/1?limit=500&metricsId=stack-kill"
		l1, l2 := p.Replicas["logs"][0], p.Replicas["logs"][1]
		adminClaims := identity.Claims{Role: identity.RoleAdmin, RegisteredClaims: subjectClaims("stack-admin")}
		d2 := directTo(t, sec, l2, "logs", adminClaims)
		before1, before2 := ingested(t, l1), ingested(t, l2)
		// Published at a steady pace; if the kill has not come by record
		// firstPart (a slow machine), publishing waits for it, so records are
		// published before and after the kill in any case.
		resume := make(chan struct{})
		var refused int
		var published atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		wg.Go(func() {
			for i := range n {
				if i == firstPart {
					<-resume
				}
				if !lc.Log("SERVER-APP-C", logclient.TypeDB, fmt.Sprintf("record %d", i), "stack-kill") {
					refused++
				}
				published.Add(1)
				if i%10 == 9 {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
		// Both replicas take part (one durable consumer, shared), then kill one
		// while it is consuming.
		deadline := time.Now().Add(2 * time.Minute)
		for ingested(t, l1) == before1 || ingested(t, l2) == before2 {
			if time.Now().After(deadline) {
				close(resume)
				t.Fatalf("both replicas did not ingest within 2 min: %d, %d", ingested(t, l1)-before1, ingested(t, l2)-before2)
			}
			time.Sleep(100 * time.Millisecond)
		}
		l1.Kill()
		killedAt := time.Now()
		atKill := published.Load()
		close(resume)
		stored := countAll(t, viaReplica(d2), byApp)
		wg.Wait()
		if refused > 0 {
			t.Fatalf("logclient refused %d records", refused)
		}
		fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := lc.Flush(fctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		t.Logf("logs-1 killed %s after the first record, with %d of %d published (%d stored just after)",
			killedAt.Sub(t0).Round(time.Millisecond), atKill, n, stored)
		if atKill >= n {
			t.Fatal("everything was published before the kill; the check proves nothing")
		}
		// The survivor stores everything. Wait on its consumer metrics (no
		// load on the database: under the race detector a listing costs the
		// in-process FerretDB seconds, and polling hard slows the ingestion
		// it waits for), then count.
		flushed := time.Now()
		deadline = time.Now().Add(4 * time.Minute)
		for time.Since(flushed) < 2*time.Second || logsMetric(t, l2, "consumer_pending") > 0 || logsMetric(t, l2, "consumer_ack_pending") > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("consumer not drained 4 min after the kill: %d pending, %d ack pending", logsMetric(t, l2, "consumer_pending"), logsMetric(t, l2, "consumer_ack_pending"))
			}
			time.Sleep(250 * time.Millisecond)
		}
		for countAll(t, viaReplica(d2), byApp) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d stored by the surviving replica after 4 min", countAll(t, viaReplica(d2), byApp), n)
			}
			time.Sleep(time.Second)
		}
		t.Logf("all %d stored by logs-2 %s after the kill (its duplicates counter: %d)", n,
			time.Since(killedAt).Round(time.Millisecond), logsMetric(t, l2, "duplicates_total"))
		// Let any redelivery of the killed replica's batch arrive.
		if d := ackWait + 3*time.Second - time.Since(killedAt); d > 0 {
			time.Sleep(d)
		}
		if a, b := countAll(t, viaReplica(d2), byApp), countAll(t, viaReplica(d2), byType); a != n || b != n {
			t.Fatalf("with logs-1 dead: %d listed for the app, %d for the type; want exactly %d", a, b, n)
		}
		// The killed replica comes back; both replicas and both gateways
		// list the same exact set.
		l1, err := p.Restart(l1)
		if err != nil {
			t.Fatal(err)
		}
		d1 := directTo(t, sec, l1, "logs", adminClaims)
		time.Sleep(time.Second) // a fetch by the restarted consumer, if anything were left
		// (Each listing costs seconds under the race detector: the
		// restarted replica both ways, each gateway one way.)
		for _, c := range []struct {
			name, path string
			get        func(string) map[string]any
		}{
			{"logs-1", byApp, viaReplica(d1)}, {"logs-1", byType, viaReplica(d1)},
			{"gateway A", byApp, viaGateway(admin)}, {"gateway B", byType, viaGateway(withCookie(gwB, admin.cookie()))},
		} {
			if got := countAll(t, c.get, c.path); got != n {
				t.Fatalf("after the restart, GET %s through %s: %d records, want exactly %d", c.path, c.name, got, n)
			}
		}
	})
}

// A retention sweep running on two logs replicas at once does no harm: old
// records go, new ones all stay, counts are exact, neither replica logs an
// error. A record's createdAt is the publisher's (pkg/logclient.Message), so
// the old records are published two hours old against a one-hour retention
// and the new ones cannot expire while the test runs: no timing window.
func TestStackRetentionOnTwoReplicas(t *testing.T) {
	p, sec, out := platformWith(t, map[string]string{
		"LOGS_RETENTION": "1h", "LOGS_RETENTION_INTERVAL": "1s",
	}, stack.Options{Replicas: 2, Bins: map[string]string{"logs": ""}})
	servers := servicesOf(t, p)
	l1, l2 := p.Replicas["logs"][0], p.Replicas["logs"][1]
	adminClaims := identity.Claims{Role: identity.RoleAdmin, RegisteredClaims: subjectClaims("retention-admin")}
	d1 := directTo(t, sec, l1, "logs", adminClaims)
	d2 := directTo(t, sec, l2, "logs", adminClaims)
	nc, err := nats.Connect(testkit.Get(t).NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Few records: on FerretDB a sweep and a filtered listing read whole
	// collections, which the race detector makes slow.
	const n = 150
	publish := func(metricsID string, createdAt time.Time) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range n {
			body, _ := json.Marshal(logclient.Message{App: "SERVER-APP-B", Type: logclient.TypeDB,
				LogBody: fmt.Sprintf("%s %d", metricsID, i), MetricsID: metricsID, CreatedAt: createdAt.Add(time.Duration(i) * time.Millisecond)})
			m := nats.NewMsg(logclient.Subject(servers.SubjectPrefix, "SERVER-APP-B", logclient.TypeDB))
			m.Header.Set("Nats-Msg-Id", fmt.Sprintf("%s-%d", metricsID, i))
			m.Data = body
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	paths := func(metricsID string) []string {
		return []string{"/log/db/1/SERVER-APP-B?limit=500&metricsId=" + metricsID, "/log/db/1?limit=500&metricsId=" + metricsID}
	}
	// counts: replica 1 app, type; replica 2 app, type.
	counts := func(metricsID string) []int {
		var cs []int
		for _, d := range []direct{d1, d2} {
			for _, path := range paths(metricsID) {
				cs = append(cs, countAll(t, viaReplica(d), path))
			}
		}
		return cs
	}
	all := func(cs []int, want int) bool {
		for _, c := range cs {
			if c != want {
				return false
			}
		}
		return true
	}
	stored := func() int { return ingested(t, l1) + ingested(t, l2) }
	waitStored := func(want int) {
		deadline := time.Now().Add(2 * time.Minute)
		for stored() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d records stored after 2 min", stored(), want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Old records: stored (both replicas' ingested counters add up), and
	// swept while both replicas sweep every second.
	base := stored()
	publish("ret-old", time.Now().Add(-2*time.Hour))
	waitStored(base + n)
	// New records: all listed, on both replicas, in both listings.
	publish("ret-new", time.Now())
	waitStored(base + 2*n)
	if cs := counts("ret-new"); !all(cs, n) {
		t.Fatalf("new records: listed %v (replica 1 app, type; replica 2 app, type), want %d each", cs, n)
	}
	// The old ones go: wait for the sweeps to report deletions (read from
	// the replicas' output, no load on the database), then look.
	sweeps := func() int { return strings.Count(out.String(), "retention: deleted old records") }
	deadline := time.Now().Add(2 * time.Minute)
	for seen := 0; ; {
		if time.Now().After(deadline) {
			t.Fatalf("old records still listed 2 min after they were stored: %v", counts("ret-old"))
		}
		if s := sweeps(); s > seen {
			seen = s
			if countAll(t, viaReplica(d1), paths("ret-old")[0]) == 0 {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Let both replicas sweep a few more times over the same data.
	time.Sleep(3 * time.Second)
	if cs := counts("ret-old"); !all(cs, 0) {
		t.Fatalf("old records after the sweeps: listed %v, want none", cs)
	}
	if cs := counts("ret-new"); !all(cs, n) {
		t.Fatalf("new records after the sweeps: listed %v, want %d each", cs, n)
	}
	for _, proc := range []*stack.Proc{l1, l2} {
		if dead := logsMetric(t, proc, "dead_lettered_total"); dead != 0 {
			t.Fatalf("%s dead-lettered %d messages", proc.Name, dead)
		}
	}
	swept := map[string]int{}
	for _, label := range []string{"logs-1", "logs-2"} {
		if errs := errorLines(out.String(), label); len(errs) > 0 {
			t.Fatalf("%s logged errors:\n%s", label, strings.Join(errs, "\n"))
		}
		for _, l := range linesOf(out.String(), label) {
			if strings.Contains(l, "retention: deleted old records") {
				swept[label]++
			}
		}
	}
	t.Logf("sweeps that deleted something, by replica: %v", swept)
}

// raceBuilt reports whether the services run with the race detector (much
// slower, and so is the test kit's in-process FerretDB under go test -race).
func raceBuilt() bool { return os.Getenv("E2E_RACE") == "1" }

func subjectClaims(sub string) jwt.RegisteredClaims { return jwt.RegisteredClaims{Subject: sub} }
