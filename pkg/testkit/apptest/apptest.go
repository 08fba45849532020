// Package apptest runs a service in-process for a test and talks to it: Start
// calls the service's Run on a port of its choosing and stops it when the test
// ends, Client sends JSON (or any) requests with a cookie jar, Response checks
// the answer, and Eventually waits for a condition. The service suites (auth,
// files, logs, the gateway) and the process suites (scripts/e2e,
// scripts/faults) share it instead of each writing its own.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RunFunc is a service's Run: it serves until ctx ends, calling ready with
// the address it listens on.
type RunFunc func(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string)) error

// Options tune Start; the zero value is what most tests want.
type Options struct {
	// Stdout receives the service's log (io.Discard when nil). A Log is
	// shown in the failure when the service does not start.
	Stdout io.Writer
	// StartTimeout bounds the wait for ready (60 s when zero).
	StartTimeout time.Duration
	// StopTimeout bounds the wait for Run to return after its context is
	// cancelled (30 s when zero).
	StopTimeout time.Duration
	// IgnoreRunError keeps the clean-up from failing the test when Run
	// returns an error after its context was cancelled.
	IgnoreRunError bool
}

// Service is one running service started by Start.
type Service struct {
	// Addr is the address the service listens on (host:port), URL the
	// same as http://host:port.
	Addr, URL string

	o      Options
	cancel context.CancelFunc
	exited chan struct{} // closed when Run has returned
	err    error         // what Run returned, once exited is closed
}

// Start runs run with getenv in the background, waits until it calls ready
// and stops it when the test ends. The service must listen where getenv
// says: tests set its address setting to 127.0.0.1:0. It fails the test if
// Run returns or is not ready within the start timeout.
func Start(t testing.TB, run RunFunc, getenv func(string) string, o Options) *Service {
	t.Helper()
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{o: o, cancel: cancel, exited: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		s.err = run(ctx, getenv, o.Stdout, func(a string) { addrc <- a })
		close(s.exited)
	}()
	select {
	case s.Addr = <-addrc:
	case <-s.exited:
		cancel()
		t.Fatalf("service did not start: %v%s", s.err, logOf(o.Stdout))
	case <-time.After(o.StartTimeout):
		cancel()
		t.Fatalf("service not ready after %v%s", o.StartTimeout, logOf(o.Stdout))
	}
	s.URL = "http://" + s.Addr
	t.Cleanup(func() {
		if err := s.Stop(); err != nil && !o.IgnoreRunError {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// Stop cancels Run's context and waits for it to return (at most the stop
// timeout), reporting its error; it may be called again, and after Run has
// returned by itself.
func (s *Service) Stop() error {
	s.cancel()
	select {
	case <-s.exited:
		return s.err
	case <-time.After(s.o.StopTimeout):
		return fmt.Errorf("Run did not return within %v of its context's end", s.o.StopTimeout)
	}
}

// Cancel cancels Run's context without waiting; Done tells when Run has
// returned and Err what it returned.
func (s *Service) Cancel() { s.cancel() }

// Done is closed when Run has returned.
func (s *Service) Done() <-chan struct{} { return s.exited }

// Err is what Run returned; call it once Done is closed.
func (s *Service) Err() error { return s.err }

func logOf(w io.Writer) string {
	if l, ok := w.(*Log); ok {
		return "\nservice output:\n" + l.String()
	}
	return ""
}

// Log is a service's stdout kept for the test: safe for the service's
// goroutines to write while the test reads it.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines decodes the JSON lines written so far (the services log with
// log/slog's JSON handler); a line that is not a JSON object fails the test.
func (l *Log) Lines(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("log line is not JSON: %.200q", line)
			continue
		}
		out = append(out, m)
	}
	return out
}

// Client sends requests to one base URL. Its HTTP client keeps cookies
// (a jar of its own), so signing in once keeps the session for the next
// requests, as a browser does.
type Client struct {
	// Base is prefixed to every path.
	Base string
	// HTTP does the requests; set its Transport to check or change them.
	HTTP *http.Client
	// Header is sent with every request (a token, a credential).
	Header http.Header

	t testing.TB
}

// NewClient returns a client for base with an empty cookie jar and a
// 60-second timeout.
func NewClient(t testing.TB, base string) *Client {
	jar, _ := cookiejar.New(nil)
	return &Client{Base: base, HTTP: &http.Client{Jar: jar, Timeout: 60 * time.Second}, Header: http.Header{}, t: t}
}

// With returns a client that sends the header too; it shares c's HTTP
// client and cookie jar.
func (c *Client) With(key, value string) *Client {
	d := *c
	d.Header = c.Header.Clone()
	d.Header.Set(key, value)
	return &d
}

// Do sends a request and reads the whole answer, failing the test when
// there is no answer. The body is sent as it is when it is a string, a
// []byte or an io.Reader, as JSON otherwise; the Content-Type of a body
// other than an io.Reader (a stream, whose type the caller names) is
// application/json unless hdr names another. hdr, if given, adds headers
// to this request only (an empty value adds nothing); a Content-Length
// there is the length announced for a streamed body.
func (c *Client) Do(method, path string, body any, hdr ...map[string]string) *Response {
	c.t.Helper()
	r, err := c.Send(method, path, body, hdr...)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// Send is Do that returns the error instead of failing the test (for
// requests made while a fault is injected, or from other goroutines). A
// Response is returned with the error when the answer began but its body
// broke.
func (c *Client) Send(method, path string, body any, hdr ...map[string]string) (*Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.Base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	if _, stream := body.(io.Reader); body != nil && !stream {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range hdr {
		for k, v := range h {
			if http.CanonicalHeaderKey(k) == "Content-Length" { // the client sends req.ContentLength only
				if req.ContentLength, err = strconv.ParseInt(v, 10, 64); err != nil {
					return nil, fmt.Errorf("Content-Length %q: %w", v, err)
				}
				continue
			}
			if v != "" {
				req.Header.Set(k, v)
			}
		}
	}
	start := time.Now()
	res, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	out := &Response{Status: res.StatusCode, Header: res.Header, Body: b, ContentLength: res.ContentLength, Elapsed: time.Since(start), method: method, path: path}
	if err != nil {
		return out, fmt.Errorf("reading the body: %w", err)
	}
	return out, nil
}

// Result is the outcome of a request sent by Go: Response is never nil
// (Status 0 when there was no answer).
type Result struct {
	*Response
	Err error
}

// Go sends the request in the background (a request left in flight while
// the test stops the service) and delivers its Result on the channel.
func (c *Client) Go(method, path string, body any, hdr ...map[string]string) <-chan Result {
	out := make(chan Result, 1)
	go func() {
		r, err := c.Send(method, path, body, hdr...)
		if r == nil {
			r = &Response{method: method, path: path}
		}
		out <- Result{Response: r, Err: err}
	}()
	return out
}

// Cookie is the value of the named cookie the jar holds for Base ("" when
// none).
func (c *Client) Cookie(name string) string {
	if c.HTTP.Jar == nil {
		return ""
	}
	req, err := http.NewRequest(http.MethodGet, c.Base+"/", nil)
	if err != nil {
		return ""
	}
	for _, ck := range c.HTTP.Jar.Cookies(req.URL) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

// Response is an answer read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// ContentLength is the length the answer announced (-1 unknown), as
	// http.Response has it: for HEAD, the length of what GET would send.
	ContentLength int64
	Elapsed       time.Duration

	method, path string
}

func (r *Response) String() string {
	return fmt.Sprintf("%s %s: %d %.500s", r.method, r.path, r.Status, r.Body)
}

// IsJSON tells whether the answer says it is JSON and is.
func (r *Response) IsJSON() bool {
	return strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") && json.Valid(r.Body)
}

// Expect fails the test unless the status is status; it returns r.
func (r *Response) Expect(t testing.TB, status int) *Response {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s %s: status %d, want %d; body %.1000s", r.method, r.path, r.Status, status, r.Body)
	}
	return r
}

// ExpectError fails the test unless the status is status and the body is a
// JSON error whose code is code (any non-empty code when code is ""); it
// returns the body.
func (r *Response) ExpectError(t testing.TB, status int, code string) map[string]any {
	t.Helper()
	r.Expect(t, status)
	m := r.Object(t)
	if c, _ := m["code"].(string); c == "" || (code != "" && c != code) {
		t.Fatalf("%s %s: code %q, want %q; body %.1000s", r.method, r.path, c, code, r.Body)
	}
	return m
}

// JSON decodes the body into v or fails the test.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%s %s: status %d, body is not the JSON expected (%v): %.1000q", r.method, r.path, r.Status, err, r.Body)
	}
}

// Object is the body as a JSON object (nil for an empty body), or fails
// the test.
func (r *Response) Object(t testing.TB) map[string]any {
	t.Helper()
	if len(r.Body) == 0 {
		return nil
	}
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Objects is the array of JSON objects under key in a decoded body (a
// listing's "logs", "users", "files"); it fails the test when there is none
// or an element is not an object.
func Objects(t testing.TB, body map[string]any, key string) []map[string]any {
	t.Helper()
	raw, ok := body[key].([]any)
	if !ok {
		t.Fatalf("no %s array in %v", key, body)
	}
	out := make([]map[string]any, len(raw))
	for i, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("%s[%d] is not an object: %v", key, i, r)
		}
		out[i] = m
	}
	return out
}

// Eventually calls cond until it returns nil, failing the test with its
// last error when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Within(timeout, cond); err != nil {
		t.Fatalf("after %v: %v", timeout, err)
	}
}

// Until is Eventually for a condition without an error: it fails the test
// saying what was awaited.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, func() error {
		if !cond() {
			return fmt.Errorf("still waiting for %s", what)
		}
		return nil
	})
}

// Within calls cond until it returns nil or timeout passes, and returns
// cond's last error then (for goroutines, which must not fail a test).
func Within(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	wait := 10 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
		if wait < 100*time.Millisecond {
			wait *= 2
		}
	}
}
