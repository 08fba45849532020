package testkit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// RawResponse is what RawRequest read back.
type RawResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// RawRequest sends a request (JSON unless headers name another
// Content-Type) over a plain TCP connection to addr
// (host:port or http://host:port), ignoring a failed write, then reads the
// answer. A server that refuses a body by its length answers and closes
// before reading it; Go's HTTP client would report the broken write instead
// of the answer, so tests of 413 use this.
func RawRequest(t testing.TB, addr, method, path string, headers map[string]string, body string) RawResponse {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n", method, path, len(body))
	if _, ok := headers["Content-Type"]; !ok {
		b.WriteString("Content-Type: application/json\r\n")
	}
	for k, v := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	_, _ = conn.Write([]byte(b.String())) // the server may close before reading it all
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return RawResponse{Status: res.StatusCode, Header: res.Header, Body: data}
}
