package app

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// closedWithin reports whether the server closes conn within d while the
// client keeps writing one byte every tick (what a slowloris client does).
func closedWithin(t *testing.T, conn net.Conn, d, tick time.Duration, trickle []byte) bool {
	t.Helper()
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn) // returns when the server closes
		close(gone)
	}()
	deadline := time.After(d)
	for i := 0; ; i++ {
		select {
		case <-gone:
			return true
		case <-deadline:
			return false
		case <-time.After(tick):
			if len(trickle) > 0 {
				_, _ = conn.Write(trickle[i%len(trickle) : i%len(trickle)+1])
			}
		}
	}
}

// A client that sends its request line and headers one byte at a time is
// cut off once the header timeout has passed, however steadily it trickles.
func TestSlowlorisHeadersCutOff(t *testing.T) {
	g := startGateway(t, map[string]string{"GATEWAY_READ_HEADER_TIMEOUT": "1s"})
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	trickle := []byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + strings.Repeat("a", 500))
	if !closedWithin(t, conn, 6*time.Second, 100*time.Millisecond, trickle) {
		t.Fatal("a connection trickling its headers was still open after 6s (header timeout 1s)")
	}
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Fatalf("closed after %v, before the header timeout", el)
	}
}

// A request body that stops making progress is cut after the body idle
// timeout; a body that keeps moving is not limited in total time.
func TestStalledBodyCutOff(t *testing.T) {
	g := startGateway(t, map[string]string{"GATEWAY_BODY_IDLE_TIMEOUT": "1s"})
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /signin HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"email\":")
	start := time.Now()
	// The gateway's own answer: 408 request_timeout, not the service's
	// failure (503) nor an empty 200.
	rd := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(6 * time.Second))
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || m["code"] != "request_timeout" {
		t.Fatalf("stalled body: %d %v, want 408 request_timeout", resp.StatusCode, m)
	}
	_ = conn.SetReadDeadline(time.Time{})
	if !closedWithin(t, conn, 6*time.Second, time.Hour, nil) {
		t.Fatal("a stalled request body held the connection for 6s (body idle timeout 1s)")
	}
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Fatalf("closed after %v, before the idle timeout", el)
	}

	// 2.5 s of body at a byte every 200 ms: slower than nothing, never idle.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"x":"`))
		for i := 0; i < 12; i++ {
			time.Sleep(200 * time.Millisecond)
			pw.Write([]byte("a"))
		}
		pw.Write([]byte(`"}`))
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", g.url+"/signin", pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	m = nil
	json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if resp.StatusCode != 200 || m["bodyLen"] != float64(20) {
		t.Fatalf("slow but steady body: %d %v", resp.StatusCode, m)
	}
}

// Headers over GATEWAY_MAX_HEADER_BYTES get 431 with a JSON body; far larger
// ones are refused by net/http itself, also with 431.
func TestOversizeHeaders431(t *testing.T) {
	g := startGateway(t, map[string]string{"GATEWAY_MAX_HEADER_BYTES": "8192"})
	for _, tc := range []struct {
		size     int
		wantJSON bool
	}{{12 << 10, true}, {64 << 10, false}} {
		req, _ := http.NewRequest("GET", g.url+"/me", nil)
		req.Header.Set("X-Big", strings.Repeat("b", tc.size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("%d bytes of header: %d %s", tc.size, resp.StatusCode, body)
		}
		var m map[string]any
		if tc.wantJSON && (json.Unmarshal(body, &m) != nil || m["code"] != "headers_too_large") {
			t.Fatalf("%d bytes of header: body %s", tc.size, body)
		}
	}
	// Just under the limit passes.
	req, _ := http.NewRequest("GET", g.url+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 7<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("7 KiB of header: %d", resp.StatusCode)
	}
}

// raiseFileLimit lifts the soft open-file limit to at least n (the
// gateway runs in this process here, so this is its limit too).
func raiseFileLimit(t *testing.T, n uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur >= n {
		return
	}
	if rl.Max < n {
		t.Skipf("hard open-file limit %d is below %d", rl.Max, n)
	}
	old := rl.Cur
	rl.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Cur = old; _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl) })
}

// 2,000 idle connections (half of them mid-headers) do not stop normal
// requests, direct and proxied.
func TestIdleConnectionFlood(t *testing.T) {
	const n = 2000
	raiseFileLimit(t, 2*n+1024) // both ends of every connection live in this process
	g := startGateway(t, nil)
	addr := strings.TrimPrefix(g.url, "http://")
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if i%2 == 0 {
			fmt.Fprintf(c, "GET /me HTTP/1.1\r\nHost: x\r\n") // headers never finished
		}
		conns = append(conns, c)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for i, path := range []string{"/healthz", "/signin", "/me", "/healthz", "/images/x"} {
		start := time.Now()
		req, _ := http.NewRequest("GET", g.url+path, nil)
		if path == "/me" {
			req.AddCookie(&http.Cookie{Name: "sessionId", Value: userCookie})
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d %s with %d idle connections open: %v", i, path, n, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Fatalf("%s took %v with %d idle connections open", path, el, n)
		}
	}
	// The idle ones are still open (not a timeout artefact).
	conns[1].SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := bufio.NewReader(conns[1]).ReadByte(); err == nil || !isTimeout(err) {
		t.Fatalf("idle connection: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A service that takes a cut body for a whole one (it reads until the
// connection ends and answers 200) never gets its 2xx through: an upload
// that did not arrive whole is answered 408 by the gateway.
func TestStalledUploadNever2xx(t *testing.T) {
	lenient := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the error is ignored
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"stored":true}`)
	})
	g := runGateway(t, map[string]http.Handler{"auth": &fakeAuth{}, "files": lenient}, io.Discard,
		map[string]string{"GATEWAY_BODY_IDLE_TIMEOUT": "1s"})
	for _, framing := range []string{"Content-Length: 1000", "Transfer-Encoding: chunked"} {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		body := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\npartial"
		if strings.HasPrefix(framing, "Transfer") {
			body = fmt.Sprintf("%x\r\n%s\r\n", len(body), body)
		}
		fmt.Fprintf(conn, "POST /upload/file HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: sessionId=%s\r\nContent-Type: multipart/form-data; boundary=b\r\n%s\r\n\r\n%s",
			userCookie, framing, body)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer: %v", framing, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"request_timeout"`) {
			t.Fatalf("%s: a stalled upload was answered %d %s, want 408 request_timeout", framing, resp.StatusCode, b)
		}
	}
}
