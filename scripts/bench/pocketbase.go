package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/scripts/stack"
)

// PocketBase, pinned: the newest release that builds with Go 1.26 (v0.40
// asks for go 1.27). Its stock program is examples/base.
const (
	pocketBaseModule  = "github.com/pocketbase/pocketbase"
	pocketBaseVersion = "v0.39.11"
)

// pocketBaseBinary returns the path of the pinned PocketBase program,
// building it once (a minute or two) into the cache next to MinIO's;
// $POCKETBASE_BINARY overrides. Built like pkg/embedded's binaries
// (embedded.CachedBinary: one build under a lock, never half-written).
func pocketBaseBinary(ctx context.Context, progress io.Writer) (string, error) {
	return embedded.Pinned{Name: "PocketBase", Package: pocketBaseModule + "/examples/base", Version: pocketBaseVersion,
		Dir: "pocketbase", File: "pocketbase", Env: "POCKETBASE_BINARY", Note: " (a minute or two the first time)"}.Binary(ctx, progress)
}

// pocketBase is a running `pocketbase serve`.
type pocketBase struct {
	URL    string
	cmd    *exec.Cmd
	exited chan struct{}
	out    *stack.Output
}

// startPocketBase creates a superuser in a fresh data directory (the CLI),
// starts the server on a free loopback port and waits for /api/health.
func startPocketBase(ctx context.Context, bin, dir, email, password string) (*pocketBase, error) {
	addr, err := embedded.FreeAddr()
	if err != nil {
		return nil, err
	}
	if b, err := exec.CommandContext(ctx, bin, "superuser", "upsert", email, password, "--dir", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pocketbase superuser upsert: %w\n%s", err, b)
	}
	pb := &pocketBase{URL: "http://" + addr, exited: make(chan struct{}), out: &stack.Output{}}
	pb.cmd = exec.Command(bin, "serve", "--http", addr, "--dir", dir)
	pb.cmd.Stdout, pb.cmd.Stderr = pb.out, pb.out
	pb.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := pb.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = pb.cmd.Wait(); close(pb.exited) }()
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-pb.exited:
			return nil, fmt.Errorf("pocketbase exited during start-up:\n%s", pb.out.Tail(20))
		default:
		}
		if resp, err := c.Get(pb.URL + "/api/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return pb, nil
			}
		}
		if time.Now().After(deadline) {
			pb.Stop()
			return nil, fmt.Errorf("pocketbase not healthy on %s after 30s:\n%s", addr, pb.out.Tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (pb *pocketBase) Pid() int { return pb.cmd.Process.Pid }

// Stop sends SIGTERM, then SIGKILL after 10 s.
func (pb *pocketBase) Stop() {
	_ = pb.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pb.exited:
	case <-time.After(10 * time.Second):
		_ = pb.cmd.Process.Kill()
		<-pb.exited
	}
}

// hit does one request, discards the answer and fails unless the status is
// want (lighter on the load generator than call: no JSON decoding).
func hit(c *http.Client, method, url string, body []byte, hdr map[string]string, want int) error {
	resp, err := send(context.Background(), c, method, url, body, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// side is one stack under one load: its rounds and the CPU its processes
// (and, apart, the bench process) spent during them.
type side struct {
	rounds []stats
	cpu    cpuSample // by process, over every round
	self   int64     // the bench process's ticks over every round
}

func (s *side) requests() (n int) {
	for _, r := range s.rounds {
		n += r.n
	}
	return n
}

// median is the round with the median requests/s (the upper one of an even
// count).
func (s *side) median() stats {
	r := append([]stats{}, s.rounds...)
	sort.Slice(r, func(i, j int) bool { return r[i].rps() < r[j].rps() })
	return r[len(r)/2]
}

func (s *side) String() string {
	str := fmt.Sprintf("%s; rounds %s/s", s.median(), s.rates())
	errs, first := 0, error(nil)
	for _, r := range s.rounds {
		errs += r.errs
		if first == nil {
			first = r.err
		}
	}
	if errs > 0 {
		str += fmt.Sprintf("; %d errors in all rounds, the first: %.200s", errs, first)
	}
	return str
}

// rates lists the rounds' requests/s.
func (s *side) rates() string {
	var l []string
	for _, r := range s.rounds {
		l = append(l, fmt.Sprintf("%.1f", r.rps()))
	}
	return strings.Join(l, ", ")
}

// pairedRatio is the median of a's rounds' requests/s each divided by those
// of b's round of the same index (run just before it), with the ratios
// listed.
func pairedRatio(a, b side) string {
	var rs []float64
	for i := range min(len(a.rounds), len(b.rounds)) {
		rs = append(rs, a.rounds[i].rps()/b.rounds[i].rps())
	}
	if len(rs) == 0 {
		return "no rounds"
	}
	l := make([]string, len(rs))
	for i, r := range rs {
		l[i] = fmt.Sprintf("%.2f", r)
	}
	sort.Float64s(rs)
	return fmt.Sprintf("%.2f; rounds %s", rs[len(rs)/2], strings.Join(l, ", "))
}

// perRequest is the CPU µs per request of each process and their sum.
func (s *side) perRequest(order []string) (string, float64) {
	return s.cpu.perRequest(s.requests(), order)
}

func (s *side) selfPerRequest() float64 {
	return float64(s.self) * 1e6 / clockTicks / float64(max(s.requests(), 1))
}

// run does one round of fn from workers goroutines for d, reading sample
// before and after.
func (s *side) run(ctx context.Context, workers int, d time.Duration, sample func() cpuSample, fn func(int) error) error {
	return s.measure(ctx, sample, func() (stats, error) { return load(ctx, workers, d, fn), nil })
}

// measure does one round, reading sample before and after.
func (s *side) measure(ctx context.Context, sample func() cpuSample, round func() (stats, error)) error {
	if s.cpu == nil {
		s.cpu = cpuSample{}
	}
	self0, _ := readStat(os.Getpid())
	before := sample()
	st, err := round()
	after := sample()
	self1, _ := readStat(os.Getpid())
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.cpu.add(before, after)
	s.self += self1.ticks - self0.ticks
	s.rounds = append(s.rounds, st)
	return nil
}

func mark(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// benchPocketBase: PocketBase beside the platform, in the same run on the
// same cores. An authenticated record fetch (GET
// /api/collections/users/records/:id with the user's token) against an
// authenticated GET /me through the gateway (session cookie), and
// PocketBase's auth-with-password against POST /signin: requests/s, p50,
// p99 and the CPU time per request of every process of each stack
// (/proc/PID/stat utime+stime before and after each round). The two sides
// run in alternating rounds; the median round's rate and latencies are
// reported, the CPU per request over all rounds. Then 4 KiB uploads and
// downloads (benchPocketBaseFiles).
func benchPocketBase(e *env) error {
	const rounds, workers = 3, 32
	signinWorkers := 2 * runtime.NumCPU() // as the auth section's sign-ins

	bin, err := pocketBaseBinary(e.ctx, e.out)
	if err != nil {
		return err
	}
	suEmail, suPass := "root@bench.local", "pb"+stack.Secret(12) // never taken for a flag
	pb, err := startPocketBase(e.ctx, bin, filepath.Join(e.tmp, "pocketbase"), suEmail, suPass)
	if err != nil {
		return err
	}
	defer pb.Stop()
	c := httpClient(64)
	pbi, err := setUpPocketBase(c, pb, suEmail, suPass)
	if err != nil {
		return err
	}
	pbCreds, _ := json.Marshal(pbi.userCreds)
	pbToken, recID := pbi.userToken, pbi.userID
	pbFetchURL := pb.URL + "/api/collections/users/records/" + recID
	pbHdr := map[string]string{"Authorization": pbToken}
	if err := hit(c, "GET", pbFetchURL, nil, pbHdr, 200); err != nil {
		return err
	}

	// The platform: the administrator's session, as in the auth section.
	gw := e.p.GatewayURL
	creds, _ := json.Marshal(map[string]string{"email": e.sec.AdminEmail, "password": e.sec.AdminPassword})
	cookie, err := signInCookie(e)
	if err != nil {
		return err
	}
	meHdr := map[string]string{"Cookie": "sessionId=" + cookie}

	// CPU of each stack: PocketBase is one process; the platform is every
	// other child of this process (gateway, auth, files, logs, FerretDB,
	// MinIO), each with its descendants. NATS runs inside this process.
	pbSample := func() cpuSample { return samplePid(pb.Pid(), "pocketbase") }
	platSample := platformCPU(e, pb.Pid())
	order := []string{"gateway", "auth", "files", "logs"}
	fmt.Fprintf(e.out, "  PocketBase %s on %s (pid %d); the platform's processes: %s\n", pocketBaseVersion, pb.URL, pb.Pid(), strings.Join(sortedKeys(platSample()), ", "))
	fmt.Fprintln(e.out, "  NATS runs inside the bench process with the load generator: its CPU is not counted, though every cached GET /me costs it the gateway's and auth's fence round trips; the bench process's own CPU per request (load generator and NATS) is shown apart, an upper bound of what NATS adds")
	if os.Getenv("MONGO_URL") != "" {
		fmt.Fprintln(e.out, "  MONGO_URL is set: the platform's MongoDB server is not a child of the bench, its CPU is not counted")
	}

	// compare runs a and b in alternating rounds after a short warm-up of
	// each.
	compare := func(n int, a, b *side, fa, fb func(int) error) error {
		return alternate(e, n, rounds, leg{a, pbSample, fa}, leg{b, platSample, fb})
	}

	// Every load here comes from the same raw client (rawHitter), one
	// keep-alive connection per worker.
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	raw := func(method, url string, body []byte, hdr map[string]string, want, n int) (func(int) error, error) {
		h, err := newRawHitter(method, url, body, hdr, want, n)
		if err != nil {
			return nil, err
		}
		closers = append(closers, h.close)
		return h.hit, nil
	}
	pbFetchHit, err := raw("GET", pbFetchURL, nil, pbHdr, 200, workers)
	if err != nil {
		return err
	}
	meHit, err := raw("GET", gw+"/me", nil, meHdr, 200, workers)
	if err != nil {
		return err
	}
	var pbFetch, me side
	if err := compare(workers, &pbFetch, &me, pbFetchHit, meHit); err != nil {
		return err
	}
	pbm, mem := pbFetch.median(), me.median()
	e.report("pocketbase", fmt.Sprintf("PocketBase GET users/records/:id, token (%d conns)", workers), pbFetch.String(), "")
	e.report("pocketbase", fmt.Sprintf("platform GET /me via gateway, cookie (%d conns)", workers), me.String(), "")
	r := mem.rps() / pbm.rps()
	e.report("pocketbase", "GET /me/s ÷ PocketBase record fetches/s (median rounds)", fmt.Sprintf("%.2f %s", r, mark(r >= 2)), ">= 2")
	p99, pbP99 := mem.pct(0.99), pbm.pct(0.99)
	e.report("pocketbase", "GET /me p99 vs PocketBase record fetch p99", fmt.Sprintf("%s vs %s %s", p99.Round(10*time.Microsecond), pbP99.Round(10*time.Microsecond), mark(p99 <= pbP99)), "<= PocketBase's")
	pbCPU, pbTotal := pbFetch.perRequest(nil)
	meCPU, meTotal := me.perRequest(order)
	e.report("pocketbase", "CPU/request, PocketBase record fetch", pbCPU, "")
	e.report("pocketbase", "CPU/request, platform GET /me", meCPU, "")
	r = meTotal / pbTotal
	e.report("pocketbase", "CPU/request platform ÷ PocketBase (GET /me vs fetch)", fmt.Sprintf("%.2f %s", r, mark(r <= 0.5)), "<= 0.5")
	e.report("pocketbase", "bench process CPU/request (load generator, NATS)", fmt.Sprintf("%.0f µs (PocketBase fetch) vs %.0f µs (GET /me), not counted", pbFetch.selfPerRequest(), me.selfPerRequest()), "")

	pbSigninHit, err := raw("POST", pb.URL+"/api/collections/users/auth-with-password", pbCreds, nil, 200, signinWorkers)
	if err != nil {
		return err
	}
	signinHit, err := raw("POST", gw+"/signin", creds, nil, 200, signinWorkers)
	if err != nil {
		return err
	}
	var pbSignin, signin side
	if err := compare(signinWorkers, &pbSignin, &signin, pbSigninHit, signinHit); err != nil {
		return err
	}
	e.report("pocketbase", fmt.Sprintf("PocketBase auth-with-password (%d conns)", signinWorkers), pbSignin.String(), "")
	e.report("pocketbase", fmt.Sprintf("platform POST /signin via gateway (%d conns)", signinWorkers), signin.String(), "")
	r = signin.median().rps() / pbSignin.median().rps()
	e.report("pocketbase", "sign-ins/s platform ÷ PocketBase (median rounds)", fmt.Sprintf("%.2f %s", r, mark(r >= 2.2)), ">= 2.2")
	pbCPU, pbTotal = pbSignin.perRequest(nil)
	siCPU, siTotal := signin.perRequest(order)
	e.report("pocketbase", "CPU/request, PocketBase auth-with-password", pbCPU, "")
	e.report("pocketbase", "CPU/request, platform POST /signin", siCPU, "")
	e.report("pocketbase", "CPU/sign-in platform ÷ PocketBase", ratio(siTotal, pbTotal), "report")
	e.report("pocketbase", "bench process CPU/request (load generator, NATS)", fmt.Sprintf("%.0f µs (PocketBase sign-in) vs %.0f µs (POST /signin), not counted", pbSignin.selfPerRequest(), signin.selfPerRequest()), "")

	return benchPocketBaseFiles(e, bin, c, pbi, meHdr, raw)
}

func sortedKeys(s cpuSample) []string {
	var k []string
	for n := range s {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}
