// Command gateway is the platform's only public entry: it resolves session
// cookies, signs identity tokens and streams requests to auth, files and logs.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/acme/platform/gateway/internal/app"
	"github.com/acme/platform/pkg/healthcheck"
)

func main() {
	// `<binary> healthcheck`: the container HEALTHCHECK (no shell in the image).
	if healthcheck.Requested(os.Args[1:]) {
		os.Exit(healthcheck.Probe(os.Getenv("GATEWAY_ADDR"), "127.0.0.1:8080", os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, os.Getenv, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
