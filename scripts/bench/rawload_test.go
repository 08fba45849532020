package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The raw load client against a real net/http server: the request arrives
// as prepared (method, path, headers, body), answers of every framing are
// read whole so the next request on the connection works, a wrong status is
// an error, and a closed connection is dialled again.
func TestRawHitter(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != "POST" || r.URL.Path != "/signin" || r.Header.Get("Cookie") != "sessionId=abc" ||
			r.Header.Get("Content-Type") != r.URL.Query().Get("type") || len(r.Header.Values("Content-Type")) != 1 || string(body) != `{"a":1}` {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		switch r.URL.Query().Get("mode") {
		case "chunked":
			w.WriteHeader(200)
			w.(http.Flusher).Flush() // no Content-Length: chunked
			_, _ = io.WriteString(w, strings.Repeat("x", 40000))
		case "close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		case "teapot":
			w.WriteHeader(http.StatusTeapot)
		default:
			_, _ = io.WriteString(w, `{"message":"session created"}`)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	hdr := map[string]string{"cookie": "sessionId=abc"}
	for _, mode := range []string{"length", "chunked", "close"} {
		conns.Store(0)
		h, err := newRawHitter("POST", srv.URL+"/signin?type=application/json&mode="+mode, []byte(`{"a":1}`), hdr, 200, 2)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			if err := h.hit(i % 2); err != nil {
				t.Fatalf("%s: request %d: %v", mode, i, err)
			}
		}
		h.close()
		want := int32(2) // one keep-alive connection per worker
		if mode == "close" {
			want = 6
		}
		if got := conns.Load(); got != want {
			t.Errorf("%s: %d connections for 6 requests from 2 workers, want %d", mode, got, want)
		}
	}
	// A Content-Type of the caller's replaces the JSON default.
	h, err := newRawHitter("POST", srv.URL+"/signin?type=text/plain", []byte(`{"a":1}`), map[string]string{"cookie": "sessionId=abc", "content-type": "text/plain"}, 200, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.hit(0); err != nil {
		t.Fatalf("a body of the caller's type: %v", err)
	}
	h.close()
	h, err = newRawHitter("POST", srv.URL+"/signin?type=application/json&mode=teapot", []byte(`{"a":1}`), hdr, 200, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if err := h.hit(0); err == nil || !strings.Contains(err.Error(), "418") {
		t.Fatalf("a 418 answer: %v, want an error naming the status", err)
	}
}
