// Command soak is `make soak`: the whole platform (NATS in this process,
// FerretDB and MinIO as child processes, the four services as processes)
// under a realistic mix at a fixed rate through the gateway for
// SOAK_DURATION (default 10m): sign-ins, /me, small uploads and downloads,
// log publishing over NATS and log reading. Every answer must be the
// expected one; resident memory in use (Rss less LazyFree) and goroutines
// (go_goroutines from each service's /metrics) are sampled every
// SOAK_SAMPLE (10s) and, after the warm-up (a fifth of the run, at least
// 30s), must not grow (see grown); the rate must be held (at most 1% of the
// ticks find every worker busy). It prints a table and exits non-zero on
// failure.
//
// SOAK_RATE (requests per second, default 30) and SOAK_USERS (20) size it.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/scripts/stack"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/nats-io/nats.go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, os.Getenv, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

type config struct {
	duration, sample time.Duration
	rate, users      int
}

func readConfig(getenv func(string) string) (config, error) {
	c := config{duration: 10 * time.Minute, sample: 10 * time.Second, rate: 30, users: 20}
	var err error
	if v := getenv("SOAK_DURATION"); v != "" {
		if c.duration, err = time.ParseDuration(v); err != nil || c.duration < time.Minute {
			return c, fmt.Errorf("SOAK_DURATION %q: want a duration of at least 1m", v)
		}
	}
	if v := getenv("SOAK_SAMPLE"); v != "" {
		if c.sample, err = time.ParseDuration(v); err != nil || c.sample < time.Second {
			return c, fmt.Errorf("SOAK_SAMPLE %q: want a duration of at least 1s", v)
		}
	}
	for k, p := range map[string]*int{"SOAK_RATE": &c.rate, "SOAK_USERS": &c.users} {
		if v := getenv(k); v != "" {
			if *p, err = strconv.Atoi(v); err != nil || *p < 1 {
				return c, fmt.Errorf("%s %q: want a positive integer", k, v)
			}
		}
	}
	return c, nil
}

func run(ctx context.Context, getenv func(string) string, out io.Writer) (bool, error) {
	cfg, err := readConfig(getenv)
	if err != nil {
		return false, err
	}
	root, err := os.MkdirTemp("", "acme-soak-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(root)
	fmt.Fprintf(out, "soak: %s at %d requests/s with %d users; building and starting the platform...\n", cfg.duration, cfg.rate, cfg.users)
	bins, err := stack.Build(ctx, filepath.Join(root, "bin"), false)
	if err != nil {
		return false, err
	}
	ns, err := embedded.NATS(filepath.Join(root, "nats"), "127.0.0.1", 0)
	if err != nil {
		return false, err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	fdb, err := embedded.StartFerretDB(ctx, embedded.FerretDBOptions{Dir: filepath.Join(root, "mongo"), Log: os.Stderr})
	if err != nil {
		return false, err
	}
	defer fdb.Stop()
	mi, err := embedded.StartMinIO(ctx, embedded.MinIOOptions{Dir: filepath.Join(root, "minio"), AccessKey: "soak-" + stack.Secret(4), SecretKey: stack.Secret(16), Log: os.Stderr})
	if err != nil {
		return false, err
	}
	defer mi.Stop()
	s3, err := minio.New(mi.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(mi.AccessKey, mi.SecretKey, "")})
	if err != nil {
		return false, err
	}
	if err := s3.MakeBucket(ctx, "soak", minio.MakeBucketOptions{}); err != nil {
		return false, err
	}
	sec, err := stack.NewSecrets("admin@acme.test", "")
	if err != nil {
		return false, err
	}
	svcOut := &lineCounter{}
	p, err := stack.Launch(stack.Options{Bins: bins, GatewayAddr: "127.0.0.1:0", Env: soakEnv, Out: svcOut},
		stack.Servers{MongoURL: fdb.URI, MongoDB: "soak", NATSURL: ns.ClientURL(), SubjectPrefix: "soak",
			S3Endpoint: mi.Endpoint, S3Access: mi.AccessKey, S3Secret: mi.SecretKey, S3Bucket: "soak"}, sec)
	if err != nil {
		return false, err
	}
	defer p.Stop(10 * time.Second)

	l := &load{base: p.GatewayURL, stats: map[string]*opStats{}}
	l.admin = newClient(p.GatewayURL)
	if r := l.admin.json("POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword}); r.status != 200 {
		return false, fmt.Errorf("admin sign-in: %d %s", r.status, r.body)
	}
	for i := range cfg.users {
		email := fmt.Sprintf("user%d@soak.test", i)
		if r := l.admin.json("POST", "/users", map[string]string{"email": email, "password": "correct horse battery", "fullName": "Soak User", "edv": "E-1"}); r.status != 201 {
			return false, fmt.Errorf("create user: %d %s", r.status, r.body)
		}
		u := &user{email: email, c: newClient(p.GatewayURL)}
		if r := u.c.json("POST", "/signin", map[string]string{"email": email, "password": "correct horse battery"}); r.status != 200 {
			return false, fmt.Errorf("user sign-in: %d %s", r.status, r.body)
		}
		l.users = append(l.users, u)
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		return false, err
	}
	defer nc.Close()
	if l.lc, err = logclient.New(nc, logclient.Options{Prefix: "soak"}); err != nil {
		return false, err
	}

	// Load at a fixed rate: a tick per request, handed to a pool of workers;
	// a tick finding every worker busy is counted as late.
	rctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	jobs := make(chan int, 64)
	var wg sync.WaitGroup
	for range workers(cfg.rate) {
		wg.Go(func() {
			for n := range jobs {
				l.one(n)
			}
		})
	}
	samples := []sample{}
	var smu sync.Mutex
	wg.Go(func() {
		t := time.NewTicker(cfg.sample)
		defer t.Stop()
		start := time.Now()
		for {
			s := takeSample(p, time.Since(start))
			smu.Lock()
			samples = append(samples, s)
			smu.Unlock()
			fmt.Fprintf(out, "  %6s  %s\n", s.at.Round(time.Second), s.brief(l))
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
		}
	})
	// Tick n is due at n/rate after the start. A time.Ticker would drop
	// the ticks a slow loop misses; here a late loop catches up at once,
	// so every tick of the run is either sent or counted late.
	start := time.Now()
	wait := time.NewTimer(0)
loop:
	for n := 0; ; n++ {
		due := start.Add(time.Duration(n) * time.Second / time.Duration(cfg.rate))
		if d := time.Until(due); d > 0 {
			wait.Reset(d)
			select {
			case <-rctx.Done():
				break loop
			case <-wait.C:
			}
		} else if rctx.Err() != nil {
			break loop
		}
		select {
		case jobs <- n:
		default:
			l.late.Add(1)
		}
	}
	wait.Stop()
	close(jobs)
	wg.Wait()
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	if err := l.lc.Close(fctx); err != nil {
		l.fail("log publish", fmt.Sprintf("logclient close: %v", err))
	}
	if st := l.lc.Stats(); st.Dropped > 0 || st.Failed > 0 {
		l.fail("log publish", fmt.Sprintf("logclient dropped %d, failed %d", st.Dropped, st.Failed))
	}
	if ctx.Err() != nil {
		return false, errors.New("interrupted")
	}
	return report(out, cfg, l, samples, svcOut), nil
}

// soakEnv sizes the services' caches so that each reaches its bound within
// the warm-up: with their defaults, some fill for longer than the run lasts
// (the files service's records, 10,000, take about five minutes of uploads
// here), and the growth measured after the warm-up would be a cache filling
// up, not a leak. Each bound is tested on its own (pkg/fencedcache
// TestBounded for the files service's records, filecache
// TestOwnerCacheBound, pkg/handoff TestObjectCacheBounds, the logs
// service's TestChunkCacheBounds).
var soakEnv = map[string]string{
	"AUTH_COOKIE_SECURE":         "false",
	"FILES_RECORD_CACHE_SIZE":    "1000",
	"FILES_OWNER_CACHE_SIZE":     "2000",
	"GATEWAY_OBJECT_CACHE_BYTES": "8MiB",
	"LOGS_CHUNK_CACHE_MB":        "2",
}

// workers is the size of the pool sending the load: a quarter of a
// second of requests at rate (at least 32), so that a tick is late only
// when the platform has fallen that far behind, not whenever a few slow
// answers are in flight.
func workers(rate int) int { return max(32, rate/4) }

// user is a signed-in user with the files it uploaded.
type user struct {
	email string
	c     *client
	mu    sync.Mutex
	files []string
}

type load struct {
	base  string
	admin *client
	users []*user
	lc    *logclient.Client
	late  atomic.Int64

	mu       sync.Mutex
	stats    map[string]*opStats
	failures []string
}

type opStats struct {
	n, errors int
	lat       []time.Duration
}

// mix: op and weight out of 100.
var mix = []struct {
	name   string
	weight int
}{
	{"POST /signin", 3}, {"GET /me", 37}, {"POST /upload/file", 12}, {"GET /download/file", 18},
	{"log publish", 20}, {"GET /log/log/1", 10},
}

// one sends request n: its operation by n's place in a block of 100 (each
// share of the mix exactly per 100), its user shifted by one each block
// so that every user comes to every operation (a user chosen by n alone
// would always get the same one or two, and the users that upload would
// never be the ones that download).
func (l *load) one(n int) {
	u := l.users[(n+n/100)%len(l.users)]
	k := (n * 37) % 100
	var name string
	for _, m := range mix {
		if k < m.weight {
			name = m.name
			break
		}
		k -= m.weight
	}
	start := time.Now()
	var r resp
	want := 200
	switch name {
	case "POST /signin":
		r = newClient(l.base).json("POST", "/signin", map[string]string{"email": u.email, "password": "correct horse battery"})
	case "GET /me":
		r = u.c.json("GET", "/me", nil)
	case "POST /upload/file":
		want = 201
		data := make([]byte, 1024+n%(63<<10))
		_, _ = rand.Read(data)
		r = u.c.upload(fmt.Sprintf("f%d.bin", n), data)
		if r.status == 201 {
			var m struct {
				File struct{ ID string } `json:"file"`
			}
			if json.Unmarshal(r.body, &m) == nil && m.File.ID != "" {
				u.mu.Lock()
				u.files = append(u.files, m.File.ID)
				if len(u.files) > 50 {
					u.files = u.files[1:]
				}
				u.mu.Unlock()
			}
		}
	case "GET /download/file":
		u.mu.Lock()
		id := ""
		if len(u.files) > 0 {
			id = u.files[n%len(u.files)]
		}
		u.mu.Unlock()
		if id == "" {
			r = u.c.json("GET", "/me", nil)
			name = "GET /me"
		} else {
			r = u.c.do("GET", "/download/file/"+id, nil, "")
		}
	case "log publish":
		ok := l.lc.Log("SERVER-APP-A", logclient.TypeLog, fmt.Sprintf("soak record %d", n), "soak")
		r = resp{status: 200}
		if !ok {
			r.status = 0
			r.err = errors.New("logclient refused the record")
		}
	case "GET /log/log/1":
		want = 201
		r = l.admin.json("GET", "/log/log/1?limit=20", nil)
	}
	el := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.op(name)
	st.n++
	st.lat = append(st.lat, el)
	if r.status != want {
		st.errors++
		if len(l.failures) < 20 {
			l.failures = append(l.failures, fmt.Sprintf("%s: %d %v %.200s", name, r.status, r.err, r.body))
		}
	}
}

// op returns the statistics of operation name (l.mu held).
func (l *load) op(name string) *opStats {
	st := l.stats[name]
	if st == nil {
		st = &opStats{}
		l.stats[name] = st
	}
	return st
}

func (l *load) fail(name, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.op(name)
	st.errors++
	l.failures = append(l.failures, name+": "+msg)
}

func (l *load) totals() (n, errs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.stats {
		n += s.n
		errs += s.errors
	}
	return n, errs
}

// lineCounter swallows the services' output, counting lines and errors.
type lineCounter struct {
	lines, errors atomic.Int64
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.lines.Add(int64(bytes.Count(p, []byte{'\n'})))
	c.errors.Add(int64(bytes.Count(p, []byte(`"level":"ERROR"`)) + bytes.Count(p, []byte("level=ERROR"))))
	return len(p), nil
}

// client is a cookie-keeping HTTP client.
type client struct {
	base string
	h    *http.Client
}

type resp struct {
	status int
	body   []byte
	err    error
}

func newClient(base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{base: base, h: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

func (c *client) do(method, path string, body io.Reader, ct string) resp {
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		return resp{err: err}
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	r, err := c.h.Do(req)
	if err != nil {
		return resp{err: err}
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	return resp{status: r.StatusCode, body: b, err: err}
}

func (c *client) json(method, path string, v any) resp {
	if v == nil {
		return c.do(method, path, nil, "")
	}
	b, _ := json.Marshal(v)
	return c.do(method, path, bytes.NewReader(b), "application/json")
}

func (c *client) upload(name string, data []byte) resp {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	w, _ := mw.CreateFormFile("file", name)
	_, _ = w.Write(data)
	_ = mw.WriteField("meta", `{"soak":true}`)
	_ = mw.Close()
	return c.do("POST", "/upload/file", &buf, mw.FormDataContentType())
}
