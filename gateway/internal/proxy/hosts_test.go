package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseOrigins(t *testing.T) {
	for _, bad := range []string{"app.example.com", "ftp://app.example.com", "https://", "https://u:p@app.example.com",
		"https://app.example.com/console", "https://app.example.com?x=1", "https://app.example.com#f"} {
		if _, err := ParseOrigins([]string{bad}); err == nil {
			t.Errorf("%q accepted as a public URL", bad)
		}
	}
	o, err := ParseOrigins([]string{"https://App.Example.com/", "http://127.0.0.1:8080", " ", "http://[::1]:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.Configured() {
		t.Fatal("not configured")
	}
	if o, _ := ParseOrigins(nil); o.Configured() {
		t.Fatal("empty list configured")
	}
}

func TestHostAllowed(t *testing.T) {
	o, _ := ParseOrigins([]string{"https://app.example.com", "http://files.example.com:8080"})
	none, _ := ParseOrigins(nil)
	for _, c := range []struct {
		host       string
		configured bool // with the public URLs above
		bare       bool // with none
	}{
		{"app.example.com", true, false},
		{"APP.example.com.", true, false},
		{"app.example.com:443", true, false},
		{"app.example.com:8443", false, false},
		{"files.example.com:8080", true, false},
		{"files.example.com", false, false},
		{"rebind.attacker.test", false, false},
		{"rebind.attacker.test:8080", false, false},
		{"example.com", false, false},
		{"127.0.0.1:8080", true, true},
		{"127.0.0.1", true, true},
		{"10.1.2.3:8080", true, true},
		{"[::1]:8080", true, true},
		{"localhost:8080", true, true},
		{"localhost", true, true},
		{"x.localhost:8080", false, false},
		{"2130706433", false, false}, // a number, not a dotted address: a name
		{"", false, false},
	} {
		if got := o.HostAllowed(c.host); got != c.configured {
			t.Errorf("configured: Host %q allowed=%v, want %v", c.host, got, c.configured)
		}
		if got := none.HostAllowed(c.host); got != c.bare {
			t.Errorf("unconfigured: Host %q allowed=%v, want %v", c.host, got, c.bare)
		}
	}
}

func TestOwnOrigin(t *testing.T) {
	o, _ := ParseOrigins([]string{"https://app.example.com", "http://files.example.com:8080"})
	req := func(host string, tlsOn bool) *http.Request {
		r := httptest.NewRequest("POST", "http://"+host+"/signin", nil)
		r.Host = host
		if tlsOn {
			r.TLS = &tls.ConnectionState{}
		}
		return r
	}
	for _, c := range []struct {
		origin, host string
		tls          bool
		want         bool
	}{
		{"https://app.example.com", "app.example.com", false, true}, // behind a TLS proxy
		{"https://app.example.com:443", "app.example.com", false, true},
		{"http://app.example.com", "app.example.com", false, false},
		{"https://app.example.com:8443", "app.example.com", false, false},
		{"http://files.example.com:8080", "files.example.com:8080", false, true},
		{"http://files.example.com", "files.example.com:8080", false, false},
		{"http://127.0.0.1:8080", "127.0.0.1:8080", false, true},
		{"https://127.0.0.1:8080", "127.0.0.1:8080", false, false}, // the scheme counts
		{"https://127.0.0.1:8080", "127.0.0.1:8080", true, true},
		{"http://127.0.0.1:9999", "127.0.0.1:8080", false, false},
		{"http://localhost:8080", "localhost:8080", false, true},
		{"http://localhost:8080", "127.0.0.1:8080", false, false},
		{"http://[::1]:8080", "[::1]:8080", false, true},
		{"http://rebind.attacker.test", "rebind.attacker.test", false, false},
		{"null", "127.0.0.1:8080", false, false},
		{"http://127.0.0.1:8080/path", "127.0.0.1:8080", false, false},
	} {
		if got := o.Own(c.origin, req(c.host, c.tls)); got != c.want {
			t.Errorf("Origin %q, Host %q (tls %v): own=%v, want %v", c.origin, c.host, c.tls, got, c.want)
		}
	}
}

func TestCheckHost(t *testing.T) {
	o, _ := ParseOrigins([]string{"https://app.example.com"})
	h := CheckHost(o, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) }))
	for _, c := range []struct {
		host, path string
		hdr        map[string]string
		want       int
	}{
		{"app.example.com", "/signin", nil, 299},
		{"evil.test", "/signin", nil, 421},
		{"evil.test", "/me", map[string]string{"Cookie": "sessionId=x"}, 421},
		{"evil.test", "/files", map[string]string{"Authorization": "Bearer acme_x"}, 299},  // the proxy checks the key
		{"evil.test", "/signin", map[string]string{"Authorization": "Bearer acme_x"}, 421}, // a public route takes no key
		{"evil.test", "/ms/me", map[string]string{"X-Service-Credential": "c"}, 299},
		{"evil.test", "/ms/me", map[string]string{"Authorization": "Bearer acme_x"}, 421},
		{"evil.test", "/v1/logs", map[string]string{"X-Service-Credential": "c"}, 299},
		{"evil.test", "/healthz", nil, 299},
		{"evil.test", "/readyz", nil, 299},
		{"evil.test", "/console/", nil, 421},
		{"evil.test", "/no/such/route", map[string]string{"Authorization": "Bearer acme_x"}, 421},
	} {
		r := httptest.NewRequest("GET", "http://x"+c.path, nil)
		r.Host = c.host
		for k, v := range c.hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s %s %v: %d, want %d", c.host, c.path, c.hdr, w.Code, c.want)
		}
		if w.Code == 421 && (w.Header().Get("Content-Type") != "application/json" || !strings.Contains(w.Body.String(), `"misdirected_request"`)) {
			t.Errorf("421 without its JSON body: %s", w.Body)
		}
	}
}
