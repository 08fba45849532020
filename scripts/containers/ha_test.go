//go:build containers

package containers

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHA runs the high-availability profile (compose.ha.yaml: three NATS
// nodes, four MinIO nodes) under a steady mix of sign-ins, uploads,
// downloads and 10,000 log records published over NATS, and loses nodes:
// the log stream's leader is killed and started again, then a MinIO node,
// then the stream's leader is cut off from the other nodes for 20 s (off
// the routes' network; its clients stay connected to it). It counts what
// the clients saw and checks that every record was stored exactly once and
// every file reads back byte-identical. The figures go into the table the
// test prints (docs/deployment.md, "High availability", quotes it).
func TestHA(t *testing.T) {
	s := newStack(t, nil, filepath.Join(root, "compose.ha.yaml"))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	took := s.Up(ctx)
	report("HA profile: up -d --wait (3 NATS nodes, 4 MinIO nodes)", took.Round(time.Second).String())

	admin := NewClient(s.GatewayURL)
	must(t, admin.SignIn(s.Env["ADMIN_EMAIL"], s.Env["ADMIN_PASSWORD"]))
	const email, password = "ha@example.com", "correct horse battery"
	_, err := admin.Expect(201, "POST", "/users", map[string]string{"email": email, "password": password, "fullName": "HA", "edv": "E-4"})
	must(t, err)
	var users []*Client
	for range 4 {
		c := NewClient(s.GatewayURL)
		must(t, c.SignIn(email, password))
		users = append(users, c)
	}

	// Files: some uploaded before the load (read during it), the rest by
	// the load; every one is read back at the end.
	var fmu sync.Mutex
	var stored []storedFile
	upload := func(c *Client) (Response, error) {
		data := make([]byte, 1024+int(randomByte())*256) // 1 to 65 KiB
		rand.Read(data)
		r, err := c.Upload("/upload/file", "ha.bin", "application/octet-stream", data, "")
		if err == nil && r.Status == 201 {
			var up struct{ File struct{ ID string } }
			if json.Unmarshal(r.Body, &up) == nil && up.File.ID != "" {
				fmu.Lock()
				stored = append(stored, storedFile{up.File.ID, sha256.Sum256(data), len(data)})
				fmu.Unlock()
			}
		}
		return r, err
	}
	for range 8 {
		r, err := upload(users[0])
		must(t, err)
		if r.Status != 201 {
			t.Fatalf("upload: %s", r)
		}
	}
	readable := append([]storedFile(nil), stored...)

	var ops []Op
	for i, c := range users {
		signer := NewClient(s.GatewayURL)
		ops = append(ops, Op{Name: "GET /download/file", Idempotent: true, Do: func() (Response, error) {
			f := readable[(int(randomByte())+i)%len(readable)]
			r, err := c.Do("GET", "/download/file/"+f.id, nil, nil)
			if err == nil && r.Status == 200 && sha256.Sum256(r.Body) != f.sum {
				return Response{Status: 0, Body: []byte(fmt.Sprintf("download of %s: %d bytes differ from the %d uploaded", f.id, len(r.Body), f.size))}, nil
			}
			return r, err
		}})
		if i < 2 {
			ops = append(ops, Op{Name: "POST /upload/file", Do: func() (Response, error) { return upload(c) }})
			ops = append(ops, Op{Name: "POST /signin", Do: func() (Response, error) {
				return signer.Do("POST", "/signin", map[string]string{"email": email, "password": password}, nil)
			}})
		}
	}
	ops = append(ops, Op{Name: "GET /me", Idempotent: true, Do: func() (Response, error) { return users[3].Do("GET", "/me", nil, nil) }})

	// The log records: 10,000 over about 70 s, from an application on the
	// bus network that knows every NATS node.
	// natsURL lists every node but exclude (a node being killed or cut off:
	// the stream's state is asked of the others, which know it).
	natsURL := func(user, pw, exclude string) string {
		var urls []string
		for _, n := range []string{"nats1", "nats2", "nats3"} {
			if n != exclude {
				urls = append(urls, fmt.Sprintf("nats://%s:%s@%s:4222", user, pw, n))
			}
		}
		return strings.Join(urls, ",")
	}
	const records = 10000
	tag := "ha " + randomID(3)
	var pubOut string
	var pubErr error
	pubDone := make(chan struct{})
	stream := func(exclude string) (streamState, error) {
		out, err := s.RunProbe(ctx, "bus", map[string]string{"NATS_URL": natsURL("logs", s.Env["NATS_LOGS_PASSWORD"], exclude)}, "stream")
		if err != nil {
			return streamState{}, fmt.Errorf("%v: %s", err, out)
		}
		var st streamState
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return st, json.Unmarshal([]byte(lines[len(lines)-1]), &st)
	}
	// waitStream polls the stream's state (asking the nodes but exclude)
	// until ok, and returns how long that took from since.
	waitStream := func(what, exclude string, since time.Time, ok func(streamState) bool) (streamState, time.Duration) {
		t.Helper()
		for {
			st, err := stream(exclude)
			if err == nil && ok(st) {
				return st, time.Since(since)
			}
			if time.Since(since) > 3*time.Minute {
				t.Fatalf("%s: not after 3 min (last state %+v, %v)", what, st, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	allCurrent := func(st streamState) bool {
		if st.Leader == "" || len(st.Replicas) != 2 {
			return false
		}
		for _, r := range st.Replicas {
			if !r.Current {
				return false
			}
		}
		return true
	}
	st, _ := waitStream("the log stream on three nodes", "", time.Now(), allCurrent)
	t.Logf("stream leader %s, replicas %+v", st.Leader, st.Replicas)

	load := StartLoad(ops, 50*time.Millisecond)
	testStart := time.Now()
	go func() {
		defer close(pubDone)
		pubOut, pubErr = s.RunProbe(ctx, "bus", map[string]string{"NATS_URL": natsURL("publisher", s.Env["NATS_PUBLISHER_PASSWORD"], "")},
			"publish", "-app", "SERVER-APP-C", "-type", "db", "-n", fmt.Sprint(records), "-rate", "150", tag)
	}()
	time.Sleep(3 * time.Second)

	// windows are the spans in which a write may fail: a fault until its
	// recovery.
	type window struct {
		what     string
		from, to time.Time
	}
	var windows []window

	// 1. Kill the stream leader; start it again 10 s later.
	leader := st.Leader
	victim := s.natsNode(ctx, t, leader)
	_, err = Docker(ctx, "kill", victim.ID)
	must(t, err)
	killed := time.Now()
	st, elected := waitStream("a new stream leader", leader, killed, func(st streamState) bool { return st.Leader != "" && st.Leader != leader })
	windows = append(windows, window{"NATS leader killed", killed, killed.Add(elected)})
	time.Sleep(time.Until(killed.Add(10 * time.Second)))
	_, err = Docker(ctx, "start", victim.ID)
	must(t, err)
	started := time.Now()
	_, caughtUp := waitStream("the killed node caught up", "", started, func(st streamState) bool { return allCurrent(st) && st.has(leader) })
	report(fmt.Sprintf("NATS stream leader %s killed (docker kill)", leader), fmt.Sprintf("new leader %s elected %s after", st.Leader, elected.Round(100*time.Millisecond)))
	report("  started again 10 s later: replica current again after", caughtUp.Round(100*time.Millisecond).String())

	// 2. Kill a MinIO node; start it again 10 s later.
	minio, err := s.Containers(ctx, "minio3")
	must(t, err)
	_, err = Docker(ctx, "kill", minio[0].ID)
	must(t, err)
	killed = time.Now()
	windows = append(windows, window{"MinIO node killed", killed, killed.Add(time.Second)})
	time.Sleep(10 * time.Second)
	_, err = Docker(ctx, "start", minio[0].ID)
	must(t, err)
	started = time.Now()
	healthy := s.waitContainerHealthy(ctx, t, minio[0].ID)
	report("MinIO node minio3 killed, started again 10 s later", fmt.Sprintf("healthy %s after its start", healthy.Round(100*time.Millisecond)))

	// 3. Cut the stream leader off its peers for 20 s: off the routes'
	// network, its clients still connected to it.
	st, _ = waitStream("the log stream on three nodes", "", time.Now(), allCurrent)
	leader = st.Leader
	victim = s.natsNode(ctx, t, leader)
	aliases := s.aliases(ctx, t, victim.ID, "nats-cluster")
	_, err = Docker(ctx, "network", "disconnect", s.Network("nats-cluster"), victim.ID)
	must(t, err)
	cut := time.Now()
	st, elected = waitStream("a new stream leader", leader, cut, func(st streamState) bool { return st.Leader != "" && st.Leader != leader })
	windows = append(windows, window{"NATS leader cut off", cut, cut.Add(elected)})
	time.Sleep(time.Until(cut.Add(20 * time.Second)))
	args := []string{"network", "connect"}
	for _, a := range aliases {
		args = append(args, "--alias", a)
	}
	_, err = Docker(ctx, append(args, s.Network("nats-cluster"), victim.ID)...)
	must(t, err)
	joined := time.Now()
	_, caughtUp = waitStream("the cut-off node caught up", "", joined, func(st streamState) bool { return allCurrent(st) && st.has(leader) })
	report(fmt.Sprintf("NATS stream leader %s cut off from its peers 20 s", leader), fmt.Sprintf("new leader %s elected %s after", st.Leader, elected.Round(100*time.Millisecond)))
	report("  reconnected: replica current again after", caughtUp.Round(100*time.Millisecond).String())

	time.Sleep(3 * time.Second)
	out := load.Stop()
	loadTook := time.Since(testStart)
	<-pubDone
	if pubErr != nil {
		t.Fatalf("publisher: %v\n%s", pubErr, pubOut)
	}

	// What the clients saw.
	tally := Count(out, time.Time{}, time.Time{})
	report(fmt.Sprintf("requests during the %s of faults", loadTook.Round(time.Second)), tally.String())
	failedReads, failedWrites, outside := 0, 0, 0
	for _, o := range tally.Failures {
		if strings.HasPrefix(o.Op, "GET") {
			failedReads++
			continue
		}
		failedWrites++
		in := false
		for _, w := range windows {
			if o.Start.Before(w.to) && o.Start.Add(o.Took).After(w.from) {
				in = true
			}
		}
		if !in {
			outside++
		}
	}
	if failedReads > 0 {
		t.Errorf("%d reads failed:\n%s", failedReads, tally.FailureList(10))
	}
	if outside > 0 {
		t.Errorf("%d writes failed outside a fault's window (kill or cut until the new leader; a MinIO kill and 1 s):\n%s", outside, tally.FailureList(10))
	}
	report("  failed reads / failed writes (all within a fault's window)", fmt.Sprintf("%d / %d", failedReads, failedWrites))
	report("  publisher (pkg/logclient): "+strings.TrimSpace(lastLine(pubOut)), "retried with the same Nats-Msg-Id")

	// Every record stored exactly once.
	distinct, missing, dup := countStored(t, admin, tag, records)
	report("10,000 records published over NATS during the faults", fmt.Sprintf("%d stored once, %d missing, %d duplicated", records-missing, missing, dup))
	if missing > 0 || dup > 0 || distinct != records {
		t.Errorf("%d missing, %d duplicated, %d distinct bodies, want %d once each", missing, dup, distinct, records)
	}

	// Every file reads back byte-identical.
	bad := 0
	for _, f := range stored {
		r, err := users[1].Do("GET", "/download/file/"+f.id, nil, nil)
		if err != nil || r.Status != 200 || !bytes.Equal(sha(r.Body), f.sum[:]) {
			bad++
			t.Errorf("file %s (%d bytes): %v %s", f.id, f.size, err, r)
		}
	}
	report("files uploaded (before and during the faults) read back byte-identical", fmt.Sprintf("%d of %d", len(stored)-bad, len(stored)))
	healthy, err = s.WaitHealthy(ctx, time.Now(), 2*time.Minute)
	must(t, err)
	report("  every container healthy, after the checks", healthy.Round(time.Second).String())
}

type storedFile struct {
	id   string
	sum  [32]byte
	size int
}

// streamState is what `stackprobe stream` prints.
type streamState struct {
	Leader   string `json:"leader"`
	Replicas []struct {
		Name    string `json:"name"`
		Current bool   `json:"current"`
		Lag     uint64 `json:"lag"`
	} `json:"replicas"`
	Messages       uint64 `json:"messages"`
	ConsumerLeader string `json:"consumerLeader"`
	NumPending     uint64 `json:"numPending"`
	AckPending     int    `json:"ackPending"`
}

func (st streamState) has(node string) bool {
	if st.Leader == node {
		return true
	}
	for _, r := range st.Replicas {
		if r.Name == node {
			return true
		}
	}
	return false
}

// natsNode is the container of the NATS node a server name names:
// compose.ha.yaml's node 1 is the service nats (server name nats1).
func (s *Stack) natsNode(ctx context.Context, t *testing.T, server string) Container {
	t.Helper()
	svc := server
	if server == "nats1" {
		svc = "nats"
	}
	cs, err := s.Containers(ctx, svc)
	must(t, err)
	if len(cs) != 1 {
		t.Fatalf("NATS server %s: %d containers of service %s", server, len(cs), svc)
	}
	return cs[0]
}

// aliases are a container's DNS names on one of the project's networks,
// given back when it is connected again.
func (s *Stack) aliases(ctx context.Context, t *testing.T, id, network string) []string {
	t.Helper()
	out, err := Docker(ctx, "inspect", "--format", fmt.Sprintf(`{{json (index .NetworkSettings.Networks %q).Aliases}}`, s.Network(network)), id)
	must(t, err)
	var a []string
	must(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &a))
	return a
}

// waitContainerHealthy waits for one container's healthcheck to pass.
func (s *Stack) waitContainerHealthy(ctx context.Context, t *testing.T, id string) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		out, err := Docker(ctx, "inspect", "--format", "{{.State.Health.Status}}", id)
		must(t, err)
		if strings.TrimSpace(out) == "healthy" {
			return time.Since(t0)
		}
		if time.Since(t0) > 3*time.Minute {
			t.Fatalf("container %s not healthy after 3 min: %s", id, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func randomByte() byte {
	var b [1]byte
	rand.Read(b[:])
	return b[0]
}

func sha(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
