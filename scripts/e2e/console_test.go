package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// chromiumPath is Debian's Chromium (apt-get install chromium; .ci/run
// installs it).
const chromiumPath = "/usr/bin/chromium"

// TestConsoleInBrowser drives the web console in headless Chromium with
// playwright-core (browser/console.mjs): sign in (a wrong password first),
// edit the profile, upload a file and download it, and, as the
// administrator, watch a record published on NATS appear in the live tail
// within a second and a message that can never be a record appear among the
// dead letters. Screenshots of every page go to artifacts/console/.
//
// It fails, not skips, when node, Chromium or the npm packages are missing
// (`make test` runs `npm ci` first); set CONSOLE_BROWSER=skip to skip it on
// a machine without a browser.
func TestConsoleInBrowser(t *testing.T) {
	if os.Getenv("CONSOLE_BROWSER") == "skip" {
		t.Skip("CONSOLE_BROWSER=skip")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required for the browser tests (Debian: apt-get install nodejs npm)")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is required for the browser tests (Debian: apt-get install chromium): %v", chromiumPath, err)
	}
	if _, err := os.Stat(filepath.Join("browser", "node_modules", "playwright-core")); err != nil {
		t.Fatal("playwright-core is not installed: run `npm ci --prefix scripts/e2e/browser` (make test does)")
	}
	artifacts, err := filepath.Abs(filepath.Join("artifacts", "console"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}

	avatar := filepath.Join(artifacts, "avatar.png")
	if err := os.WriteFile(avatar, testPNG(t, 2, 2), 0o644); err != nil {
		t.Fatal(err)
	}

	p, sec, _ := platform(t, nil)
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "grace@example.com", "password": "correct horse battery", "fullName": "Grace Hopper", "edv": "E-7",
	})

	// The records the live tail must show are published the way services
	// do it, with pkg/logclient over NATS.
	s := testkit.Get(t)
	lv, _ := launched.Load(p)
	nc, err := nats.Connect(s.NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lc, err := logclient.New(nc, logclient.Options{Prefix: lv.(launch).servers.SubjectPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	// Thirty records for the listing's pages (20 a page).
	for i := range 30 {
		if !lc.Log("SERVER-APP-B", logclient.TypeLog, fmt.Sprintf("paging record %02d", i), "") {
			t.Fatal("logclient refused a record")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "console.mjs")
	cmd.Dir = "browser"
	cmd.Env = append(os.Environ(),
		"GATEWAY_URL="+p.GatewayURL, "CHROMIUM="+chromiumPath, "ARTIFACTS="+artifacts, "AVATAR_PNG="+avatar,
		"ADMIN_EMAIL="+sec.AdminEmail, "ADMIN_PASSWORD="+sec.AdminPassword,
		"USER_EMAIL=grace@example.com", "USER_PASSWORD=correct horse battery")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The script prints "publish <body>" when the live tail is open; the
	// record is published then, and the script gives it one second.
	sc := bufio.NewScanner(stdout)
	var out []string
	for sc.Scan() {
		line := sc.Text()
		out = append(out, line)
		if body, ok := strings.CutPrefix(line, "publish "); ok {
			if !lc.Log("SERVER-APP-A", logclient.TypeError, body, "console-e2e") {
				t.Error("logclient refused the record")
			}
			fmt.Fprintln(stdin, "published")
		}
		if text, ok := strings.CutPrefix(line, "poison "); ok {
			// Valid JSON with a field the payload does not have: the writer
			// dead-letters it.
			data, _ := json.Marshal(map[string]string{"marker": text})
			m := &nats.Msg{Subject: logclient.Subject(lv.(launch).servers.SubjectPrefix, "SERVER-APP-A", "log"), Data: data, Header: nats.Header{}}
			m.Header.Set(jetstream.MsgIDHeader, "console-poison-"+text)
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Errorf("publish the poison message: %v", err)
			}
			fmt.Fprintln(stdin, "published")
		}
	}
	err = cmd.Wait()
	t.Logf("browser script:\n%s", strings.Join(out, "\n"))
	if err != nil {
		t.Fatalf("browser scenarios failed: %v (screenshots in %s)", err, artifacts)
	}
}

// The live tail through the gateway, as EventSource uses it: admins only,
// checked input, events as they are published on NATS, unbuffered.
func TestLiveTailThroughGateway(t *testing.T) {
	p, sec, _ := platform(t, nil)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "linus@example.com", "password": "correct horse battery", "fullName": "Linus", "edv": "E-9",
	})
	user := signIn(t, p.GatewayURL, "linus@example.com", "correct horse battery")

	apps := admin.mustStatus(200, "GET", "/log/apps", nil)["apps"].([]any)
	if len(apps) != 6 {
		t.Fatalf("apps: %v", apps)
	}
	user.mustStatus(403, "GET", "/log/apps", nil)
	user.mustStatus(403, "GET", "/log/tail", nil)
	newClient(t, p.GatewayURL).mustStatus(401, "GET", "/log/tail", nil)
	if b := admin.mustStatus(400, "GET", "/log/tail?type=warning", nil); b["code"] != "invalid_type" {
		t.Fatalf("bad type: %v", b)
	}
	if b := admin.mustStatus(400, "GET", "/log/tail?app=NO-SUCH-APP", nil); b["code"] != "unknown_app" || b["sentAppName"] != "NO-SUCH-APP" {
		t.Fatalf("unknown app: %v", b)
	}

	req, _ := http.NewRequest("GET", p.GatewayURL+"/log/tail?type=error", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := admin.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("tail: %d %v", resp.StatusCode, resp.Header)
	}
	events := make(chan [2]string, 16) // event, data
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var ev, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && ev != "":
				events <- [2]string{ev, data}
				ev, data = "", ""
			case strings.HasPrefix(line, "event: "):
				ev = line[7:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			}
		}
	}()
	nextEvent := func(within time.Duration) [2]string {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended")
			}
			return ev
		case <-time.After(within):
			t.Fatalf("no event within %v", within)
		}
		return [2]string{}
	}
	if ev := nextEvent(10 * time.Second); ev[0] != "ready" {
		t.Fatalf("first event %v", ev)
	}

	nc, err := nats.Connect(testkit.Get(t).NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lv, _ := launched.Load(p)
	lc, err := logclient.New(nc, logclient.Options{Prefix: lv.(launch).servers.SubjectPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	lc.Log("ACME-S3", logclient.TypeLog, "not an error: filtered out", "")
	lc.Log("ACME-S3", logclient.TypeError, "bucket gone", "tail-e2e")
	start := time.Now()
	ev := nextEvent(2 * time.Second)
	if ev[0] != "log" || !strings.Contains(ev[1], `"logBody":"bucket gone"`) || !strings.Contains(ev[1], `"type":"error"`) {
		t.Fatalf("event %v", ev)
	}
	t.Logf("tail event %v after publishing", time.Since(start))

	// A record written over HTTP appears in the tail too.
	admin.mustStatus(201, "POST", "/log", map[string]string{"app": "ACME-S3", "type": "error", "logBody": "posted over HTTP"})
	if ev := nextEvent(2 * time.Second); ev[0] != "log" || !strings.Contains(ev[1], `"logBody":"posted over HTTP"`) {
		t.Fatalf("event for the POST /log record: %v", ev)
	}
	admin.mustStatus(201, "POST", "/log", map[string]string{"app": "ACME-S3", "type": "log", "logBody": "filtered out by type"})

	// Signing out ends the open stream within the gateway's re-check
	// interval (2 s), though the stream itself was admitted before.
	admin.mustStatus(200, "DELETE", "/signout", nil)
	out := time.Now()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-events:
			if !ok {
				t.Logf("stream ended %v after sign-out", time.Since(out))
				return
			}
		case <-deadline:
			t.Fatal("the live tail still streams 10 s after its session signed out")
		}
	}
}
