// Command gateway is the platform's only public entry: it resolves session
// cookies, signs identity tokens and streams requests to auth, files and logs.
package main

import (
	"github.com/acme/platform/gateway/internal/app"
	"github.com/acme/platform/pkg/service"
)

func main() { service.Main("gateway", app.Prefix, app.Settings, app.Run) }
