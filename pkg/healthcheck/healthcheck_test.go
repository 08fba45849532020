package healthcheck

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// readyServer answers /readyz with *status and counts the calls; any other
// path is 404, so a probe of the wrong path fails.
func readyServer(t *testing.T, status *atomic.Int32) (port string, calls *atomic.Int32) {
	t.Helper()
	calls = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(`{"status":"x"}`))
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port, calls
}

func TestProbe(t *testing.T) {
	var status atomic.Int32
	port, calls := readyServer(t, &status)
	cases := []struct {
		name   string
		status int
		addr   string
		def    string
		want   int
	}{
		{"ready200", 200, ":" + port, "", 0},
		{"readyWildcardHost", 200, "0.0.0.0:" + port, "", 0},
		{"readyFromDefault", 200, "", "127.0.0.1:" + port, 0},
		{"notReady503", 503, ":" + port, "", 1},
		{"notReady500", 500, "127.0.0.1:" + port, "", 1},
		{"badAddress", 200, "8081", "", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status.Store(int32(c.status))
			var stderr bytes.Buffer
			if got := Probe(c.addr, c.def, &stderr); got != c.want {
				t.Fatalf("exit %d, want %d (stderr %q)", got, c.want, stderr.String())
			}
			if c.want != 0 && !strings.Contains(stderr.String(), "healthcheck:") {
				t.Fatalf("a failure must say why on stderr, got %q", stderr.String())
			}
		})
	}
	if calls.Load() != 5 {
		t.Fatalf("server saw %d probes of %s, want 5", calls.Load(), Path)
	}
}

func TestProbeNothingListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var stderr bytes.Buffer
	if got := Probe(addr, "", &stderr); got != 1 {
		t.Fatalf("exit %d with nothing listening", got)
	}
}

func TestURL(t *testing.T) {
	for addr, want := range map[string]string{
		":8081":          "http://127.0.0.1:8081/readyz",
		"0.0.0.0:8082":   "http://127.0.0.1:8082/readyz",
		"[::]:8083":      "http://127.0.0.1:8083/readyz",
		"127.0.0.1:8080": "http://127.0.0.1:8080/readyz",
		"10.1.2.3:8080":  "http://10.1.2.3:8080/readyz",
		"[::1]:8080":     "http://[::1]:8080/readyz",
	} {
		if got, err := URL(addr); err != nil || got != want {
			t.Errorf("URL(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	for _, addr := range []string{"", "8081", ":0", "host:"} {
		if got, err := URL(addr); err == nil {
			t.Errorf("URL(%q) = %q, want an error", addr, got)
		}
	}
}

func TestRequested(t *testing.T) {
	for _, args := range [][]string{{"healthcheck"}, {"-healthcheck"}, {"--healthcheck"}} {
		if !Requested(args) {
			t.Errorf("%v not recognised", args)
		}
	}
	for _, args := range [][]string{nil, {}, {"serve"}, {"-h"}, {"x", "healthcheck"}} {
		if Requested(args) {
			t.Errorf("%v taken for a probe", args)
		}
	}
}
