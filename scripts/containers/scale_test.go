//go:build containers

package containers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestScale scales each service of the compose stack under load, kills
// replicas, cuts one off the bus, stops MongoDB and upgrades a service,
// and counts what clients saw. Every figure goes into the table the test
// prints (docs/deployment.md quotes it).
func TestScale(t *testing.T) {
	ports, err := freePortRange(2)
	must(t, err)
	s := newStack(t, map[string]string{"GATEWAY_PORT": fmt.Sprintf("%d-%d", ports, ports+1)})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	scale := map[string]int{"auth": 1, "files": 1, "logs": 1, "gateway": 2}
	up := func(extra ...string) time.Duration {
		args := []string{"--no-recreate"}
		for _, svc := range []string{"auth", "files", "logs", "gateway"} {
			args = append(args, "--scale", fmt.Sprintf("%s=%d", svc, scale[svc]))
		}
		return s.Up(ctx, append(args, extra...)...)
	}
	took := up()
	report("up -d --wait, two gateways", took.Round(time.Second).String())
	gws, err := s.GatewayURLs(ctx, 2)
	must(t, err)
	s.GatewayURL = gws[0]

	// The load's users and a file to read.
	admin := NewClient(gws[0])
	must(t, admin.SignIn(s.Env["ADMIN_EMAIL"], s.Env["ADMIN_PASSWORD"]))
	const password = "correct horse battery"
	_, err = admin.Expect(201, "POST", "/users", map[string]string{"email": "load@example.com", "password": password, "fullName": "Load", "edv": "E-2"})
	must(t, err)
	var users []*Client
	for i := range 6 {
		c := NewClient(gws[i%2])
		must(t, c.SignIn("load@example.com", password))
		users = append(users, c)
	}
	up1, err := users[0].Upload("/upload/file", "load.txt", "text/plain", []byte(strings.Repeat("load ", 200)), "")
	must(t, err)
	var file struct{ File struct{ ID string } }
	if up1.Status != 201 || json.Unmarshal(up1.Body, &file) != nil {
		t.Fatalf("upload: %s", up1)
	}
	reads := func() []Op {
		var ops []Op
		for i, c := range users {
			ops = append(ops, Op{Name: "GET /me", Idempotent: true, Do: func() (Response, error) { return c.Do("GET", "/me", nil, nil) }})
			if i%2 == 0 {
				ops = append(ops, Op{Name: "GET /retrieve/file", Idempotent: true, Do: func() (Response, error) {
					return c.Do("GET", "/retrieve/file/"+file.File.ID, nil, nil)
				}})
			}
		}
		ops = append(ops, Op{Name: "GET /log", Idempotent: true, Do: func() (Response, error) { return admin.Do("GET", "/log/log/1", nil, nil) }})
		return ops
	}

	t.Run("scaleUp", func(t *testing.T) {
		load := StartLoad(reads(), 20*time.Millisecond)
		time.Sleep(2 * time.Second)
		scale["auth"], scale["files"], scale["logs"] = 3, 3, 2
		t0 := time.Now()
		took := up()
		time.Sleep(3 * time.Second)
		out := load.Stop()
		tally := Count(out, time.Time{}, time.Time{})
		report("scale-up to auth=3 files=3 logs=2 under load (up --wait)", took.Round(time.Second).String())
		report("  requests during the scale-up", tally.String())
		if tally.Failed > 0 {
			t.Errorf("failed requests during the scale-up:\n%s", tally.FailureList(10))
		}
		// Every new replica serves, and soon after it started.
		cs, err := s.Containers(ctx, "auth", "files", "logs")
		must(t, err)
		var slowest time.Duration
		for _, c := range cs {
			if c.StartedAt.Before(t0) {
				continue
			}
			first, err := firstServed(ctx, c.ID)
			if err != nil {
				t.Errorf("%s: %v", c.Name, err)
				continue
			}
			d := first.Sub(c.StartedAt)
			slowest = max(slowest, d)
			t.Logf("%s started %s, first request served %s after", c.Name, c.StartedAt.Format("15:04:05.000"), d.Round(time.Millisecond))
			if d > 15*time.Second {
				t.Errorf("%s served its first request %s after it started, want within 15 s", c.Name, d)
			}
		}
		report("  slowest new replica: container start to first request served", slowest.Round(100*time.Millisecond).String())
	})

	t.Run("spread", func(t *testing.T) {
		// 3,000 authenticated GET /me/sessions (a route the gateway passes to
		// auth; GET /me it answers from its session entry), counted by each
		// auth replica in its own access log.
		cs, err := s.Containers(ctx, "auth")
		must(t, err)
		if len(cs) != 3 {
			t.Fatalf("%d auth replicas, want 3", len(cs))
		}
		since := time.Now().Add(-time.Second)
		var wg sync.WaitGroup
		var mu sync.Mutex
		failed := 0
		next := make(chan int)
		for _, c := range users {
			wg.Go(func() {
				for range next {
					if r, err := c.Do("GET", "/me/sessions", nil, nil); err != nil || r.Status != 200 {
						mu.Lock()
						failed++
						mu.Unlock()
					}
				}
			})
		}
		for i := range 3000 {
			next <- i
		}
		close(next)
		wg.Wait()
		time.Sleep(2 * time.Second) // the replicas' log lines reach Docker
		counts := map[string]int{}
		total := 0
		for _, c := range cs {
			lines, err := Logs(ctx, c.ID, since)
			must(t, err)
			for _, l := range lines {
				if IsRequest(l.Text, "/me/sessions") {
					counts[c.Name]++
					total++
				}
			}
		}
		if failed > 0 {
			t.Errorf("%d of 3000 GET /me/sessions failed", failed)
		}
		if total < 3000 {
			t.Errorf("the replicas logged %d GET /me/sessions, want 3000", total)
		}
		var shares []string
		for _, c := range cs {
			share := float64(counts[c.Name]) / float64(max(total, 1))
			shares = append(shares, fmt.Sprintf("%.0f%%", share*100))
			if share < 0.20 {
				t.Errorf("%s served %d of %d (%.1f%%), want at least 20%%", c.Name, counts[c.Name], total, share*100)
			}
		}
		report("3,000 GET /me/sessions: share of each auth replica (its own access log)", strings.Join(shares, " / "))
	})

	t.Run("killReplicas", func(t *testing.T) {
		ops := reads()
		for _, c := range users[:2] {
			ops = append(ops, Op{Name: "POST /upload/file", Do: func() (Response, error) {
				return c.Upload("/upload/file", "w.txt", "text/plain", []byte("written under load"), "")
			}})
			ops = append(ops, Op{Name: "PATCH /me", Do: func() (Response, error) {
				return c.Do("PATCH", "/me", map[string]string{"fullName": "Load " + randomID(2)}, nil)
			}})
		}
		writers := 4
		load := StartLoad(ops, 20*time.Millisecond)
		time.Sleep(2 * time.Second)
		var killed []string
		killStart := time.Now()
		for _, svc := range []string{"auth", "files"} {
			cs, err := s.Containers(ctx, svc)
			must(t, err)
			victim := cs[len(cs)-1]
			_, err = Docker(ctx, "kill", victim.ID)
			must(t, err)
			killed = append(killed, victim.Name)
		}
		killedAt := time.Now()
		time.Sleep(6 * time.Second)
		out := load.Stop()
		tally := Count(out, time.Time{}, time.Time{})
		failedGets, failedWrites := 0, 0
		for _, o := range tally.Failures {
			if strings.HasPrefix(o.Op, "GET") {
				failedGets++
			} else {
				failedWrites++
			}
		}
		report("docker kill "+strings.Join(killed, ", ")+" under load", tally.String())
		if failedGets > 0 {
			t.Errorf("%d GET failed while replicas were killed:\n%s", failedGets, tally.FailureList(10))
		}
		// A write may fail only if it was in flight on a killed container:
		// each writer has at most one in flight, and only while the kills
		// happen (a request sent on a connection to the container just
		// before the kill returned is in flight too).
		for _, o := range tally.Failures {
			inFlight := o.Start.Before(killedAt.Add(500*time.Millisecond)) && o.Start.Add(o.Took).After(killStart)
			if !strings.HasPrefix(o.Op, "GET") && !inFlight {
				t.Errorf("a write that was not in flight at the kill failed: %s %s status %d %s %s", o.Start.Format("15:04:05.000"), o.Op, o.Status, o.Err, o.Body)
			}
		}
		if failedWrites > writers {
			t.Errorf("%d writes failed, more than the %d in flight", failedWrites, writers)
		}
		report("  writes in flight on a killed container that failed", fmt.Sprint(failedWrites))

		// Scale back down to one replica each, under load.
		load = StartLoad(reads(), 20*time.Millisecond)
		time.Sleep(time.Second)
		scale["auth"], scale["files"], scale["logs"] = 1, 1, 1
		t0 := time.Now()
		took := up("--remove-orphans")
		drained := time.Now()
		time.Sleep(4 * time.Second)
		out = load.Stop()
		during, after := Count(out, t0, drained), Count(out, drained, time.Time{})
		report(fmt.Sprintf("scale down to 1 each under load (%s)", took.Round(time.Second)), during.String())
		report("  after the drain", after.String())
		if during.Failed+after.Failed > 0 {
			t.Errorf("failed requests while scaling down:\n%s%s", during.FailureList(10), after.FailureList(10))
		}
	})

	t.Run("sessionsAcrossGateways", func(t *testing.T) {
		a := NewClient(gws[0])
		must(t, a.SignIn("load@example.com", password))
		cookie := sessionCookie(a)
		viaB := func() Response {
			r, err := NewClient(gws[1]).Do("GET", "/me", nil, map[string]string{"Cookie": "sessionId=" + cookie})
			must(t, err)
			return r
		}
		if r := viaB(); r.Status != 200 {
			t.Fatalf("a session made through gateway 1 on gateway 2: %s", r)
		}
		_, err := a.Expect(200, "DELETE", "/signout", nil)
		must(t, err)
		if r := viaB(); r.Status != 401 {
			t.Fatalf("signed out through gateway 1, gateway 2 still serves it: %s", r)
		}
		// Throttling counts failures on every replica: wrong passwords
		// through both gateways, the sixth attempt is refused.
		var statuses []int
		for i := range 6 {
			r, err := NewClient(gws[i%2]).Do("POST", "/signin", map[string]string{"email": "throttle@example.com", "password": "wrong password " + fmt.Sprint(i)}, nil)
			must(t, err)
			statuses = append(statuses, r.Status)
		}
		want := []int{401, 401, 401, 401, 401, 429}
		if fmt.Sprint(statuses) != fmt.Sprint(want) {
			t.Errorf("wrong passwords through both gateways: %v, want %v", statuses, want)
		}
		report("sign-out through gateway 1, next request through gateway 2", "401")
		report("throttling across two gateways: statuses of 6 wrong passwords", fmt.Sprint(statuses))
	})

	t.Run("natsExactlyOnce", func(t *testing.T) {
		scale["logs"] = 2
		up()
		cs, err := s.Containers(ctx, "logs")
		must(t, err)
		if len(cs) != 2 {
			t.Fatalf("%d logs replicas, want 2", len(cs))
		}
		const n = 20000
		tag := "scale " + randomID(3)
		var pubOut string
		var pubErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			pubOut, pubErr = s.RunProbe(ctx, "bus", map[string]string{"NATS_URL": "nats://publisher:" + s.Env["NATS_PUBLISHER_PASSWORD"] + "@nats:4222"},
				"publish", "-app", "SERVER-APP-C", "-type", "db", "-n", fmt.Sprint(n), tag)
		}()
		time.Sleep(1500 * time.Millisecond)
		_, err = Docker(ctx, "kill", cs[0].ID)
		must(t, err)
		_, err = Docker(ctx, "network", "disconnect", s.Network("bus"), cs[1].ID)
		must(t, err)
		time.Sleep(10 * time.Second)
		_, err = Docker(ctx, "network", "connect", s.Network("bus"), cs[1].ID)
		must(t, err)
		_, err = Docker(ctx, "start", cs[0].ID)
		must(t, err)
		<-done
		if pubErr != nil {
			t.Fatalf("publisher: %v\n%s", pubErr, pubOut)
		}
		distinct, missing, dup := countStored(t, admin, tag, n)
		report("20,000 NATS records, one logs replica killed, one off the bus 10 s", fmt.Sprintf("%d stored once, %d missing, %d duplicated", n-missing, missing, dup))
		if missing > 0 || dup > 0 || distinct != n {
			t.Errorf("%d missing, %d duplicated, %d distinct bodies, want %d once each", missing, dup, distinct, n)
		}
		healthy, err := s.WaitHealthy(ctx, time.Now(), 2*time.Minute)
		must(t, err)
		report("  every container healthy again, after the records were stored", healthy.Round(time.Second).String())
	})

	t.Run("mongoStopped", func(t *testing.T) {
		before, err := s.Containers(ctx, "auth", "files", "logs", "gateway")
		must(t, err)
		mongo, err := s.Containers(ctx, "mongo")
		must(t, err)
		load := StartLoad(reads(), 50*time.Millisecond)
		time.Sleep(time.Second)
		_, err = Docker(ctx, "stop", "--time", "5", mongo[0].ID)
		must(t, err)
		stopped := time.Now()
		time.Sleep(2 * time.Second)
		// Writes during the outage: refused cleanly, nothing half-written.
		r, err := admin.Do("POST", "/users", map[string]string{"email": "outage@example.com", "password": password, "fullName": "Outage", "edv": "E-3"}, nil)
		must(t, err)
		if r.Status != 503 || r.JSON()["code"] == nil {
			t.Errorf("POST /users with MongoDB stopped: %s, want a JSON 503", r)
		}
		upl, err := users[0].Upload("/upload/file", "outage.txt", "text/plain", []byte("written during the outage"), "")
		must(t, err)
		if upl.Status != 503 || upl.JSON()["code"] == nil {
			t.Errorf("upload with MongoDB stopped: %s, want a JSON 503", upl)
		}
		time.Sleep(time.Until(stopped.Add(10 * time.Second)))
		_, err = Docker(ctx, "start", mongo[0].ID)
		must(t, err)
		started := time.Now()
		var recovered time.Duration
		for {
			r1, e1 := users[1].Do("GET", "/me", nil, nil)
			r2, e2 := users[0].Do("GET", "/retrieve/file/"+file.File.ID, nil, nil)
			if e1 == nil && e2 == nil && r1.Status == 200 && r2.Status == 200 {
				recovered = time.Since(started)
				break
			}
			if time.Since(started) > 2*time.Minute {
				t.Fatalf("not recovered 2 min after MongoDB started: %s / %s", r1, r2)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		out := load.Stop()
		outage := Count(out, stopped, started)
		var statuses = map[int]int{}
		for _, o := range out {
			if !o.OK {
				statuses[o.Status]++
				if o.Status != 503 || !strings.Contains(o.Body, `"code"`) {
					t.Errorf("during the outage: %s %s status %d %s %s (want a JSON 503)", o.Start.Format("15:04:05.000"), o.Op, o.Status, o.Err, o.Body)
				}
			}
		}
		after := Count(out, started.Add(recovered), time.Time{})
		if after.Failed > 0 {
			t.Errorf("failures after recovery:\n%s", after.FailureList(10))
		}
		// Nothing half-written: the user and the file refused during the
		// outage do not exist.
		if _, err := admin.Expect(201, "POST", "/users", map[string]string{"email": "outage@example.com", "password": password, "fullName": "Outage", "edv": "E-3"}); err != nil {
			t.Errorf("the user refused during the outage was half-written: %v", err)
		}
		list, err := users[0].Expect(200, "GET", "/files?limit=100", nil)
		must(t, err)
		if strings.Contains(string(list.Body), "outage.txt") {
			t.Errorf("the upload refused during the outage is listed: %s", list)
		}
		// No service was restarted.
		after2, err := s.Containers(ctx, "auth", "files", "logs", "gateway")
		must(t, err)
		for i, c := range after2 {
			if i >= len(before) || c.ID != before[i].ID || !c.StartedAt.Equal(before[i].StartedAt) || !c.Running {
				t.Errorf("%s was restarted or replaced during the MongoDB outage", c.Name)
			}
		}
		report("MongoDB stopped 10 s under load", fmt.Sprintf("%s; answers that failed by status: %v", outage, statuses))
		report("  recovered after MongoDB started (no service restarted)", recovered.Round(100*time.Millisecond).String())
		healthy, err := s.WaitHealthy(ctx, time.Now(), 2*time.Minute)
		must(t, err)
		report("  every container healthy again, after recovery", healthy.Round(time.Second).String())
	})

	t.Run("rollingUpgrade", func(t *testing.T) {
		scale["auth"] = 3
		up()
		label := "upgrade-" + randomID(3)
		t0 := time.Now()
		s.MustCompose(ctx, "build", "--build-arg", "GO_IMAGE="+base.Go, "--build-arg", "RUNTIME_IMAGE="+base.Runtime,
			"--build-arg", "VERSION="+label, "auth")
		report("rebuild of auth with a new version label", time.Since(t0).Round(time.Second).String())
		load := StartLoad(reads(), 20*time.Millisecond)
		time.Sleep(time.Second)
		t1 := time.Now()
		s.MustCompose(ctx, "up", "-d", "--wait", "--no-deps", "--scale", "auth=3", "auth")
		took := time.Since(t1)
		time.Sleep(3 * time.Second)
		out := load.Stop()
		tally := Count(out, time.Time{}, time.Time{})
		report(fmt.Sprintf("docker compose up -d --no-deps --scale auth=3 auth (%s) under load", took.Round(time.Second)), tally.String())
		if tally.Failed > 0 {
			t.Errorf("failed requests during the upgrade:\n%s", tally.FailureList(10))
		}
		cs, err := s.Containers(ctx, "auth")
		must(t, err)
		for _, c := range cs {
			out, err := Docker(ctx, "inspect", "--format", `{{index .Config.Labels "org.opencontainers.image.version"}}`, c.ID)
			must(t, err)
			if strings.TrimSpace(out) != label {
				t.Errorf("%s runs version %q after the upgrade, want %q", c.Name, strings.TrimSpace(out), label)
			}
		}
	})
}

// firstServed is when a container logged its first request other than a
// health or metrics probe.
func firstServed(ctx context.Context, id string) (time.Time, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		lines, err := Logs(ctx, id, time.Time{})
		if err != nil {
			return time.Time{}, err
		}
		for _, l := range lines {
			if IsRequest(l.Text, "") {
				return l.At, nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("served no request")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// listBodies reads a whole log listing by cursor and counts the records
// whose body starts with tag.
// countStored waits (up to 3 minutes) until the n records "<tag> #<i>" of
// SERVER-APP-C are listed, and counts how many distinct bodies were listed,
// how many are missing and how many listed more than once.
func countStored(t *testing.T, admin *Client, tag string, n int) (distinct, missing, dup int) {
	t.Helper()
	t0 := time.Now()
	var seen map[string]int
	for {
		seen = listBodies(t, admin, "/log/db/1/SERVER-APP-C", tag)
		total := 0
		for _, c := range seen {
			total += c
		}
		if total >= n || time.Since(t0) > 3*time.Minute {
			break
		}
		time.Sleep(2 * time.Second)
	}
	for i := range n {
		switch c := seen[fmt.Sprintf("%s #%d", tag, i)]; {
		case c == 0:
			missing++
		case c > 1:
			dup += c - 1
		}
	}
	return len(seen), missing, dup
}

func listBodies(t *testing.T, c *Client, path, tag string) map[string]int {
	t.Helper()
	seen := map[string]int{}
	before := ""
	for {
		q := "?limit=500"
		if before != "" {
			q += "&before=" + url.QueryEscape(before)
		}
		r, err := c.Expect(201, "GET", path+q, nil)
		must(t, err)
		var page struct {
			Logs []struct{ ID, LogBody string }
		}
		must(t, json.Unmarshal(r.Body, &page))
		for _, rec := range page.Logs {
			if strings.HasPrefix(rec.LogBody, tag) {
				seen[rec.LogBody]++
			}
		}
		if len(page.Logs) == 0 {
			return seen
		}
		before = page.Logs[len(page.Logs)-1].ID
	}
}
