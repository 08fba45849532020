// Command auth is the platform's account service: users, password hashes,
// sessions, sign-in throttling and user administration.
package main

import (
	"github.com/acme/platform/pkg/service"
	"github.com/acme/platform/services/auth/internal/app"
)

func main() { service.Main("auth", "AUTH_ADDR", "127.0.0.1:8081", app.Run) }
