// Command bench is `make bench`: it starts real servers and the platform's
// four processes, then measures each target side by side with its raw limit
// in the same run, and prints ratios. Nothing here is a timed assertion.
//
// BENCH_ONLY=auth,pocketbase,variants,files,textdownloads,logs,logsearch,scale
// selects sections (all by default); BENCH_SECONDS sets the length of each
// timed phase (default 8). The pocketbase section runs a pinned PocketBase beside the platform and
// compares the two (record reads, sign-ins, 4 KiB uploads beside raw
// PutObject, 4 KiB downloads); the variants section (variants.go) compares image
// thumbnails with PocketBase's thumbs. The scale section (scale.go) fills the database to
// 1,000 and to SCALE_N (100,000) records per collection and measures the
// platform's requests, one at a time, at both sizes, beside PocketBase; it
// runs last, since it leaves the database full. The logdocs section
// (logdocs.go) runs only when BENCH_ONLY names it: it compares log records
// stored one document each with the logs service's chunk store. So does the
// uploads section (uploads.go): the 4 KiB upload alone, for profiling.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/scripts/stack"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// env is the running benchmark environment.
type env struct {
	ctx     context.Context
	tmp     string // scratch directory, removed at the end
	p       *stack.Platform
	sec     stack.Secrets
	servers stack.Servers
	mongo   *mongo.Client
	seconds time.Duration
	out     io.Writer
	results []result
}

type result struct {
	section, name, value, target string
}

func (e *env) report(section, name, value, target string) {
	e.results = append(e.results, result{section, name, value, target})
	fmt.Fprintf(e.out, "  %-58s %s\n", name, value)
}

func main() {
	if os.Getenv(hashBoundEnv) != "" {
		if err := hashBoundMain(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	secs, _ := strconv.Atoi(os.Getenv("BENCH_SECONDS"))
	if secs <= 0 {
		secs = 8
	}
	only := map[string]bool{}
	for _, s := range strings.Split(os.Getenv("BENCH_ONLY"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			only[s] = true
		}
	}
	want := func(s string) bool { return len(only) == 0 || only[s] }

	tmp, err := os.MkdirTemp("", "acme-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ns, err := embedded.NATS(filepath.Join(tmp, "nats"), "127.0.0.1", 0)
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	mdb, err := embedded.StartFerretDB(ctx, embedded.FerretDBOptions{Dir: filepath.Join(tmp, "mongo")})
	if err != nil {
		return err
	}
	defer mdb.Stop()
	mongoURL := mdb.URI
	if u := os.Getenv("MONGO_URL"); u != "" {
		mongoURL = u
	}
	mi, err := embedded.StartMinIO(ctx, embedded.MinIOOptions{Dir: filepath.Join(tmp, "minio"), AccessKey: "bench", SecretKey: stack.Secret(16), Log: out})
	if err != nil {
		return err
	}
	defer mi.Stop()
	fmt.Fprintln(out, "building services...")
	bins, err := stack.Build(ctx, filepath.Join(tmp, "bin"), false)
	if err != nil {
		return err
	}
	sec, err := stack.NewSecrets("admin@bench.local", "")
	if err != nil {
		return err
	}
	servers := stack.Servers{MongoURL: mongoURL, MongoDB: "bench", NATSURL: ns.ClientURL(), SubjectPrefix: "bench",
		S3Endpoint: mi.Endpoint, S3Access: mi.AccessKey, S3Secret: mi.SecretKey, S3Bucket: "bench-files"}
	// The services write their lines straight to a file: through a pipe,
	// every line would wake this process, on the cores being measured.
	plog, err := os.OpenFile(filepath.Join(tmp, "platform.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer plog.Close()
	p, err := stack.Launch(stack.Options{Bins: bins, GatewayAddr: "127.0.0.1:0", Out: stack.Direct{File: plog},
		Env: benchEnv()},
		servers, sec)
	if err != nil {
		return err
	}
	defer p.Stop(10 * time.Second)
	mc, err := mongo.Connect(options.Client().ApplyURI(mongoURL))
	if err != nil {
		return err
	}
	defer mc.Disconnect(context.Background())

	e := &env{ctx: ctx, tmp: tmp, p: p, sec: sec, servers: servers, mongo: mc, seconds: time.Duration(secs) * time.Second, out: out}
	sections := []struct {
		name  string
		fn    func(*env) error
		named bool // run only when BENCH_ONLY names it
	}{{"auth", benchAuth, false}, {"pocketbase", benchPocketBase, false}, {"variants", benchVariants, false}, {"files", benchFiles, false}, {"textdownloads", benchTextDownloads, false}, {"logs", benchLogs, false},
		{"logsearch", benchLogSearch, false}, {"scale", benchScale, false}, {"logdocs", benchLogDocs, true}, {"uploads", benchUploads, true}}
	for _, s := range sections {
		if !want(s.name) || (s.named && !only[s.name]) {
			continue
		}
		fmt.Fprintf(out, "\n== %s\n", s.name)
		if err := s.fn(e); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	fmt.Fprintln(out, "\n== summary (one machine, one run)")
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "section\tmeasure\tvalue\ttarget")
	for _, r := range e.results {
		if r.target != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.section, r.name, r.value, r.target)
		}
	}
	return tw.Flush()
}

// benchEnv is the services' settings: the benchmark's own, then any
// BENCH_ENV gives (KEY=VALUE pairs separated by commas), to measure a
// setting's effect (BENCH_ENV=GATEWAY_HANDOFF=false, say).
func benchEnv() map[string]string {
	env := map[string]string{"AUTH_COOKIE_SECURE": "false", "AUTH_THROTTLE_ACCOUNT_MAX": "1000000", "AUTH_THROTTLE_ADDRESS_MAX": "1000000"}
	for _, kv := range strings.Split(os.Getenv("BENCH_ENV"), ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			env[k] = v
		}
	}
	return env
}
