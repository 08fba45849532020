// Command devstack is `make run`: it starts the whole platform on one machine
// without Docker. NATS (JetStream) runs inside this process; a MongoDB-wire
// server (FerretDB on SQLite), MinIO and Mailpit run as children built once
// from their pinned versions; the four services run as separate processes
// (scripts/devstack/devenv). Every server takes a login (generated, kept in
// DATA_DIR/dev-secrets.json), and a service process that dies is started
// again. Data lives under DATA_DIR (./data) and survives restarts; Ctrl-C
// stops everything.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/acme/platform/scripts/devstack/devenv"
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
	cfg := devenv.Config{
		DataDir: getenv("DATA_DIR"), GatewayAddr: getenv("GATEWAY_ADDR"), MailpitAddr: getenv("MAILPIT_ADDR"),
		Getenv: getenv, Out: out, Log: os.Stderr,
	}
	srv, err := devenv.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Stop()
	sec := srv.Secrets

	fmt.Fprintln(out, "building the services...")
	bins, err := stack.Build(ctx, "bin", false)
	if err != nil {
		return err
	}
	p, err := srv.Launch(bins)
	if err != nil {
		return err
	}
	defer p.Stop(20 * time.Second)
	if err := waitReady(ctx, p.GatewayURL); err != nil {
		fmt.Fprintln(out, "warning:", err)
	}
	dataDir := getenv("DATA_DIR")
	if dataDir == "" {
		dataDir = "data"
	}
	fmt.Fprintf(out, `
================================================================
 The platform is running: %[1]s   (Ctrl-C stops everything)
 Administrator: %[2]s  password: %[3]s
 (every secret is in %[4]s; set ADMIN_EMAIL/ADMIN_PASSWORD before the first run to choose)

 Sign in:
   curl -i -c jar -H 'Content-Type: application/json' \
     -d '{"email":"%[2]s","password":"%[3]s"}' %[1]s/signin
   curl -b jar %[1]s/me
 Data: %[5]s   Metrics: gateway %[9]s  auth %[10]s  files %[11]s  logs %[12]s
 The servers below take a login (passwords in %[4]s):
   MongoDB wire %[6]s  user %[14]s (mongoPassword)
   NATS %[7]s  users auth, files, logs, gateway, publisher (natsPasswords; deploy/nats.conf)
   MinIO %[8]s  (minioAccess, minioSecret)
 Mail (password reset, address verification) is caught by Mailpit, not sent:
   curl -s -u %[15]s:%[16]s '%[13]s/api/v1/messages'        # what was caught (newest first)
   curl -s -u %[15]s:%[16]s '%[13]s/api/v1/message/<ID>'    # one message, text and HTML parts
 A service process that dies is started again (1 s, doubling to 30 s).
================================================================
`, p.GatewayURL, sec.AdminEmail, sec.AdminPassword, srv.SecretsFile, dataDir, srv.MongoURL, srv.NATSURL, srv.MinIO.Endpoint,
		p.MetricsURLs["gateway"], p.MetricsURLs["auth"], p.MetricsURLs["files"], p.MetricsURLs["logs"], srv.Mailpit.API,
		sec.MongoUser, sec.MailpitUser, sec.MailpitPassword)

	// A service that dies (a crash, kill -9) is restarted in its place
	// with a back-off, as compose's `restart: unless-stopped` does; the
	// platform stops only when asked.
	supervised := p.Supervise(ctx, stack.DefaultBackoff, out)
	<-ctx.Done()
	fmt.Fprintln(out, "\nstopping...")
	p.Stop(20 * time.Second)
	supervised()
	return nil
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
