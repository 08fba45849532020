package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// rawHitter sends one prepared HTTP/1.1 request again and again, each worker
// over its own keep-alive connection, and reads each answer with no more
// work than checking its status and skipping its body. It is the load
// generator of the request-rate measures: net/http's client hands every
// request between three goroutines (the caller's and the connection's read
// and write loops), and at a few hundred requests per second each hand-off
// wakes a thread on the two cores being measured (about 0.5 ms of the bench
// process's CPU per sign-in, against about 0.35 here, the NATS server in the
// same process included). The argon2id bound has no client at all, so a
// lighter client measures the platform more exactly; both sides of every
// comparison use the same one.
type rawHitter struct {
	addr string
	req  []byte
	want int
	conn []*rawConn
}

type rawConn struct {
	c net.Conn
	r *bufio.Reader
}

// newRawHitter prepares method url with body (JSON when not nil, unless hdr
// names another Content-Type: a multipart form, say) and the headers hdr,
// for workers concurrent workers.
func newRawHitter(method, rawURL string, body []byte, hdr map[string]string, want, workers int) (*rawHitter, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("raw load: %s: only http", rawURL)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: acme-bench\r\n", method, u.RequestURI(), u.Host)
	typed := false
	keys := make([]string, 0, len(hdr))
	for k := range hdr {
		keys = append(keys, k)
		typed = typed || http.CanonicalHeaderKey(k) == "Content-Type"
	}
	if body != nil {
		if !typed {
			b.WriteString("Content-Type: application/json\r\n")
		}
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\r\n", http.CanonicalHeaderKey(k), hdr[k])
	}
	b.WriteString("\r\n")
	b.Write(body)
	return &rawHitter{addr: u.Host, req: b.Bytes(), want: want, conn: make([]*rawConn, workers)}, nil
}

// hit is one request from worker w (a load function: one goroutine per w).
func (h *rawHitter) hit(w int) error {
	c := h.conn[w]
	if c == nil {
		nc, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
		if err != nil {
			return err
		}
		c = &rawConn{c: nc, r: bufio.NewReaderSize(nc, 16<<10)}
		h.conn[w] = c
	}
	status, keep, body, err := c.roundTrip(h.req)
	if err != nil || !keep {
		c.c.Close()
		h.conn[w] = nil
	}
	if err != nil {
		return err
	}
	if status != h.want {
		return fmt.Errorf("raw load: status %d, want %d: %s", status, h.want, body)
	}
	return nil
}

// close closes every worker's connection.
func (h *rawHitter) close() {
	for i, c := range h.conn {
		if c != nil {
			c.c.Close()
			h.conn[i] = nil
		}
	}
}

// roundTrip writes req and reads one response: its status, whether the
// connection may be used again, and, for an error status, the start of its
// body.
func (c *rawConn) roundTrip(req []byte) (int, bool, []byte, error) {
	_ = c.c.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := c.c.Write(req); err != nil {
		return 0, false, nil, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, false, nil, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, false, nil, fmt.Errorf("raw load: bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, nil, fmt.Errorf("raw load: bad status line %q", line)
	}
	length, chunked, keep := int64(-1), false, true
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, false, nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, nil, fmt.Errorf("raw load: bad header %q", line)
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(v), 10, 64); err != nil || length < 0 {
				return 0, false, nil, fmt.Errorf("raw load: bad Content-Length %q", v)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			keep = !bytes.EqualFold(v, []byte("close"))
		}
	}
	var snippet bytes.Buffer
	sink := io.Writer(io.Discard)
	if status >= 400 {
		sink = &capped{&snippet, 200}
	}
	switch {
	case chunked:
		_, err = io.Copy(sink, httputil.NewChunkedReader(c.r))
		if err == nil {
			// The trailer section ends with an empty line.
			for {
				line, err := c.r.ReadSlice('\n')
				if err != nil {
					return 0, false, nil, err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					break
				}
			}
		}
	case length >= 0 && status >= 400:
		_, err = io.CopyN(sink, c.r, length)
	case length >= 0:
		_, err = c.r.Discard(int(length))
	case status == http.StatusNoContent || status == http.StatusNotModified || status/100 == 1:
	default:
		return 0, false, nil, errors.New("raw load: a response with neither a length nor chunks")
	}
	if err != nil {
		return 0, false, nil, err
	}
	return status, keep, snippet.Bytes(), nil
}

// capped keeps the first n bytes written to it and drops the rest.
type capped struct {
	b *bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if left := c.n - c.b.Len(); left > 0 {
		c.b.Write(p[:min(left, len(p))])
	}
	return len(p), nil
}
