package e2e

// Hostile-input suite, gateway part (issue rows 4, 7 and 9): a live tail
// outliving its credential, request bodies that stall, and requests for a
// foreign Host or with an Origin of another scheme (DNS rebinding).

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// tailBound is how soon a stream must end after its credential went: the
// gateway re-checks a running request every 2 s (fenced against
// revocations over NATS), plus room for a loaded machine.
const tailBound = 6 * time.Second

func marker(t *testing.T, what string) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return what + "-" + hex.EncodeToString(b)
}

// liveTail is GET /log/tail read as a plain stream: no Accept header, so
// nothing tells the gateway it is a stream but the answer itself.
type liveTail struct {
	mu    sync.Mutex
	text  strings.Builder
	ended chan struct{}
	ready chan struct{}
}

func openTail(t *testing.T, base string, hdr map[string]string) *liveTail {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/log/tail", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /log/tail: %d %s", resp.StatusCode, b)
	}
	lt := &liveTail{ended: make(chan struct{}), ready: make(chan struct{})}
	go func() {
		defer close(lt.ended)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			lt.mu.Lock()
			lt.text.WriteString(sc.Text() + "\n")
			lt.mu.Unlock()
			if sc.Text() == "event: ready" {
				once.Do(func() { close(lt.ready) })
			}
		}
	}()
	select {
	case <-lt.ready:
	case <-time.After(15 * time.Second):
		t.Fatal("the tail sent no ready event")
	}
	return lt
}

func (lt *liveTail) has(s string) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return strings.Contains(lt.text.String(), s)
}

// postLog stores a record through the gateway as the administrator c.
func postLog(t *testing.T, c *client, body string) {
	t.Helper()
	c.mustStatus(201, "POST", "/log", map[string]string{"app": "LOGGING", "type": "log", "logBody": body})
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// A live tail opened without Accept: text/event-stream ends within the
// gateway's re-check bound once its session is signed out, its API key
// revoked or its user loses the administrator role, and a record posted
// after that is never delivered on it.
func TestHostileTailAfterRevocation(t *testing.T) {
	p, sec, _ := platform(t, nil)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)

	// Each way of losing the credential: open a tail with it, prove the
	// tail delivers, take the credential away, post a record at once.
	check := func(name string, hdr map[string]string, revoke func()) {
		t.Helper()
		tail := openTail(t, p.GatewayURL, hdr)
		before := marker(t, name+"-before")
		postLog(t, admin, before)
		if !waitFor(10*time.Second, func() bool { return tail.has(before) }) {
			t.Fatalf("%s: the tail did not deliver a record posted while the credential was valid", name)
		}
		revoke()
		gone := time.Now()
		after := marker(t, name+"-after")
		postLog(t, admin, after)
		select {
		case <-tail.ended:
		case <-time.After(tailBound):
			t.Fatalf("%s: the tail was still open %v after the credential went", name, tailBound)
		}
		if tail.has(after) {
			t.Fatalf("%s: a record posted after the credential went was delivered on the tail", name)
		}
		t.Logf("%s: the tail ended %v after the credential went", name, time.Since(gone).Round(time.Millisecond))
	}

	// Sign-out of the tail's own session.
	other := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	check("signout", map[string]string{"Cookie": "sessionId=" + other.cookie()}, func() {
		other.mustStatus(200, "DELETE", "/signout", nil)
	})

	// A tail that receives nothing after the sign-out ends too: the
	// gateway's periodic re-check, not a write, ends it.
	idle := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	tail := openTail(t, p.GatewayURL, map[string]string{"Cookie": "sessionId=" + idle.cookie()})
	idle.mustStatus(200, "DELETE", "/signout", nil)
	select {
	case <-tail.ended:
	case <-time.After(tailBound):
		t.Fatalf("idle: the tail was still open %v after the sign-out", tailBound)
	}

	// Revocation of the tail's API key.
	key := admin.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "tail", "scopes": []string{"logs:read"}})
	keyID := key["apiKey"].(map[string]any)["id"].(string)
	check("key", map[string]string{"Authorization": "Bearer " + key["secret"].(string)}, func() {
		admin.mustStatus(200, "DELETE", "/me/api-keys/"+keyID, nil)
	})

	// Role loss: an administrator demoted while tailing.
	created := admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "tailer@example.com", "password": "a long tailer password", "fullName": "Tailer", "edv": "T-1", "roleName": "admin",
	})
	tailerID := created["user"].(map[string]any)["id"].(string)
	tailer := signIn(t, p.GatewayURL, "tailer@example.com", "a long tailer password")
	check("demoted", map[string]string{"Cookie": "sessionId=" + tailer.cookie()}, func() {
		admin.mustStatus(200, "PATCH", "/users/"+tailerID, map[string]any{"roleName": "user"})
	})
}

// rawExchange sends head and the first bytes of a body on a new connection,
// then sends nothing more, and reads the answer (nil when the connection
// closed without one).
func rawExchange(t *testing.T, addr, head string, body []byte) (*http.Response, []byte, time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, time.Since(start)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b, time.Since(start)
}

// A request body that stalls (Content-Length 1000, 10 bytes sent, then
// nothing) is answered 408 request_timeout by the gateway within its body
// idle timeout, never 503 naming another service and never 2xx; a stalled
// upload stores nothing; a slow upload that keeps moving passes.
func TestHostileStalledBody(t *testing.T) {
	const idle = 2 * time.Second
	p, sec, _ := platform(t, map[string]string{"GATEWAY_BODY_IDLE_TIMEOUT": idle.String()})
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	addr := strings.TrimPrefix(p.GatewayURL, "http://")

	want408 := func(what string, resp *http.Response, body []byte, took time.Duration) {
		t.Helper()
		if resp == nil {
			t.Fatalf("%s: the connection closed without an answer after %v", what, took)
		}
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		if resp.StatusCode != http.StatusRequestTimeout || m["code"] != "request_timeout" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s: %d %s %s after %v, want 408 request_timeout (JSON)", what, resp.StatusCode, resp.Header.Get("Content-Type"), body, took)
		}
		if took < idle-200*time.Millisecond || took > idle+4*time.Second {
			t.Fatalf("%s: answered after %v, want about the idle timeout %v", what, took, idle)
		}
	}

	resp, body, took := rawExchange(t, addr, "POST /signin HTTP/1.1\r\nHost: "+addr+
		"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", []byte(`{"email":"`))
	want408("POST /signin", resp, body, took)

	// An upload: the files service receives a body cut short.
	head := "POST /upload/file HTTP/1.1\r\nHost: " + addr + "\r\nCookie: sessionId=" + admin.cookie() +
		"\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 1000\r\n\r\n"
	start := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"stalled.txt\"\r\nContent-Type: text/plain\r\n\r\nstalled"
	resp, body, took = rawExchange(t, addr, head, []byte(start))
	if resp != nil && resp.StatusCode < 300 {
		t.Fatalf("a stalled upload was answered %d %q", resp.StatusCode, body)
	}
	want408("POST /upload/file", resp, body, took)
	if files := admin.mustStatus(200, "GET", "/files", nil)["files"].([]any); len(files) != 0 {
		t.Fatalf("a stalled upload stored something: %v", files)
	}

	// Slow but moving: a byte every 500 ms, 5 s in all (longer than the
	// idle timeout), is never cut.
	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"slow.txt\"\r\nContent-Type: text/plain\r\n\r\n")
		for i := 0; i < 10; i++ {
			time.Sleep(500 * time.Millisecond)
			pw.Write([]byte("s"))
		}
		io.WriteString(pw, "\r\n--b--\r\n")
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", p.GatewayURL+"/upload/file", pr)
	req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	req.Header.Set("Cookie", "sessionId="+admin.cookie())
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusCreated {
		t.Fatalf("a slow but steady upload: %d %s", r.StatusCode, b)
	}
}

// Origin is compared with scheme, host and port, and a request for a Host
// that is not the gateway's (GATEWAY_PUBLIC_URL, or an IP address or
// localhost) is refused 421 unless it carries an API key: a DNS-rebinding
// page can neither sign in nor use the API.
func TestHostileOriginAndHost(t *testing.T) {
	const public = "http://app.acme.test" // port 80: the Host header has no port
	p, sec, _ := platform(t, map[string]string{"GATEWAY_PUBLIC_URL": public})
	addr := strings.TrimPrefix(p.GatewayURL, "http://")
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	key := admin.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "h", "scopes": []string{"files:read"}})["secret"].(string)
	signin := fmt.Sprintf(`{"email":%q,"password":%q}`, sec.AdminEmail, sec.AdminPassword)

	send := func(method, host, path, body string, hdr map[string]string) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, p.GatewayURL+path, rd)
		req.Host = host
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	cases := []struct {
		name, method, host, path, body string
		hdr                            map[string]string
		want                           int
		code                           string
	}{
		// The scheme counts: https://<the gateway's address> is not the
		// plain-http gateway's origin.
		{"wrongSchemeAddress", "POST", addr, "/signin", signin, map[string]string{"Origin": "https://" + addr}, 403, "forbidden_origin"},
		{"wrongSchemePublic", "POST", "app.acme.test", "/signin", signin, map[string]string{"Origin": "https://app.acme.test"}, 403, "forbidden_origin"},
		{"wrongPortPublic", "POST", "app.acme.test", "/signin", signin, map[string]string{"Origin": "http://app.acme.test:8080"}, 403, "forbidden_origin"},
		// A rebinding page: its own name as Host and as Origin.
		{"rebindSignin", "POST", "rebind.attacker.test", "/signin", signin, map[string]string{"Origin": "http://rebind.attacker.test"}, 421, "misdirected_request"},
		{"rebindPortSignin", "POST", "rebind.attacker.test:" + strings.Split(addr, ":")[1], "/signin", signin,
			map[string]string{"Origin": "http://rebind.attacker.test:" + strings.Split(addr, ":")[1]}, 421, "misdirected_request"},
		{"rebindMe", "GET", "rebind.attacker.test", "/me", "", map[string]string{"Cookie": "sessionId=" + admin.cookie()}, 421, "misdirected_request"},
		{"rebindConsole", "GET", "rebind.attacker.test", "/console/", "", nil, 421, "misdirected_request"},
		{"publicHostOtherPort", "POST", "app.acme.test:8443", "/signin", signin, nil, 421, "misdirected_request"},
		{"rebindBadKey", "GET", "rebind.attacker.test", "/files", "", map[string]string{"Authorization": "Bearer nope"}, 401, "invalid_api_key"},
		// The right ones pass.
		{"ownAddress", "POST", addr, "/signin", signin, map[string]string{"Origin": "http://" + addr}, 200, ""},
		{"publicURL", "POST", "app.acme.test", "/signin", signin, map[string]string{"Origin": public}, 200, ""},
		{"publicURLTrailingDot", "POST", "APP.acme.test.", "/signin", signin, map[string]string{"Origin": public}, 200, ""},
		{"localhost", "POST", "localhost:" + strings.Split(addr, ":")[1], "/signin", signin,
			map[string]string{"Origin": "http://localhost:" + strings.Split(addr, ":")[1]}, 200, ""},
		{"noOrigin", "POST", "app.acme.test", "/signin", signin, nil, 200, ""},
		// An API key is a credential no page of another name holds by
		// accident: the key's own rights, whatever the Host.
		{"keyAnyHost", "GET", "api.internal.test", "/files", "", map[string]string{"Authorization": "Bearer " + key}, 200, ""},
		// Probes answer whatever the Host (healthchecks by address or name).
		{"healthz", "GET", "gateway", "/healthz", "", nil, 200, ""},
	}
	for _, c := range cases {
		got, m := send(c.method, c.host, c.path, c.body, c.hdr)
		if got != c.want || (c.code != "" && m["code"] != c.code) {
			t.Errorf("%s: %s %s (Host %s): %d %v, want %d %s", c.name, c.method, c.path, c.host, got, m, c.want, c.code)
		}
	}
}
