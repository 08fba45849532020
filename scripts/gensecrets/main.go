// Command gensecrets prints a fresh .env for compose.yaml: the gateway's
// identity key pair, the service credential, MinIO keys and an admin
// password. Nothing secret is committed; run it once per deployment:
//
//	go run ./scripts/gensecrets > .env && chmod 600 .env
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/acme/platform/scripts/stack"
)

func main() {
	sec, err := stack.NewSecrets("admin@acme.local", "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	oneLine := func(pem string) string { return strings.ReplaceAll(strings.TrimSpace(pem), "\n", `\n`) }
	fmt.Printf("IDENTITY_PUBLIC_KEY=\"%s\"\n", oneLine(sec.IdentityPublicPEM))
	fmt.Printf("GATEWAY_IDENTITY_PRIVATE_KEY=\"%s\"\n", oneLine(sec.IdentityPrivatePEM))
	fmt.Printf("SERVICE_CREDENTIAL=%s\n", sec.ServiceCredential)
	fmt.Printf("S3_ACCESS_KEY=acme-%s\nS3_SECRET_KEY=%s\n", stack.Secret(6), stack.Secret(24))
	fmt.Printf("ADMIN_EMAIL=%s\nADMIN_PASSWORD=%s\nAUTH_COOKIE_SECURE=true\n", sec.AdminEmail, sec.AdminPassword)
}
