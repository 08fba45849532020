//go:build faults

// Package faults is the fault suite (`make test-faults`): real servers and
// the four real service processes, one fault injected per scenario by
// stopping, killing or pausing a real process, with counts reported and
// asserted. FerretDB and MinIO run as child processes, NATS in this process
// (stopped and restarted on the same port and JetStream store directory).
// The build tag keeps `make test` from running it.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/scripts/stack"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/nats-io/nats-server/v2/server"
	mongodrv "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// servers are the suite's dependencies, each of which a scenario may stop.
type servers struct {
	root string

	ferret *embedded.FerretDBProc

	minioMu   sync.Mutex
	minio     *embedded.MinIO
	minioOpts embedded.MinIOOptions

	natsMu   sync.Mutex
	nats     *server.Server
	natsPort int
	natsURL  string

	mongo *mongodrv.Client
	s3    *minio.Client
}

var (
	srv  *servers
	bins map[string]string
)

func TestMain(m *testing.M) {
	code := func() int {
		root, err := os.MkdirTemp("", "acme-faults-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(root)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if bins, err = stack.Build(ctx, filepath.Join(root, "bin"), false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		s, err := startServers(ctx, root)
		defer s.stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		srv = s
		return m.Run()
	}()
	os.Exit(code)
}

func startServers(ctx context.Context, root string) (*servers, error) {
	s := &servers{root: root}
	var err error
	if s.ferret, err = embedded.StartFerretDB(ctx, embedded.FerretDBOptions{Dir: filepath.Join(root, "mongo"), Log: os.Stderr}); err != nil {
		return s, err
	}
	s.minioOpts = embedded.MinIOOptions{Dir: filepath.Join(root, "minio"), AccessKey: "faults-" + stack.Secret(4), SecretKey: stack.Secret(16), Log: os.Stderr}
	if s.minioOpts.Addr, err = embedded.FreeAddr(); err != nil {
		return s, err
	}
	if err := s.startMinIO(ctx); err != nil {
		return s, err
	}
	if err := s.startNATS(); err != nil {
		return s, err
	}
	if s.mongo, err = mongodrv.Connect(options.Client().ApplyURI(s.ferret.URI).SetServerSelectionTimeout(10 * time.Second)); err != nil {
		return s, err
	}
	if s.s3, err = minio.New(s.minioOpts.Addr, &minio.Options{Creds: credentials.NewStaticV4(s.minioOpts.AccessKey, s.minioOpts.SecretKey, "")}); err != nil {
		return s, err
	}
	return s, nil
}

func (s *servers) stop() {
	if s == nil {
		return
	}
	if s.mongo != nil {
		_ = s.mongo.Disconnect(context.Background())
	}
	s.stopNATS()
	s.stopMinIO()
	if s.ferret != nil {
		s.ferret.Stop()
	}
}

func (s *servers) startMinIO(ctx context.Context) error {
	s.minioMu.Lock()
	defer s.minioMu.Unlock()
	m, err := embedded.StartMinIO(ctx, s.minioOpts)
	if err != nil {
		return err
	}
	s.minio = m
	return nil
}

func (s *servers) stopMinIO() {
	s.minioMu.Lock()
	defer s.minioMu.Unlock()
	if s.minio != nil {
		s.minio.Stop()
		s.minio = nil
	}
}

// startNATS starts NATS on the suite's port (a free one the first time) with
// the same JetStream store directory every time.
func (s *servers) startNATS() error {
	s.natsMu.Lock()
	defer s.natsMu.Unlock()
	var ns *server.Server
	var err error
	deadline := time.Now().Add(15 * time.Second)
	for {
		ns, err = embedded.NATS(filepath.Join(s.root, "nats"), "127.0.0.1", s.natsPort)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the port may linger a moment
	}
	if err != nil {
		return err
	}
	s.nats = ns
	if s.natsPort == 0 {
		s.natsPort = ns.Addr().(*net.TCPAddr).Port
	}
	s.natsURL = ns.ClientURL()
	return nil
}

func (s *servers) stopNATS() {
	s.natsMu.Lock()
	defer s.natsMu.Unlock()
	if s.nats != nil {
		s.nats.Shutdown()
		s.nats.WaitForShutdown()
		s.nats = nil
	}
}

// env is one scenario's platform: the four services on fresh names.
type env struct {
	t       *testing.T
	p       *stack.Platform
	sec     stack.Secrets
	servers stack.Servers
	extra   map[string]string
	out     *stack.Output
	admin   *client
}

// launch starts the four services on a fresh database, bucket and subject
// prefix, and signs the administrator in.
func launch(t *testing.T, extra map[string]string) *env {
	t.Helper()
	name := fmt.Sprintf("f%s%d", strings.ToLower(strings.NewReplacer("/", "", "_", "").Replace(t.Name()))[:min(12, len(t.Name()))], time.Now().UnixNano()%1e6)
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, name)
	if err := srv.s3.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}
	sec, err := stack.NewSecrets("admin@acme.test", "")
	if err != nil {
		t.Fatal(err)
	}
	if extra == nil {
		extra = map[string]string{}
	}
	extra["AUTH_COOKIE_SECURE"] = "false"
	e := &env{t: t, sec: sec, extra: extra, out: &stack.Output{}}
	var out io.Writer = e.out
	if dir := os.Getenv("FAULTS_LOG_DIR"); dir != "" { // every service line, kept
		f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		out = io.MultiWriter(e.out, f)
	}
	e.servers = stack.Servers{
		MongoURL: srv.ferret.URI, MongoDB: name, NATSURL: srv.natsURL, SubjectPrefix: name,
		S3Endpoint: srv.minioOpts.Addr, S3Access: srv.minioOpts.AccessKey, S3Secret: srv.minioOpts.SecretKey, S3Bucket: name,
	}
	e.p, err = stack.Launch(stack.Options{Bins: bins, GatewayAddr: "127.0.0.1:0", Env: extra, Out: out}, e.servers, sec)
	if err != nil {
		t.Fatalf("%v\n%s", err, e.out.String())
	}
	t.Cleanup(func() {
		e.p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("service output (last 200 lines):\n%s", e.out.Tail(200))
		}
	})
	e.admin = newClient(t, e.p.GatewayURL)
	e.admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	return e
}

// restart starts a service again in place of its stopped process (same
// address and environment).
func (e *env) restart(name string) *stack.Proc {
	e.t.Helper()
	p, err := e.p.Restart(e.p.Procs[name])
	if err != nil {
		e.t.Fatalf("restart %s: %v", name, err)
	}
	return p
}

// client is an HTTP client with its own cookie jar.
type client struct {
	t   *testing.T
	api *apptest.Client
}

func newClient(t *testing.T, base string) *client {
	return &client{t: t, api: apptest.NewClient(t, base)}
}

// result is one exchange: status (0 on a transport error), whether the body
// was JSON, and how long it took.
type result struct {
	status  int
	json    bool
	body    []byte
	err     error
	elapsed time.Duration
}

// send never fails the test: faults make errors that are counted.
func (c *client) send(method, path string, body io.Reader, contentType string) result {
	start := time.Now()
	r, err := c.api.Send(method, path, body, map[string]string{"Content-Type": contentType})
	if r == nil {
		return result{err: err, elapsed: time.Since(start)}
	}
	return result{status: r.Status, json: r.IsJSON(), body: r.Body, err: err, elapsed: r.Elapsed}
}

func (c *client) do(method, path string, body any) result {
	var r io.Reader
	ct := ""
	if body != nil {
		b, _ := json.Marshal(body)
		r, ct = bytes.NewReader(b), "application/json"
	}
	return c.send(method, path, r, ct)
}

func (c *client) mustStatus(want int, method, path string, body any) map[string]any {
	c.t.Helper()
	r := c.do(method, path, body)
	if r.status != want {
		c.t.Fatalf("%s %s: status %d (%v), want %d: %.300s", method, path, r.status, r.err, want, r.body)
	}
	var m map[string]any
	_ = json.Unmarshal(r.body, &m)
	return m
}

// tally counts outcomes by operation and status, and the slowest answer.
type tally struct {
	mu      sync.Mutex
	counts  map[string]map[string]int
	slowest map[string]time.Duration
	example map[string]string // first body of each failing outcome
}

func newTally() *tally {
	return &tally{counts: map[string]map[string]int{}, slowest: map[string]time.Duration{}, example: map[string]string{}}
}

func (t *tally) add(op string, r result) string {
	k := fmt.Sprint(r.status)
	switch {
	case r.status == 0:
		k = "transport-error"
	case r.status >= 400 && !r.json:
		k += "-notjson"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts[op] == nil {
		t.counts[op] = map[string]int{}
	}
	t.counts[op][k]++
	if r.status == 0 || r.status >= 400 {
		if _, ok := t.example[k]; !ok {
			t.example[k] = fmt.Sprintf("%.160s%v", r.body, r.err)
		}
	}
	if r.elapsed > t.slowest[op] {
		t.slowest[op] = r.elapsed
	}
	return k
}

func (t *tally) count(op, k string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[op][k]
}

// table prints the counts, one line per operation.
func (t *tally) table(tt *testing.T, title string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ops []string
	for op := range t.counts {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  %-26s %-10s %s\n", title, "operation", "slowest", "outcomes")
	for _, op := range ops {
		var ks []string
		for k := range t.counts[op] {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		var parts []string
		for _, k := range ks {
			parts = append(parts, fmt.Sprintf("%s:%d", k, t.counts[op][k]))
		}
		fmt.Fprintf(&b, "  %-26s %-10s %s\n", op, t.slowest[op].Round(time.Millisecond), strings.Join(parts, " "))
	}
	var ks []string
	for k := range t.example {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Fprintf(&b, "  e.g. %s: %s\n", k, t.example[k])
	}
	tt.Log(b.String())
}

// eventually polls f until it is true or max passes.
func eventually(t *testing.T, max time.Duration, what string, f func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !f() {
		if time.Since(start) > max {
			t.Fatalf("%s: not within %s", what, max)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start)
}
