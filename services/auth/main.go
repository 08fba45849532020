// Command auth is the platform's account service: users, password hashes,
// sessions, sign-in throttling and user administration.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/acme/platform/pkg/healthcheck"
	"github.com/acme/platform/services/auth/internal/app"
)

func main() {
	// `<binary> healthcheck`: the container HEALTHCHECK (no shell in the image).
	if healthcheck.Requested(os.Args[1:]) {
		os.Exit(healthcheck.Probe(os.Getenv("AUTH_ADDR"), "127.0.0.1:8081", os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, os.Getenv, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "auth:", err)
		os.Exit(1)
	}
}
