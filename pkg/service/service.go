// Package service is what every binary of the platform shares: its main
// function (`<binary> healthcheck` for containers, which have no shell,
// otherwise run until SIGINT or SIGTERM) and, in Process, the start-up and
// stop every service's Run repeats: the logger at LOG_LEVEL, the logged
// configuration, the NATS connection and its readiness check, the error
// lines sent to the log store, and the ordered stop (error lines
// published, NATS drained, then the closers registered with Defer, last
// first, so MongoDB, connected first with mongox.Connect, disconnects last).
package service

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/healthcheck"
)

// RunFunc is each binary's internal/app.Run.
type RunFunc func(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string)) error

// Main probes the binary's own /readyz when asked (at its ADDR setting,
// read from settings with prefix, as Run reads it), or runs it until a
// signal; it exits 1 on an error.
func Main(name, prefix string, settings config.Table, run RunFunc) {
	if healthcheck.Requested(os.Args[1:]) {
		addr := config.New(prefix, os.Getenv, settings).String("ADDR")
		os.Exit(healthcheck.Probe(addr, addr, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Getenv, os.Stdout, nil)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
