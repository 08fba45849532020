// Command logs is the logs service: log records in MongoDB, written over
// HTTP by administrators and over NATS JetStream by services.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/acme/platform/pkg/healthcheck"
	"github.com/acme/platform/services/logs/internal/app"
)

func main() {
	// `<binary> healthcheck`: the container HEALTHCHECK (no shell in the image).
	if healthcheck.Requested(os.Args[1:]) {
		os.Exit(healthcheck.Probe(os.Getenv("LOGS_ADDR"), "127.0.0.1:8083", os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, os.Getenv, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "logs:", err)
		stop()
		os.Exit(1)
	}
}
