// Command files is the files service: it streams uploads into S3, keeps file
// records in MongoDB, serves downloads and optimised images.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/acme/platform/pkg/healthcheck"
	"github.com/acme/platform/services/files/internal/app"
)

func main() {
	// `<binary> healthcheck`: the container HEALTHCHECK (no shell in the image).
	if healthcheck.Requested(os.Args[1:]) {
		os.Exit(healthcheck.Probe(os.Getenv("FILES_ADDR"), "127.0.0.1:8082", os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, os.Getenv, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "files:", err)
		stop()
		os.Exit(1)
	}
}
