package e2e

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"

	"github.com/acme/platform/pkg/embedded"
)

// natsCLI runs the NATS command-line tool (built once from its pinned
// module) against url, as a user types it.
func natsCLI(t *testing.T, natsURL string, args ...string) {
	testkit.SkipShort(t)
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := embedded.NATSCLIBinary(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--server", natsURL}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no saved NATS context
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// waitLogs polls a listing until cond holds (20 s at most).
func waitLogs(t *testing.T, c *client, path string, cond func([]map[string]any) bool) []map[string]any {
	t.Helper()
	var ls []map[string]any
	apptest.Eventually(t, 20*time.Second, func() error {
		if ls = logsOf(t, c.mustStatus(201, "GET", path, nil)); !cond(ls) {
			return fmt.Errorf("GET %s: still %v", path, ls)
		}
		return nil
	})
	return ls
}

// search reads every page of a q= listing through the gateway, following
// the cursor of partial pages and of full ones, and returns the bodies in
// the order listed and how many pages were partial.
func search(t *testing.T, c *client, path string) (bodies []string, partial int) {
	t.Helper()
	cursor := ""
	for range 1000 {
		u := path
		if cursor != "" {
			u += "&before=" + cursor
		}
		m := c.mustStatus(201, "GET", u, nil)
		ls := logsOf(t, m)
		for _, l := range ls {
			bodies = append(bodies, l["logBody"].(string))
		}
		switch {
		case m["partial"] == true:
			partial++
			cursor, _ = m["cursor"].(string)
			if cursor == "" {
				t.Fatalf("GET %s: partial without a cursor: %v", u, m)
			}
		case len(ls) > 0 && strings.Contains(path, "limit=1&") && len(ls) == 1:
			cursor = ls[0]["id"].(string)
		default:
			return bodies, partial
		}
	}
	t.Fatalf("GET %s: more than 1000 pages", path)
	return nil, 0
}

// Search, export, volume over time and plain NATS publishers, through the
// gateway. The search budget is 1ns here, so every search that does not
// fill its page from the newest chunk it reads answers partial: true with
// a cursor, and the results are what following the cursors finds.
func TestLogsQueryThroughGateway(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"LOGS_SEARCH_BUDGET": "1ns"})
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	lv, _ := launched.Load(p)
	servers := lv.(launch).servers

	// Plain publishers: `nats pub` without a Nats-Msg-Id, a text payload
	// and a JSON one; each stream message is one record.
	subj := servers.SubjectPrefix + ".logs.SERVER-APP-C.error"
	natsCLI(t, servers.NATSURL, "pub", subj, "upstream Timeout after 3s")
	natsCLI(t, servers.NATSURL, "pub", subj, "upstream Timeout after 3s")
	natsCLI(t, servers.NATSURL, "pub", subj, `{"logBody":"json without a message id","metricsId":"plain-1"}`)
	ls := waitLogs(t, admin, "/log/error/1/SERVER-APP-C", func(ls []map[string]any) bool { return len(ls) >= 3 })
	time.Sleep(2 * time.Second) // anything redelivered or stored twice would show now
	ls = logsOf(t, admin.mustStatus(201, "GET", "/log/error/1/SERVER-APP-C", nil))
	if len(ls) != 3 || ls[0]["logBody"] != "json without a message id" || ls[0]["metricsId"] != "plain-1" ||
		ls[1]["logBody"] != "upstream Timeout after 3s" || ls[2]["logBody"] != "upstream Timeout after 3s" || ls[1]["app"] != "SERVER-APP-C" {
		t.Fatalf("plain publishes: %v", ls)
	}
	if dead, _ := admin.mustStatus(200, "GET", "/log/dead", nil)["deadLetters"].([]any); len(dead) != 0 {
		t.Fatalf("plain publishes dead-lettered: %v", dead)
	}

	// Records to search, oldest first, each its own write (its own chunk).
	posts := []map[string]any{
		{"app": "SERVER-APP-A", "type": "error", "logBody": "database TIMEOUT on orders", "metricsId": "req-1"},
		{"app": "SERVER-APP-B", "type": "error", "logBody": "disk full on /var"},
		{"app": "SERVER-APP-A", "type": "error", "logBody": "the disk is almost full"},
		{"app": "SERVER-APP-A", "type": "log", "logBody": "timeout raised to 5s"},
		{"app": "SERVER-APP-B", "type": "error", "logBody": "read timeout", "metricsId": "req-2"},
		{"app": "SERVER-APP-A", "type": "error", "logBody": "all good", "metricsId": "timeout-probe"},
	}
	for _, b := range posts {
		admin.mustStatus(201, "POST", "/log", b)
	}
	for _, c := range []struct {
		path string
		want []string
	}{
		// Words, case-insensitive, in the message or the metricsId, newest first.
		{"/log/error/1?q=timeout", []string{"all good", "read timeout", "database TIMEOUT on orders", "upstream Timeout after 3s", "upstream Timeout after 3s"}},
		{"/log/error/1?q=DISK+full", []string{"the disk is almost full", "disk full on /var"}},
		// A phrase.
		{"/log/error/1?q=" + url.QueryEscape(`"disk full"`), []string{"disk full on /var"}},
		// Combined with the app, metricsId, type and time filters.
		{"/log/error/1/SERVER-APP-A?q=timeout", []string{"all good", "database TIMEOUT on orders"}},
		{"/log/error/1?q=timeout&metricsId=req-2", []string{"read timeout"}},
		{"/log/log/1?q=timeout", []string{"timeout raised to 5s"}},
		{"/log/error/1?q=timeout&from=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), nil},
		{"/log/error/1?q=nothing-has-this", nil},
		// One record a page: the cursor goes on from each.
		{"/log/error/1?limit=1&q=timeout", []string{"all good", "read timeout", "database TIMEOUT on orders", "upstream Timeout after 3s", "upstream Timeout after 3s"}},
	} {
		got, _ := search(t, admin, c.path)
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("GET %s: %q, want %q", c.path, got, c.want)
		}
	}
	// The newest matching record is in the newest chunk: a full page at
	// once. An older one needs more chunks than the 1ns budget allows:
	// a partial page with a cursor first.
	if m := admin.mustStatus(201, "GET", "/log/error/1?limit=1&q=good", nil); m["partial"] != nil || len(logsOf(t, m)) != 1 {
		t.Fatalf("first chunk search: %v", m)
	}
	if _, partial := search(t, admin, "/log/error/1?q=orders"); partial == 0 {
		t.Fatal("a search over many chunks with a 1ns budget was never partial")
	}
	for _, q := range []string{`"open`, "", strings.Repeat("x", 300), "a b c d e f g h i j k l m n o p q"} {
		if m := admin.mustStatus(400, "GET", "/log/error/1?q="+url.QueryEscape(q), nil); m["field"] != "q" || m["code"] != "invalid_query" {
			t.Fatalf("q=%q: %v", q, m)
		}
	}

	// Export: NDJSON with the same filters, gzip on request.
	export := func(query string, gz bool) []map[string]any {
		t.Helper()
		req, _ := http.NewRequest("GET", gw+"/log/export?"+query, nil)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		resp, err := admin.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("export %s: %d %s %s", query, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		var body io.Reader = resp.Body
		if gz {
			if resp.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("export %s: Content-Encoding %q", query, resp.Header.Get("Content-Encoding"))
			}
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			body = zr
		}
		var out []map[string]any
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("export line %q: %v", sc.Text(), err)
			}
			if m["error"] != nil {
				t.Fatalf("export %s interrupted: %v", query, m)
			}
			out = append(out, m)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := export("type=error&q=timeout", false); len(got) != 5 || got[0]["logBody"] != "all good" || got[0]["metricsId"] != "timeout-probe" || got[0]["id"] == nil || got[0]["createdAt"] == nil {
		t.Fatalf("export q=timeout: %v", got)
	}
	if got := export("app=SERVER-APP-A", true); len(got) != 4 || got[0]["type"] != "log" || got[1]["logBody"] != "all good" {
		t.Fatalf("export app=SERVER-APP-A (gzip): %v", got)
	}
	total := 0
	for _, typ := range []string{"log", "error", "db"} {
		total += listAll(t, admin, "/log/"+typ+"/1?limit=500")
	}
	if got := export("", true); len(got) != total {
		t.Fatalf("export of everything: %d lines, %d records listed", len(got), total)
	}
	admin.mustStatus(400, "GET", "/log/export?type=warning", nil)
	admin.mustStatus(400, "GET", "/log/export?q=%22open", nil)
	admin.mustStatus(400, "GET", "/log/export?from=yesterday", nil)
	if m := admin.mustStatus(404, "GET", "/log/export?app=NOPE", nil); m["sentAppName"] != "NOPE" {
		t.Fatalf("export of an unknown app: %v", m)
	}

	// Volume over time: this hour's records, per type and per app.
	now := time.Now().UTC()
	from := now.Truncate(time.Hour).Add(-2 * time.Hour)
	to := from.Add(4 * time.Hour)
	q := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}, "step": {"1h"}}
	st := admin.mustStatus(200, "GET", "/log/stats?"+q.Encode(), nil)
	buckets, _ := st["buckets"].([]any)
	if len(buckets) != 4 || st["step"] != "1h0m0s" {
		t.Fatalf("stats: %v", st)
	}
	sum := map[string]float64{}
	for _, b := range buckets {
		for k, v := range b.(map[string]any)["counts"].(map[string]any) {
			sum[k] += v.(float64)
		}
	}
	logCount := float64(listAll(t, admin, "/log/log/1?limit=500"))
	if sum["error"] != 8 || sum["log"] != logCount || sum["db"] != 0 {
		t.Fatalf("stats sums %v, want error 8, log %v (listed), db 0: %v", sum, logCount, st)
	}
	q.Set("app", "SERVER-APP-A")
	st = admin.mustStatus(200, "GET", "/log/stats?"+q.Encode(), nil)
	var appErrors float64
	for _, b := range st["buckets"].([]any) {
		appErrors += b.(map[string]any)["counts"].(map[string]any)["error"].(float64)
	}
	if appErrors != 3 || st["app"] != "SERVER-APP-A" {
		t.Fatalf("stats of SERVER-APP-A: %v", st)
	}
	for _, bad := range []string{"step=0s", "step=abc", "from=x", "from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "step=1s&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z"} {
		admin.mustStatus(400, "GET", "/log/stats?"+bad, nil)
	}
	admin.mustStatus(404, "GET", "/log/stats?app=NOPE", nil)
}
