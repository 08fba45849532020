// Command auth is the platform's account service: users, password hashes,
// sessions, sign-in throttling and user administration.
package main

import (
	"github.com/acme/platform/pkg/service"
	"github.com/acme/platform/services/auth/internal/app"
)

func main() { service.Main("auth", app.Prefix, app.Settings, app.Run) }
