package upstream

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// lines is a concurrency-safe log sink.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

func (l *lines) has(msg string) func() bool {
	return func() bool {
		for _, line := range l.all() {
			if strings.Contains(line, `"msg":"`+msg+`"`) {
				return true
			}
		}
		return false
	}
}

// topKeys counts the keys of one JSON object, duplicates included (a map
// would keep only the last).
func topKeys(t *testing.T, line string) map[string]int {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %s", line)
	}
	keys := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		keys[tok.(string)]++
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	return keys
}

// The gateway's logger names the process (service=gateway); the balancer's
// lines name the upstream under a key of their own, so every line carries
// one service key (a duplicate key is invalid for most JSON log pipelines).
func TestLogLinesCarryOneServiceKey(t *testing.T) {
	sink := &lines{}
	o := func(d *dns) Options {
		o := fast(d, nil)
		o.Log = slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug})).With("service", "gateway")
		return o
	}
	bs := startBackends(t, 2)
	d := &dns{}
	d.set(ips(bs)...)
	g := newGroup(t, []string{"http://svc.test:" + bs[0].port}, o(d))
	waitFor(t, "every address is ready", allIn(g, "ready", bs...))
	bs[0].srv.Close()
	for range 4 { // some go to the closed replica and are sent again
		req, _ := http.NewRequest(http.MethodGet, "http://svc/x", nil)
		resp, err := g.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	waitFor(t, "the closed replica is down", sink.has("upstream address down"))
	d.set(bs[1].ip)
	waitFor(t, "the address is removed", sink.has("upstream address removed"))

	seen := map[string]bool{}
	for _, line := range sink.all() {
		keys := topKeys(t, line)
		if keys["service"] != 1 || keys["upstream"] != 1 {
			t.Errorf("want one service and one upstream key: %s", line)
		}
		var v struct{ Msg, Service, Upstream string }
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatal(err)
		}
		if v.Service != "gateway" || v.Upstream != "svc" {
			t.Errorf("service %q upstream %q: %s", v.Service, v.Upstream, line)
		}
		seen[v.Msg] = true
	}
	for _, msg := range []string{"upstream address added", "upstream address ready", "upstream address down", "upstream address removed"} {
		if !seen[msg] {
			t.Errorf("no %q line among %d", msg, len(sink.all()))
		}
	}
}
