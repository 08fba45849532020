// Command logs is the logs service: log records in MongoDB, written over
// HTTP by administrators and over NATS JetStream by services.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/acme/platform/services/logs/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, os.Getenv, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "logs:", err)
		stop()
		os.Exit(1)
	}
}
