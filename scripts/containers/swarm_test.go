//go:build containers

package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSwarm deploys deploy/stack.yaml on a one-node swarm from the images
// the container tests build, uses it through the port the gateway
// publishes in host mode, then under a steady mixed load scales the
// services, kills a replica, rolls out a new image and one whose health
// check fails (rolled back), and removes the stack. Every figure goes into the table the test
// prints (docs/deployment.md, "Swarm, tested").
func TestSwarm(t *testing.T) {
	newStack(t, nil) // the images, built once per run; its compose project is never started
	node := JoinSwarm(t)
	s := NewSwarmStack(t, root, version, node)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	t0 := time.Now()
	must(t, s.Deploy(ctx))
	_, err := s.WaitConverged(ctx, 8*time.Minute)
	must(t, err)
	must(t, waitReady(s.GatewayURL, 2*time.Minute))
	report("docker stack deploy until every task is healthy and the gateway ready", time.Since(t0).Round(time.Second).String())
	checkSwarmSpecs(t, ctx, s)

	w := swarmWalk(t, ctx, s)
	load := func() *Load { return StartLoad(w.ops(), 50*time.Millisecond) }

	t.Run("scale", func(t *testing.T) {
		l := load()
		time.Sleep(2 * time.Second)
		t0 := time.Now()
		_, err := Docker(ctx, "service", "scale", "--detach", s.Service("auth")+"=3", s.Service("files")+"=3", s.Service("logs")+"=2")
		must(t, err)
		took, err := s.WaitConverged(ctx, 4*time.Minute)
		must(t, err)
		took = time.Since(t0)
		time.Sleep(5 * time.Second) // a resolve interval and a probe: the gateway uses the new tasks
		out := l.Stop()
		tally := Count(out, time.Time{}, time.Time{})
		report(fmt.Sprintf("docker service scale auth=3 files=3 logs=2 under load (%s to converge)", took.Round(time.Second)), tally.String())
		if tally.Failed > 0 {
			t.Errorf("failed requests during the scale-up:\n%s", tally.FailureList(10))
		}
		w.checkShares(t, ctx, s, map[string]int{"auth": 3, "files": 3, "logs": 2})
	})

	t.Run("killReplica", func(t *testing.T) {
		l := load()
		time.Sleep(2 * time.Second)
		before := map[string][]string{}
		var killed []string
		killStart := time.Now()
		for _, svc := range []string{"auth", "files"} {
			ids, err := s.Tasks(ctx, svc)
			must(t, err)
			before[svc] = ids
			_, err = Docker(ctx, "kill", ids[0])
			must(t, err)
			killed = append(killed, svc)
		}
		killedAt := time.Now()
		replaced, err := waitReplaced(ctx, s, before, 3*time.Minute)
		must(t, err)
		time.Sleep(5 * time.Second)
		out := l.Stop()
		tally := Count(out, time.Time{}, time.Time{})
		report("docker kill one task of "+strings.Join(killed, " and ")+" under load", tally.String())
		report("  until swarm replaced both (healthy, in service discovery)", replaced.Round(time.Second).String())
		failedWrites := 0
		for _, o := range tally.Failures {
			if strings.HasPrefix(o.Op, "GET") {
				t.Errorf("a read failed while a replica was killed: %s %s status %d %s %s", o.Start.Format("15:04:05.000"), o.Op, o.Status, o.Err, o.Body)
				continue
			}
			failedWrites++
			// Only a write in flight on the killed container may fail.
			if inFlight := o.Start.Before(killedAt.Add(500*time.Millisecond)) && o.Start.Add(o.Took).After(killStart); !inFlight {
				t.Errorf("a write that was not in flight at the kill failed: %s %s status %d %s %s", o.Start.Format("15:04:05.000"), o.Op, o.Status, o.Err, o.Body)
			}
		}
		report("  writes in flight on a killed container that failed", fmt.Sprint(failedWrites))
	})

	next := fmt.Sprintf("acme/auth:%s-next", version)
	t.Run("update", func(t *testing.T) {
		label := version + "-next"
		must(t, s.BuildDerived(ctx, next, fmt.Sprintf("FROM acme/auth:%s\nLABEL org.opencontainers.image.version=%s\n", version, label)))
		l := load()
		time.Sleep(2 * time.Second)
		t0 := time.Now()
		_, err := Docker(ctx, "service", "update", "--detach", "--no-resolve-image", "--image", next, s.Service("auth"))
		must(t, err)
		state, err := s.WaitUpdate(ctx, "auth", 6*time.Minute)
		must(t, err)
		took := time.Since(t0)
		time.Sleep(3 * time.Second)
		out := l.Stop()
		tally := Count(out, time.Time{}, time.Time{})
		report(fmt.Sprintf("docker service update --image (3 auth tasks, start-first; %s)", took.Round(time.Second)), tally.String())
		if !strings.HasPrefix(state, "completed") {
			t.Errorf("update: %s, want completed", state)
		}
		if tally.Failed > 0 {
			t.Errorf("failed requests during the update:\n%s", tally.FailureList(10))
		}
		checkTaskLabels(t, ctx, s, "auth", 3, label)
	})

	t.Run("rollback", func(t *testing.T) {
		broken := fmt.Sprintf("acme/auth:%s-broken", version)
		// The release's own health check fails (its command does not exist).
		must(t, s.BuildDerived(ctx, broken, fmt.Sprintf("FROM acme/auth:%s\nLABEL org.opencontainers.image.version=%s-broken\n"+
			"HEALTHCHECK --interval=2s --timeout=2s --start-period=2s --retries=2 CMD [\"/no-such-check\"]\n", version, version)))
		l := load()
		time.Sleep(2 * time.Second)
		t0 := time.Now()
		_, err := Docker(ctx, "service", "update", "--detach", "--no-resolve-image", "--image", broken, s.Service("auth"))
		must(t, err)
		state, err := s.WaitUpdate(ctx, "auth", 6*time.Minute)
		must(t, err)
		took := time.Since(t0)
		_, err = s.WaitConverged(ctx, 3*time.Minute)
		must(t, err)
		time.Sleep(3 * time.Second)
		out := l.Stop()
		tally := Count(out, time.Time{}, time.Time{})
		report(fmt.Sprintf("update to an image whose health check fails: %s after %s", strings.Fields(state)[0], took.Round(time.Second)), tally.String())
		if !strings.HasPrefix(state, "rollback_completed") {
			t.Errorf("update to a failing image: %s, want rollback_completed", state)
		}
		if tally.Failed > 0 {
			t.Errorf("failed requests during the failed update:\n%s", tally.FailureList(10))
		}
		img, err := Docker(ctx, "service", "inspect", "--format", "{{.Spec.TaskTemplate.ContainerSpec.Image}}", s.Service("auth"))
		must(t, err)
		if strings.TrimSpace(img) != next {
			t.Errorf("after the rollback auth's image is %q, want %q", strings.TrimSpace(img), next)
		}
		checkTaskLabels(t, ctx, s, "auth", 3, version+"-next")
	})

	t.Run("stackRm", func(t *testing.T) {
		rctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		t0 := time.Now()
		volumes, exited, err := s.RemoveStack(rctx)
		must(t, err)
		took := time.Since(t0)
		must(t, removeLeftovers(ctx, volumes, exited))
		left, err := s.Leftovers(ctx)
		must(t, err)
		if len(left) > 0 {
			t.Errorf("left after docker stack rm and the removal of volumes and job containers: %s", strings.Join(left, ", "))
		}
		if len(volumes) != 3 {
			t.Errorf("volumes kept by docker stack rm: %v, want the three of deploy/stack.yaml", volumes)
		}
		report("docker stack rm until no service, secret, config, network or running container is left", took.Round(time.Second).String())
		report("  exited job containers it keeps (files-setup, the NATS publisher), then removed", fmt.Sprint(len(exited)))
		report("  volumes it keeps (the data), then removed with docker volume rm", fmt.Sprintf("%d: %s", len(volumes), strings.Join(volumes, ", ")))
	})
}

// swarmWalkResult is what the walk-through made for the load.
type swarmWalkResult struct {
	admin  *Client
	users  []*Client
	fileID string
}

// swarmWalk: sign-in, a user, upload, download, POST /log and a record
// over NATS, all through the gateway's port.
func swarmWalk(t *testing.T, ctx context.Context, s *SwarmStack) swarmWalkResult {
	t.Helper()
	gw := s.GatewayURL
	w := swarmWalkResult{admin: NewClient(gw)}
	must(t, w.admin.SignIn(s.Env["ADMIN_EMAIL"], s.Env["ADMIN_PASSWORD"]))
	const password = "correct horse battery"
	_, err := w.admin.Expect(201, "POST", "/users", map[string]string{"email": "swarm@example.com", "password": password, "fullName": "Swarm", "edv": "E-4"})
	must(t, err)
	for range 4 {
		c := NewClient(gw)
		must(t, c.SignIn("swarm@example.com", password))
		w.users = append(w.users, c)
	}
	data := bytes.Repeat([]byte("ACME swarm test line\n"), 2000)
	up, err := w.users[0].Upload("/upload/file", "swarm.txt", "text/plain", data, "")
	must(t, err)
	var file struct{ File struct{ ID string } }
	if up.Status != 201 || json.Unmarshal(up.Body, &file) != nil {
		t.Fatalf("upload: %s", up)
	}
	w.fileID = file.File.ID
	dl, err := w.users[1].Expect(200, "GET", "/download/file/"+w.fileID, nil)
	must(t, err)
	if !bytes.Equal(dl.Body, data) {
		t.Fatalf("download: %d bytes, want the %d uploaded", len(dl.Body), len(data))
	}
	post := "swarm test POST " + randomID(4)
	_, err = w.admin.Expect(201, "POST", "/log", map[string]string{"app": "SERVER-APP-A", "logBody": post, "type": "log"})
	must(t, err)
	waitLog(t, w.admin, "/log/log/1/SERVER-APP-A", post)
	body := "swarm test NATS " + randomID(4)
	jctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := s.RunJob(jctx, "bus", map[string]string{"NATS_URL": "nats://publisher:" + s.Env["NATS_PUBLISHER_PASSWORD"] + "@nats:4222"},
		"publish", "-app", "SERVER-APP-B", "-type", "error", body)
	if err != nil {
		t.Fatalf("publisher job: %v\n%s", err, out)
	}
	waitLog(t, w.admin, "/log/error/1/SERVER-APP-B", body)
	report("sign-in, upload, download, POST /log, a record over NATS (a job on the bus network)", "ok")
	return w
}

// ops is the steady mixed load: reads of each service, and writes (an
// upload, a profile edit, a log record).
func (w swarmWalkResult) ops() []Op {
	var ops []Op
	for i, c := range w.users {
		ops = append(ops, Op{Name: "GET /me/sessions", Idempotent: true, Do: func() (Response, error) { return c.Do("GET", "/me/sessions", nil, nil) }})
		if i%2 == 0 {
			ops = append(ops, Op{Name: "GET /retrieve/file", Idempotent: true, Do: func() (Response, error) {
				return c.Do("GET", "/retrieve/file/"+w.fileID, nil, nil)
			}})
		}
	}
	admin, u0, u1 := w.admin, w.users[0], w.users[1]
	return append(ops,
		Op{Name: "GET /log", Idempotent: true, Do: func() (Response, error) { return admin.Do("GET", "/log/log/1", nil, nil) }},
		Op{Name: "POST /log", Do: func() (Response, error) {
			return admin.Do("POST", "/log", map[string]string{"app": "SERVER-APP-C", "logBody": "load " + randomID(2), "type": "log"}, nil)
		}},
		Op{Name: "POST /upload/file", Do: func() (Response, error) {
			return u0.Upload("/upload/file", "w.txt", "text/plain", []byte("written under load"), "")
		}},
		Op{Name: "PATCH /me", Do: func() (Response, error) {
			return u1.Do("PATCH", "/me", map[string]string{"fullName": "Swarm " + randomID(2)}, nil)
		}},
	)
}

// checkShares sends a burst of reads to each scaled service and counts,
// in each task's own access log, the requests it served: every task must
// serve at least half an even share.
func (w swarmWalkResult) checkShares(t *testing.T, ctx context.Context, s *SwarmStack, replicas map[string]int) {
	t.Helper()
	since := time.Now().Add(-500 * time.Millisecond)
	paths := map[string]string{"auth": "/me/sessions", "files": "/files?limit=5", "logs": "/log/log/1"}
	for _, svc := range []string{"auth", "files", "logs"} {
		c := w.users[0]
		if svc == "logs" {
			c = w.admin
		}
		for range 150 * replicas[svc] {
			if r, err := c.Do("GET", paths[svc], nil, nil); err != nil || r.Status/100 != 2 {
				t.Errorf("GET %s: %v %v", paths[svc], r, err)
				return
			}
		}
	}
	time.Sleep(2 * time.Second) // the tasks' log lines reach Docker
	for _, svc := range []string{"auth", "files", "logs"} {
		ids, err := s.Tasks(ctx, svc)
		must(t, err)
		if len(ids) != replicas[svc] {
			t.Errorf("%s: %d tasks running, want %d", svc, len(ids), replicas[svc])
		}
		counts, total := map[string]int{}, 0
		for _, id := range ids {
			lines, err := Logs(ctx, id, since)
			must(t, err)
			for _, l := range lines {
				if IsRequest(l.Text, "") {
					counts[id]++
					total++
				}
			}
		}
		var shares []string
		for _, id := range ids {
			share := float64(counts[id]) / float64(max(total, 1))
			shares = append(shares, fmt.Sprintf("%.0f%%", share*100))
			if share < 0.5/float64(len(ids)) {
				t.Errorf("%s task %.12s served %d of %d requests (%.0f%%), want at least half an even share", svc, id, counts[id], total, share*100)
			}
		}
		report(fmt.Sprintf("  share of each %s task (its own access log, %d requests)", svc, total), strings.Join(shares, " / "))
	}
}

// waitReplaced waits until each service has as many running tasks as
// before, none of them the killed ones, every service converged.
func waitReplaced(ctx context.Context, s *SwarmStack, before map[string][]string, max time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for {
		done := true
		for svc, old := range before {
			ids, err := s.Tasks(ctx, svc)
			if err != nil {
				return 0, err
			}
			if len(ids) != len(old) || contains(ids, old[0]) {
				done = false
			}
		}
		if done {
			if _, err := s.WaitConverged(ctx, max); err != nil {
				return 0, err
			}
			return time.Since(t0), nil
		}
		if time.Since(t0) > max {
			return 0, fmt.Errorf("killed tasks not replaced after %s\n%s", max, s.taskErrors(ctx))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkTaskLabels: a service runs n tasks, each from an image with the
// given version label.
func checkTaskLabels(t *testing.T, ctx context.Context, s *SwarmStack, svc string, n int, label string) {
	t.Helper()
	ids, err := s.Tasks(ctx, svc)
	must(t, err)
	if len(ids) != n {
		t.Errorf("%s: %d tasks running, want %d", svc, len(ids), n)
	}
	for _, id := range ids {
		out, err := Docker(ctx, "inspect", "--format", `{{index .Config.Labels "org.opencontainers.image.version"}}`, id)
		must(t, err)
		if got := strings.TrimSpace(out); got != label {
			t.Errorf("%s task %.12s runs version %q, want %q", svc, id, got, label)
		}
	}
}

// checkSwarmSpecs: what the stack file asked of swarm is what swarm runs:
// every task of every service in service discovery by its own address
// (dnsrr), the stateful services placed by node label,
// secrets mounted from swarm's store, encrypted internal overlays.
func checkSwarmSpecs(t *testing.T, ctx context.Context, s *SwarmStack) {
	t.Helper()
	for _, svc := range []string{"mongo", "nats", "minio", "auth", "files", "logs", "gateway"} {
		out, err := Docker(ctx, "service", "inspect", "--format",
			"{{.Spec.EndpointSpec.Mode}}|{{with .Spec.TaskTemplate.Placement}}{{json .Constraints}}{{else}}null{{end}}|"+
				"{{with .Spec.UpdateConfig}}{{.FailureAction}}{{else}}none{{end}}|{{len .Spec.TaskTemplate.ContainerSpec.Secrets}}|"+
				"{{with .Spec.TaskTemplate.Resources}}{{with .Limits}}{{.MemoryBytes}}{{else}}0{{end}}{{else}}0{{end}}",
			s.Service(svc))
		must(t, err)
		f := strings.Split(strings.TrimSpace(out), "|")
		wantMode := "dnsrr"
		if f[0] != wantMode || f[2] != "rollback" || f[4] == "0" {
			t.Errorf("%s: endpoint mode %s, update failure action %s, memory limit %s; want %s, rollback, a limit", svc, f[0], f[2], f[4], wantMode)
		}
		stateful := svc == "mongo" || svc == "nats" || svc == "minio"
		if stateful != strings.Contains(f[1], "node.labels.acme."+svc) {
			t.Errorf("%s: placement %s", svc, f[1])
		}
		if svc != "nats" && f[3] == "0" {
			t.Errorf("%s mounts no Docker secret", svc)
		}
	}
	for _, n := range []string{"services", "data", "objects", "bus"} {
		out, err := Docker(ctx, "network", "inspect", "--format", `{{.Driver}} {{.Internal}} {{index .Options "encrypted"}}`, s.Service(n))
		must(t, err)
		want := "overlay true true"
		if n == "services" {
			want = "overlay false true"
		}
		if got := strings.TrimSpace(out); got != want {
			t.Errorf("network %s: %q, want %q (driver, internal, encrypted)", n, got, want)
		}
	}
	report("dnsrr for every service; placement by node label; encrypted overlays", "as deploy/stack.yaml says")
}

// waitReady waits for the gateway's /readyz to answer 200.
func waitReady(base string, max time.Duration) error {
	c := NewClient(base)
	deadline := time.Now().Add(max)
	for {
		r, err := c.Do("GET", "/readyz", nil, nil)
		if err == nil && r.Status == 200 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway %s not ready after %s: %v %v", base, max, r, err)
		}
		time.Sleep(time.Second)
	}
}
