// Command files is the files service: it streams uploads into S3, keeps file
// records in MongoDB, serves downloads and optimised images.
package main

import (
	"github.com/acme/platform/pkg/service"
	"github.com/acme/platform/services/files/internal/app"
)

func main() { service.Main("files", app.Prefix, app.Settings, app.Run) }
