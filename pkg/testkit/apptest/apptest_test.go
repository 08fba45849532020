package apptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveEcho is a RunFunc: it serves echo on getenv("ADDR") until ctx ends,
// then returns getenv("FAIL_ON_STOP") as an error when set.
func serveEcho(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(string)) error {
	ln, err := net.Listen("tcp", getenv("ADDR"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(echo)}
	fmt.Fprintln(stdout, `{"msg":"listening"}`)
	ready(ln.Addr().String())
	go func() { <-ctx.Done(); srv.Close() }()
	_ = srv.Serve(ln)
	if msg := getenv("FAIL_ON_STOP"); msg != "" {
		return errors.New(msg)
	}
	return nil
}

// echo answers with what it received; /login sets a cookie.
func echo(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/login" {
		http.SetCookie(w, &http.Cookie{Name: "sessionId", Value: "s3cr3t", Path: "/"})
	}
	body, _ := io.ReadAll(r.Body)
	cookie := ""
	if c, err := r.Cookie("sessionId"); err == nil {
		cookie = c.Value
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/missing" {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"code":"not_found"}`)
		return
	}
	fmt.Fprintf(w, `{"method":%q,"type":%q,"token":%q,"cookie":%q,"body":%q,"length":%d}`,
		r.Method, r.Header.Get("Content-Type"), r.Header.Get("X-Token"), cookie, body, r.ContentLength)
}

type echoed struct {
	Method, Type, Token, Cookie, Body string
	Length                            int64
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestStartClientAndStop(t *testing.T) {
	var log Log
	svc := Start(t, serveEcho, env(map[string]string{"ADDR": "127.0.0.1:0"}), Options{Stdout: &log})
	if !strings.HasPrefix(svc.URL, "http://127.0.0.1:") || strings.HasSuffix(svc.URL, ":0") {
		t.Fatalf("URL %q", svc.URL)
	}
	if lines := log.Lines(t); len(lines) != 1 || lines[0]["msg"] != "listening" {
		t.Fatalf("log lines %v", lines)
	}

	c := NewClient(t, svc.URL)
	var e echoed
	c.Do("POST", "/x", map[string]int{"n": 1}).Expect(t, 200).JSON(t, &e)
	if e.Method != "POST" || e.Type != "application/json" || e.Body != `{"n":1}` {
		t.Fatalf("JSON body sent as %+v", e)
	}
	c.Do("PUT", "/x", "raw text", map[string]string{"Content-Type": "text/plain"}).JSON(t, &e)
	if e.Type != "text/plain" || e.Body != "raw text" {
		t.Fatalf("string body sent as %+v", e)
	}
	c.Do("PUT", "/x", strings.NewReader("streamed"), map[string]string{"Content-Length": "8"}).JSON(t, &e)
	if e.Type != "" || e.Body != "streamed" || e.Length != 8 {
		t.Fatalf("stream sent as %+v", e)
	}
	c.With("X-Token", "tok").Do("GET", "/x", nil).JSON(t, &e)
	if e.Token != "tok" || e.Type != "" {
		t.Fatalf("header not sent: %+v", e)
	}
	c.Do("GET", "/x", nil).JSON(t, &e)
	if e.Token != "" {
		t.Fatal("With changed the original client")
	}

	if r := <-c.Go("DELETE", "/x", nil); r.Err != nil || r.Status != 200 {
		t.Fatalf("Go: %d %v", r.Status, r.Err)
	}
	c.Do("POST", "/login", nil).Expect(t, 200)
	if c.Cookie("sessionId") != "s3cr3t" {
		t.Fatalf("cookie jar holds %q", c.Cookie("sessionId"))
	}
	c.Do("GET", "/x", nil).JSON(t, &e)
	if e.Cookie != "s3cr3t" {
		t.Fatal("the cookie was not sent back")
	}
	if m := c.Do("GET", "/missing", nil).ExpectError(t, 404, "not_found"); m["code"] != "not_found" {
		t.Fatalf("error body %v", m)
	}

	if err := svc.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-svc.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if _, err := c.Send("GET", "/x", nil); err == nil {
		t.Fatal("Send to a stopped service reported no error")
	}
	if r := <-c.Go("GET", "/x", nil); r.Err == nil || r.Status != 0 {
		t.Fatalf("Go to a stopped service: %d %v", r.Status, r.Err)
	}
	if err := svc.Stop(); err != nil { // again: the same answer, no wait
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStopReportsRunError(t *testing.T) {
	svc := Start(t, serveEcho, env(map[string]string{"ADDR": "127.0.0.1:0", "FAIL_ON_STOP": "boom"}), Options{IgnoreRunError: true})
	if err := svc.Stop(); err == nil || err.Error() != "boom" {
		t.Fatalf("Stop: %v, want Run's error", err)
	}
}

// Within retries until the condition holds and returns its last error when
// time runs out; Eventually and Until fail the test with it.
func TestWithin(t *testing.T) {
	n := 0
	if err := Within(time.Second, func() error {
		if n++; n < 3 {
			return fmt.Errorf("try %d", n)
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Within: %v after %d tries", err, n)
	}
	err := Within(50*time.Millisecond, func() error { return errors.New("never") })
	if err == nil || err.Error() != "never" {
		t.Fatalf("Within of a condition that never holds: %v", err)
	}
	Until(t, time.Second, "a condition that holds", func() bool { return true })
}

func TestObjects(t *testing.T) {
	body := map[string]any{"logs": []any{map[string]any{"id": "a"}, map[string]any{"id": "b"}}}
	got := Objects(t, body, "logs")
	if len(got) != 2 || got[0]["id"] != "a" || got[1]["id"] != "b" {
		t.Fatalf("Objects: %v", got)
	}
	if got := Objects(t, map[string]any{"logs": []any{}}, "logs"); len(got) != 0 {
		t.Fatalf("empty listing: %v", got)
	}
}
