// Command devstack is `make run`: it starts the whole platform on one machine
// without Docker. NATS (JetStream) runs inside this process, a MongoDB-wire
// server (FerretDB on SQLite, pkg/cmd/ferretdb) and MinIO run as children
// built once from their pinned versions, and the four services run as
// separate processes. Data lives under DATA_DIR (./data) and survives
// restarts; Ctrl-C stops everything.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/scripts/stack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

type persisted struct {
	stack.Secrets
	MinIOAccess string `json:"minioAccess"`
	MinIOSecret string `json:"minioSecret"`
}

func run(ctx context.Context, getenv func(string) string, out io.Writer) error {
	dataDir := getenv("DATA_DIR")
	if dataDir == "" {
		dataDir = "data"
	}
	gatewayAddr := getenv("GATEWAY_ADDR")
	if gatewayAddr == "" {
		gatewayAddr = "127.0.0.1:8080"
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	sec, err := loadSecrets(filepath.Join(dataDir, "dev-secrets.json"), getenv)
	if err != nil {
		return err
	}

	fmt.Fprintln(out, "starting NATS (JetStream) and the MongoDB-wire server (FerretDB on SQLite)...")
	ns, err := embedded.NATS(filepath.Join(dataDir, "nats"), "127.0.0.1", 0)
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	// MONGO_SYNCHRONOUS=full makes SQLite fsync every commit (docs/configuration.md).
	mongo, err := embedded.StartFerretDB(ctx, embedded.FerretDBOptions{
		Dir: filepath.Join(dataDir, "mongo"), Log: os.Stderr, Synchronous: getenv("MONGO_SYNCHRONOUS"),
	})
	if err != nil {
		return err
	}
	defer mongo.Stop()

	fmt.Fprintln(out, "starting MinIO (if it is not built yet, the build from source takes a few minutes, once)...")
	mi, err := embedded.StartMinIO(ctx, embedded.MinIOOptions{
		Dir: filepath.Join(dataDir, "minio"), AccessKey: sec.MinIOAccess, SecretKey: sec.MinIOSecret, Log: out,
	})
	if err != nil {
		return err
	}
	defer mi.Stop()

	// A local mail catcher: the auth service's mail (password reset,
	// address verification) is caught here instead of delivered.
	fmt.Fprintln(out, "starting Mailpit, the mail catcher (built once from its module)...")
	mailpitAddr := getenv("MAILPIT_ADDR")
	if mailpitAddr == "" {
		mailpitAddr = "127.0.0.1:8025"
	}
	mp, err := embedded.StartMailpit(ctx, embedded.MailpitOptions{HTTPAddr: mailpitAddr, Log: out})
	if err != nil {
		return err
	}
	defer mp.Stop()

	fmt.Fprintln(out, "building the services...")
	bins, err := stack.Build(ctx, "bin", false)
	if err != nil {
		return err
	}
	env := map[string]string{
		"AUTH_COOKIE_SECURE": "false",
		"AUTH_SMTP_HOST":     mp.SMTPHost, "AUTH_SMTP_PORT": strconv.Itoa(mp.SMTPPort), "AUTH_SMTP_TLS": "none",
		"AUTH_PUBLIC_URL": "http://" + gatewayAddr,
	}
	for _, k := range []string{"LOG_LEVEL", "GATEWAY_PPROF", "GODEBUG"} {
		if v := getenv(k); v != "" {
			env[k] = v
		}
	}
	p, err := stack.Launch(stack.Options{Bins: bins, GatewayAddr: gatewayAddr, Env: env, Out: out},
		stack.Servers{
			MongoURL: mongo.URI, MongoDB: "acme", NATSURL: ns.ClientURL(), SubjectPrefix: "acme",
			S3Endpoint: mi.Endpoint, S3Access: sec.MinIOAccess, S3Secret: sec.MinIOSecret, S3Bucket: "acme-files",
		}, sec.Secrets)
	if err != nil {
		return err
	}
	defer p.Stop(20 * time.Second)
	if err := waitReady(ctx, p.GatewayURL); err != nil {
		fmt.Fprintln(out, "warning:", err)
	}
	fmt.Fprintf(out, `
================================================================
 The platform is running: %[1]s   (Ctrl-C stops everything)
 Administrator: %[2]s  password: %[3]s
 (stored in %[4]s; set ADMIN_EMAIL/ADMIN_PASSWORD before the first run to choose)

 Sign in:
   curl -i -c jar -H 'Content-Type: application/json' \
     -d '{"email":"%[2]s","password":"%[3]s"}' %[1]s/signin
   curl -b jar %[1]s/me
 Data: %[5]s   MongoDB wire: %[6]s   NATS: %[7]s   MinIO: %[8]s
 Metrics: gateway %[9]s  auth %[10]s  files %[11]s  logs %[12]s
 Mail (password reset, address verification) is caught by Mailpit, not sent:
   curl -s '%[13]s/api/v1/messages'             # what was caught (newest first)
   curl -s '%[13]s/api/v1/message/<ID>'         # one message, text and HTML parts
================================================================
`, p.GatewayURL, sec.AdminEmail, sec.AdminPassword, filepath.Join(dataDir, "dev-secrets.json"), dataDir, mongo.URI, ns.ClientURL(), mi.Endpoint,
		p.MetricsURLs["gateway"], p.MetricsURLs["auth"], p.MetricsURLs["files"], p.MetricsURLs["logs"], mp.API)

	// Stop when asked or when a service dies.
	died := make(chan string, len(p.Procs))
	for name, proc := range p.Procs {
		go func() { <-proc.Exited(); died <- name }()
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "\nstopping...")
		return nil
	case name := <-died:
		return fmt.Errorf("%s exited; stopping the platform", name)
	}
}

func loadSecrets(path string, getenv func(string) string) (persisted, error) {
	var p persisted
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &p); err != nil {
			return p, fmt.Errorf("%s: %w", path, err)
		}
		return p, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return p, err
	}
	email := getenv("ADMIN_EMAIL")
	if email == "" {
		email = "admin@acme.local"
	}
	sec, err := stack.NewSecrets(email, getenv("ADMIN_PASSWORD"))
	if err != nil {
		return p, err
	}
	p = persisted{Secrets: sec, MinIOAccess: "acme-" + stack.Secret(6), MinIOSecret: stack.Secret(24)}
	b, _ := json.MarshalIndent(p, "", "  ")
	return p, os.WriteFile(path, b, 0o600)
}

func waitReady(ctx context.Context, base string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("gateway /readyz did not report ready within 30s")
}
