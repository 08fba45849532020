// Command devstack is `make run`: it starts the whole platform on one machine
// without Docker. NATS (JetStream) runs inside this process; a MongoDB-wire
// server (FerretDB on SQLite), MinIO and Mailpit run as children built once
// from their pinned versions; the four services run as separate processes
// (scripts/devstack/devenv). Every server takes a login (generated, kept in
// DATA_DIR/dev-secrets.json), and a service process that dies is started
// again. Data lives under DATA_DIR (./data) and survives restarts; Ctrl-C
// stops everything. Once the platform is up it prints its banner (the
// addresses and logins) last, and keeps it in DATA_DIR/banner.txt for `make
// info`.
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

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	// Everything the processes print passes through out, which notes when;
	// the banner waits for their start-up lines (quietWriter).
	out := &quietWriter{w: stdout}
	cfg := devenv.Config{
		DataDir: getenv("DATA_DIR"), GatewayAddr: getenv("GATEWAY_ADDR"), MailpitAddr: getenv("MAILPIT_ADDR"),
		Getenv: getenv, Out: out, Log: os.Stderr,
	}
	srv, err := devenv.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Stop()
	// Mailpit ending on its own (killed, crashed) would lose every mail
	// from then on, silently: make run says so at once and stops.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-srv.Mailpit.Exited():
			fmt.Fprintf(out, "\nMailpit (%s) exited: mail can no longer be caught; make run stops\n", srv.Mailpit.API)
			cancel(errMailpitExited)
		case <-ctx.Done():
		}
	}()

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
	if ctx.Err() != nil {
		return stopCause(ctx) // stopped during start-up: no banner
	}
	dataDir := getenv("DATA_DIR")
	if dataDir == "" {
		dataDir = "data"
	}
	// The banner comes last, once the start-up lines are out, and is kept
	// for `make info`; routine requests (probes, scrapes) log at DEBUG, so
	// at the default level nothing follows it but what happens.
	out.waitQuiet(ctx, 1500*time.Millisecond, 15*time.Second)
	kept := bannerPath(dataDir)
	text := banner(p, srv, dataDir, kept)
	if err := keepBanner(kept, text); err != nil {
		fmt.Fprintln(out, "warning: the banner could not be kept:", err)
	}
	fmt.Fprint(out, text)

	// A service that dies (a crash, kill -9) is restarted in its place
	// with a back-off, as compose's `restart: unless-stopped` does; the
	// platform stops only when asked.
	supervised := p.Supervise(ctx, stack.DefaultBackoff, out)
	// `make backup` and `make restore` find the servers here; SIGHUP
	// (sent by `make restore`) restarts the services with auth's secrets
	// read again from dev-secrets.json.
	if err := srv.WriteState(p); err != nil {
		fmt.Fprintln(out, "warning: the state for make backup could not be kept:", err)
	}
	defer srv.RemoveState()
	hup, usr1 := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(hup)
	defer signal.Stop(usr1)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-usr1:
			// `make restore`: no service reads or writes while it runs.
			fmt.Fprintln(out, "SIGUSR1: stopping the services until SIGHUP (make restore)")
			p.Hold(20 * time.Second)
			if err := srv.WriteState(p); err != nil {
				fmt.Fprintln(out, "warning:", err)
			}
		case <-hup:
			fmt.Fprintln(out, "SIGHUP: restarting the services with the secrets of", srv.SecretsFile)
			if err := srv.Reload(p); err != nil {
				fmt.Fprintln(out, "warning: reload:", err)
			}
			if err := srv.WriteState(p); err != nil {
				fmt.Fprintln(out, "warning:", err)
			}
		}
	}
	fmt.Fprintln(out, "\nstopping...")
	p.Stop(20 * time.Second)
	supervised()
	if err := markStopped(kept, time.Now()); err != nil {
		fmt.Fprintln(out, "warning:", err)
	}
	return stopCause(ctx)
}

// errMailpitExited stops make run when Mailpit ends on its own.
var errMailpitExited = errors.New("mailpit exited")

// stopCause is nil when make run was asked to stop (Ctrl-C, SIGTERM), or
// what stopped it otherwise.
func stopCause(ctx context.Context) error {
	if err := context.Cause(ctx); errors.Is(err, errMailpitExited) {
		return err
	}
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
