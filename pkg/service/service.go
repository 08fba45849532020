// Package service is the main function every binary of the platform shares:
// `<binary> healthcheck` for containers (no shell in the image), otherwise
// run until SIGINT or SIGTERM.
package service

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/acme/platform/pkg/healthcheck"
)

// RunFunc is each binary's internal/app.Run.
type RunFunc func(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(addr string)) error

// Main probes the binary's own /readyz when asked (address from addrEnv,
// else defAddr), or runs it until a signal; it exits 1 on an error.
func Main(name, addrEnv, defAddr string, run RunFunc) {
	if healthcheck.Requested(os.Args[1:]) {
		os.Exit(healthcheck.Probe(os.Getenv(addrEnv), defAddr, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Getenv, os.Stdout, nil)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
