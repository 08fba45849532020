package e2e

import (
	"net/url"
	"testing"
)

// TestHostileStatsOverflow replays issue 34 row 1 against the real
// processes through the gateway: GET /log/stats from year 1 to 9999 by
// 2562047h (the bucket count overflowed and the logs service panicked on an
// index out of range, which ended the process), with an administrator's
// session and with a logs:read API key, plus the other stats inputs that
// crashed the store or failed: a range longer than a duration can hold
// (bucket count wrapped negative: a panic in make), a step of the largest
// duration, and a `to` whose UTC year is 10000 (the answer could not be
// written: a 500). Each is a 400 JSON with its precise code and field, the
// logs process is still the same running process, and it keeps answering
// (a listing and a valid stats count the record posted first).
func TestHostileStatsOverflow(t *testing.T) {
	p, sec, _ := platform(t, nil)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	// A stored record: the store only indexed its buckets for a chunk in
	// the range, so the attack needs one.
	admin.mustStatus(201, "POST", "/log", map[string]string{"app": "LOGGING", "type": "log", "logBody": "before the attack"})
	listed := func() bool {
		for _, r := range logsOf(t, admin.mustStatus(201, "GET", "/log/log/1?limit=500", nil)) {
			if r["logBody"] == "before the attack" {
				return true
			}
		}
		return false
	}
	if !listed() {
		t.Fatal("the record posted is not listed")
	}
	key := admin.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "reader", "scopes": []string{"logs:read"}})["secret"].(string)
	logsProc := p.Procs["logs"]

	for _, c := range []struct {
		from, to, step string
		code, field    string
	}{
		{"0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2562047h", "time_out_of_range", "from"}, // row 1 as reported
		{"1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2562047h", "range_too_long", "from"},
		{"2000-01-01T00:00:00Z", "2600-01-01T00:00:00Z", "1h", "range_too_long", "from"},
		{"1970-01-01T00:00:00Z", "2262-01-01T00:00:00Z", "2562047h47m16.854775807s", "", ""}, // one bucket: answered
		{"9999-12-31T00:00:00Z", "9999-12-31T23:59:59-23:59", "1h", "time_out_of_range", "to"},
		{"2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z", "1s", "too_many_buckets", "step"},
		{"", "", "-9223372036854775808ns", "invalid_step", "step"},
	} {
		q := url.Values{"step": {c.step}}
		if c.from != "" {
			q.Set("from", c.from)
			q.Set("to", c.to)
		}
		path := "/log/stats?" + q.Encode()
		for _, who := range []string{"session", "key"} {
			var status int
			var m map[string]any
			if who == "session" {
				status, m, _ = admin.do("GET", path, nil)
			} else {
				status, m = keyDo(t, p.GatewayURL, "Bearer "+key, "GET", path, nil)
			}
			switch {
			case c.code == "" && status == 200:
				if b, _ := m["buckets"].([]any); len(b) != 1 || b[0].(map[string]any)["total"].(float64) < 1 {
					t.Fatalf("%s with a %s: %v, want one bucket counting the record", path, who, m)
				}
			case status != 400 || m["code"] != c.code || m["field"] != c.field:
				t.Fatalf("%s with a %s: %d %v, want 400 %s (field %s)", path, who, status, m, c.code, c.field)
			}
			select {
			case <-logsProc.Exited():
				t.Fatalf("the logs process exited after %s with a %s", path, who)
			default:
			}
			if !listed() {
				t.Fatalf("after %s with a %s: the record is no longer listed", path, who)
			}
		}
	}
	if st := admin.mustStatus(200, "GET", "/log/stats", nil); len(st["buckets"].([]any)) != 24 {
		t.Fatalf("default stats after the attack: %v", st)
	}
}
