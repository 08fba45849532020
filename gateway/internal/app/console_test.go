package app

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/gateway/internal/console"
	"github.com/acme/platform/pkg/testkit/apptest"
)

func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func TestConsolePagesAndHeaders(t *testing.T) {
	g := startGateway(t, nil)
	for _, p := range []string{"/", "/console"} {
		resp, err := noRedirect().Get(g.url + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/console/" {
			t.Errorf("%s: %d → %q, want 302 → /console/", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	for path, ctype := range map[string]string{
		"/console/":                 "text/html",
		"/console/assets/app.js":    "text/javascript",
		"/console/assets/logs.js":   "text/javascript",
		"/console/assets/style.css": "text/css",
	} {
		resp, err := http.Get(g.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || len(body) == 0 {
			t.Errorf("%s: %d %q (%d bytes)", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if csp != console.CSP || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, resp.Header)
		}
		// Revalidation with the ETag.
		req, _ := http.NewRequest("GET", g.url+path, nil)
		req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
		again, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		again.Body.Close()
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("%s with its ETag: %d", path, again.StatusCode)
		}
	}
	// The page has no inline script or style: everything comes from files
	// the CSP allows.
	resp, _ := http.Get(g.url + "/console/")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, bad := range []string{"<script>", "<style", " style=", " onclick=", "javascript:", "http://", "https://"} {
		if strings.Contains(string(page), bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
	for _, p := range []string{"/console/assets/nope.js", "/console/assets/index.html", "/console/assets/../console.go"} {
		resp, err := http.Get(g.url + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
}

// Browsers mark every request with Sec-Fetch-Site; an unsafe one from
// another site is refused even if no Origin came with it. Non-browser
// clients (no such header) and the console itself (same-origin) pass.
func TestCrossSiteUnsafeRequestsRefused(t *testing.T) {
	g := startGateway(t, nil)
	cases := []struct {
		name, method, site, origin string
		want                       int
	}{
		{"post403_crossSite", "POST", "cross-site", "", 403},
		{"patch403_sameSiteSibling", "PATCH", "same-site", "", 403},
		{"delete403_crossSite", "DELETE", "cross-site", "", 403},
		{"post200_sameOrigin", "POST", "same-origin", "", 200},
		{"post200_none", "POST", "none", "", 200},
		{"post200_noHeader", "POST", "", "", 200},
		{"post200_allowedOrigin", "POST", "cross-site", "https://app.example.com", 200},
		{"get200_crossSite", "GET", "cross-site", "", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := "/me"
			if c.method == "POST" {
				path = "/signin"
			}
			hdr := map[string]string{}
			if c.site != "" {
				hdr["Sec-Fetch-Site"] = c.site
			}
			if c.origin != "" {
				hdr["Origin"] = c.origin
			}
			status, body := do(t, c.method, g.url+path, userCookie, `{}`, hdr)
			if status != c.want {
				t.Fatalf("%d %v, want %d", status, body, c.want)
			}
			if c.want == 403 && body["code"] != "forbidden_origin" {
				t.Fatalf("code %v", body["code"])
			}
		})
	}
}

// sseUpstream streams an event every 20ms until its client goes away.
type sseUpstream struct {
	open, closed atomic.Int64
}

func (s *sseUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/log/tail" {
		(&fakeAuth{}).ServeHTTP(w, r)
		return
	}
	s.open.Add(1)
	defer s.closed.Add(1)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	for i := 0; ; i++ {
		if _, err := io.WriteString(w, "event: log\ndata: {\"n\":"+strconv.Itoa(i)+"}\n\n"); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestEventStreamThroughGateway(t *testing.T) {
	up := &sseUpstream{}
	fa := &fakeAuth{}
	r := runGateway(t, map[string]http.Handler{"auth": fa, "logs": up}, io.Discard, map[string]string{"GATEWAY_SHUTDOWN_GRACE": "20s"})
	open := func() (*http.Response, *bufio.Reader) {
		req, _ := http.NewRequest("GET", r.url+"/log/tail", nil)
		req.AddCookie(&http.Cookie{Name: "sessionId", Value: adminCookie})
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%d %v", resp.StatusCode, resp.Header)
		}
		return resp, bufio.NewReader(resp.Body)
	}

	// Events arrive one by one, not buffered: three events within a
	// fraction of what buffering a 32 KiB chunk would take.
	resp, rd := open()
	start := time.Now()
	for n := 0; n < 3; {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("three events took %v through the gateway", d)
	}
	// The client going away ends the upstream stream.
	resp.Body.Close()
	apptest.Until(t, 5*time.Second, "upstream stream ended after the client left", func() bool { return up.closed.Load() == 1 })

	// Shutdown ends open streams at once instead of waiting its grace.
	resp, rd = open()
	defer resp.Body.Close()
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	r.stop()
	select {
	case <-r.svc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("gateway shutdown held by an event stream")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v with an open stream", d)
	}
	apptest.Until(t, 5*time.Second, "upstream stream ended at shutdown", func() bool { return up.closed.Load() == 2 })
}
