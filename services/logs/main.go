// Command logs is the logs service: log records in MongoDB, written over
// HTTP by administrators and over NATS JetStream by services.
package main

import (
	"github.com/acme/platform/pkg/service"
	"github.com/acme/platform/services/logs/internal/app"
)

func main() { service.Main("logs", app.Prefix, app.Table, app.Run) }
