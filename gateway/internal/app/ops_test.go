package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
)

// running is a gateway started by runGateway.
type running struct {
	url, addr, metricsAddr string
	svc                    *apptest.Service
}

// stop begins the gateway's shutdown; svc.Done tells when Run returned.
func (r *running) stop() { r.svc.Cancel() }

// withReadyz answers GET /readyz with 200 as every real service does, so the
// gateway's readiness probes never reach a test's handler.
func withReadyz(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			io.WriteString(w, `{"status":"ok"}`)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// runGateway starts the gateway in front of the given upstreams (nil: a
// closed port), its metrics on a port of its own, writing its log to out.
func runGateway(t *testing.T, upstreams map[string]http.Handler, out io.Writer, extra map[string]string) *running {
	t.Helper()
	s := testkit.Get(t, testkit.NATS)
	id := testkit.NewIdentity(t)
	env := testkit.Env{
		"GATEWAY_ADDR":                 "127.0.0.1:0",
		"GATEWAY_METRICS_ADDR":         "127.0.0.1:0",
		"GATEWAY_IDENTITY_PRIVATE_KEY": id.PrivatePEM,
		"SERVICE_CREDENTIAL":           credential,
		"NATS_URL":                     s.NATSURL,
		"NATS_SUBJECT_PREFIX":          s.SubjectPrefix(t),
	}
	for _, svc := range []string{"auth", "files", "logs", "tus"} {
		url := "http://127.0.0.1:1"
		h := upstreams[svc]
		if svc == "tus" && h == nil {
			h = upstreams["files"] // the files service's second listener
		}
		if h != nil {
			srv := httptest.NewServer(withReadyz(h))
			t.Cleanup(srv.Close)
			url = srv.URL
		}
		env["GATEWAY_"+strings.ToUpper(svc)+"_URL"] = url
	}
	for k, v := range extra {
		env[k] = v
	}
	maddrc := make(chan string, 1)
	svc := apptest.Start(t, func(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(string)) error {
		return run(ctx, getenv, stdout, ready, hooks{metricsReady: func(a string) { maddrc <- a }})
	}, env.Getenv, apptest.Options{Stdout: out, IgnoreRunError: true}) // tests that care read svc.Err
	r := &running{url: svc.URL, addr: svc.Addr, metricsAddr: <-maddrc, svc: svc}
	return r
}

// The gateway counts requests by route table entry on its own metrics
// listener; the public port neither serves nor proxies /metrics.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	fa := &fakeAuth{}
	g := runGateway(t, map[string]http.Handler{"auth": fa, "files": http.HandlerFunc(echo), "logs": http.HandlerFunc(echo)}, io.Discard, nil)
	for _, c := range []struct {
		method, path, cookie string
		want                 int
	}{
		{"GET", "/me", userCookie, 200},
		{"GET", "/me/sessions", userCookie, 200},
		{"GET", "/log/log/1", userCookie, 403},
		{"GET", "/retrieve/file/abc", "", 401},
		{"GET", "/no/such/route", "", 404},
		{"GET", "/metrics", "", 404},
		{"GET", "/healthz", "", 200},
	} {
		if status, body := do(t, c.method, g.url+c.path, c.cookie, "", nil); status != c.want {
			t.Fatalf("%s %s: %d %v, want %d", c.method, c.path, status, body, c.want)
		}
	}
	resp, err := http.Get("http://" + g.metricsAddr + "/me")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("the metrics listener answered /me with %d, want 404", resp.StatusCode)
	}

	s := metricstest.Scrape(t, "http://"+g.metricsAddr+"/metrics")
	for _, c := range []struct {
		route, status string
		want          float64
	}{
		{"/me", "200", 2}, // /me and /me/sessions: one table entry
		{"/log", "403", 1},
		{"/retrieve", "401", 1},
		{"unmatched", "404", 2}, // /no/such/route and /metrics
		{"/healthz", "200", 1},
	} {
		labels := []string{"route", c.route, "method", "GET", "status", c.status}
		if got, _ := s.Sum("acme_http_requests_total", labels...); got != c.want {
			t.Errorf("requests_total%v = %v, want %v\n%v", labels, got, c.want, s.Find("acme_http_requests_total"))
		}
		if got, _ := s.Sum("acme_http_request_duration_seconds_count", labels...); got != c.want {
			t.Errorf("duration count%v = %v, want %v", labels, got, c.want)
		}
	}
	for _, x := range s.Find("acme_http_requests_total") {
		if strings.Contains(x.Labels["route"], "/such") || strings.Contains(x.Labels["route"], "abc") {
			t.Errorf("raw path as a label: %v", x)
		}
	}
}

func TestMetricsAddrMustNotBeThePublicOne(t *testing.T) {
	env := testkit.Env{"GATEWAY_ADDR": "0.0.0.0:8080", "GATEWAY_METRICS_ADDR": "0.0.0.0:8080",
		"GATEWAY_IDENTITY_PRIVATE_KEY": "k", "SERVICE_CREDENTIAL": "c"}
	if _, _, err := loadConfig(env.Getenv); err == nil || !strings.Contains(err.Error(), "GATEWAY_METRICS_ADDR") {
		t.Fatalf("loadConfig = %v, want an error about GATEWAY_METRICS_ADDR", err)
	}
	env["GATEWAY_METRICS_ADDR"] = "off"
	if c, _, err := loadConfig(env.Getenv); err != nil || c.MetricsAddr != "" {
		t.Fatalf("off: %q %v", c.MetricsAddr, err)
	}
}

// secretAuth is a fake auth service with real-looking secrets: sign-in
// sets a random session cookie, /ms/me resolves it, a password change
// replaces it. It keeps the identity tokens it receives.
type secretAuth struct {
	mu      sync.Mutex
	cookies map[string]bool
	tokens  []string
}

func randomCookie() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (a *secretAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if tok := r.Header.Get(identity.Header); tok != "" {
		a.tokens = append(a.tokens, tok)
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/ms/me":
		var b struct{ SessionID string }
		_ = json.NewDecoder(r.Body).Decode(&b)
		if r.Header.Get("X-Service-Credential") != credential || !a.cookies[b.SessionID] {
			w.WriteHeader(401)
			io.WriteString(w, `{"code":"invalid_session"}`)
			return
		}
		io.WriteString(w, `{"user":{"id":"u1","roleName":"user"},"session":{"id":"0123456789abcdef0123456789abcdef"}}`)
	case r.URL.Path == "/signin" || (r.URL.Path == "/me" && r.Method == http.MethodPatch):
		io.Copy(io.Discard, r.Body)
		c := randomCookie()
		a.cookies[c] = true
		http.SetCookie(w, &http.Cookie{Name: "sessionId", Value: c, Path: "/", HttpOnly: true})
		io.WriteString(w, `{"message":"ok"}`)
	default:
		io.WriteString(w, `{"message":"ok"}`)
	}
}

// The gateway's log holds no password, cookie, identity token or service
// credential, whatever passes through it, and each access line has the
// request id.
func TestNoSecretsInGatewayLogs(t *testing.T) {
	auth := &secretAuth{cookies: map[string]bool{}}
	var out apptest.Log
	g := runGateway(t, map[string]http.Handler{"auth": auth, "files": auth, "logs": auth}, &out, nil)
	const (
		firstPW  = "first-Secret-phrase-51"
		secondPW = "second-Secret-phrase-52"
	)
	client := &http.Client{Timeout: 30 * time.Second}
	send := func(method, path, cookie, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, g.url+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if cookie != "" {
			req.Header.Set("Cookie", "sessionId="+cookie)
		}
		req.Header.Set(identity.Header, "forged-identity-token-value-0123456789")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	cookieOf := func(resp *http.Response) string {
		t.Helper()
		for _, c := range resp.Cookies() {
			if c.Name == "sessionId" {
				return c.Value
			}
		}
		t.Fatalf("no session cookie (status %d)", resp.StatusCode)
		return ""
	}

	first := cookieOf(send("POST", "/signin", "", `{"email":"a@example.com","password":"`+firstPW+`"}`))
	send("GET", "/me", first, "")
	send("GET", "/me", "", `{"sessionId":"`+first+`"}`)
	send("GET", "/files", first, "")
	second := cookieOf(send("PATCH", "/me", first, `{"password":{"old":"`+firstPW+`","new":"`+secondPW+`"}}`))
	send("GET", "/me", second, "")
	unknown := randomCookie()
	if resp := send("GET", "/me", unknown, ""); resp.StatusCode != 401 {
		t.Fatalf("unknown cookie: %d", resp.StatusCode)
	}
	send("DELETE", "/signout", second, "")

	// The access line is written just after the answer is sent.
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), `"msg":"request"`) < 8 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	logged := out.String()
	secrets := map[string]string{"first password": firstPW, "second password": secondPW, "first cookie": first,
		"second cookie": second, "unknown cookie": unknown, "service credential": credential,
		"forged token": "forged-identity-token-value-0123456789"}
	auth.mu.Lock()
	for i, tok := range auth.tokens {
		secrets["identity token "+string(rune('a'+i))] = tok
	}
	n := len(auth.tokens)
	auth.mu.Unlock()
	if n == 0 {
		t.Fatal("the fake services received no identity token")
	}
	for what, s := range secrets {
		if strings.Contains(logged, s) {
			t.Errorf("the %s appears in the gateway's log", what)
		}
	}
	requests := 0
	for _, m := range out.Lines(t) {
		if m["msg"] == "request" {
			requests++
			if rid, _ := m["rid"].(string); rid == "" {
				t.Errorf("access line without a request id: %v", m)
			}
		}
	}
	if requests != 8 {
		t.Errorf("%d access lines, want 8", requests)
	}
}

// A request in flight when shutdown begins is answered; the public listener
// closes at once (new connections are refused); then Run returns. The
// metrics listener stays up while requests drain, so a scrape still sees
// them.
func TestShutdownFinishesInFlightRequest(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, `{"done":true}`)
	})
	g := runGateway(t, map[string]http.Handler{"files": slow}, io.Discard, nil)
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the servers close
	c := apptest.NewClient(t, g.url)
	c.HTTP = &http.Client{Transport: &http.Transport{}} // a connection of its own
	resc := c.Go("GET", "/images/slow", nil)            // public: no session lookup
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the upstream")
	}

	g.stop()
	refused := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	}
	apptest.Eventually(t, 10*time.Second, func() error {
		if !refused(g.addr) {
			return errors.New("new connections still accepted after shutdown began")
		}
		return nil
	})
	select {
	case <-g.svc.Done():
		err := g.svc.Err()
		t.Fatalf("Run returned with a request in flight: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if v, _ := metricstest.Scrape(t, "http://"+g.metricsAddr+"/metrics").Sum("acme_http_requests_in_flight"); v != 1 {
		t.Errorf("in flight during the drain: %v, want 1", v)
	}

	releaseOnce.Do(func() { close(release) })
	select {
	case r := <-resc:
		if r.Err != nil || r.Status != 200 || string(r.Body) != `{"done":true}` {
			t.Fatalf("in-flight request: %d %q %v", r.Status, r.Body, r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight request got no answer")
	}
	select {
	case <-g.svc.Done():
		err := g.svc.Err()
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if !refused(g.metricsAddr) {
		t.Error("the metrics listener is still open after Run returned")
	}
}

// A request still running at the deadline does not hold shutdown up.
func TestShutdownDeadline(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
	})
	g := runGateway(t, map[string]http.Handler{"files": slow}, io.Discard, map[string]string{"GATEWAY_SHUTDOWN_GRACE": "300ms"})
	t.Cleanup(func() { close(release) }) // before the servers close
	go func() {
		if resp, err := (&http.Client{Transport: &http.Transport{}}).Get(g.url + "/images/stuck"); err == nil {
			resp.Body.Close()
		}
	}()
	<-arrived
	start := time.Now()
	g.stop()
	select {
	case <-g.svc.Done():
		err := g.svc.Err()
		if err == nil {
			t.Error("Run reported a clean stop although a request was cut")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Run took %v with a 300ms grace", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the grace period")
	}
}

// GATEWAY_PPROF adds Go's profiles to the metrics listener only; they are
// off by default and never on the public port.
func TestPprofOnlyWhenAskedAndOnlyPrivately(t *testing.T) {
	up := map[string]http.Handler{"auth": &fakeAuth{}, "files": http.HandlerFunc(echo), "logs": http.HandlerFunc(echo)}
	status := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	off := runGateway(t, up, io.Discard, nil)
	if s := status("http://" + off.metricsAddr + "/debug/pprof/"); s != 404 {
		t.Fatalf("profiles without GATEWAY_PPROF: %d, want 404", s)
	}
	on := runGateway(t, up, io.Discard, map[string]string{"GATEWAY_PPROF": "true"})
	if s := status("http://" + on.metricsAddr + "/debug/pprof/goroutine?debug=1"); s != 200 {
		t.Fatalf("profiles with GATEWAY_PPROF: %d, want 200", s)
	}
	if s := status(on.url + "/debug/pprof/"); s != 404 {
		t.Fatalf("profiles on the public port: %d, want 404", s)
	}
}
