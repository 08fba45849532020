// Command s3setup prepares MinIO for the files service, once, with MinIO's
// root credentials, so that the service itself runs as a MinIO user whose
// policy allows only its own bucket. It is a one-shot job (compose runs it
// from the acme/minio image, entrypoint ["/s3setup"], before files starts):
//
//  1. waits, for at most S3_SETUP_TIMEOUT, until MinIO answers;
//  2. creates the bucket unless it exists;
//  3. creates or replaces the canned policy S3_FILES_POLICY, which allows
//     on that bucket only what the files service does (see filesPolicy);
//  4. creates the user S3_FILES_ACCESS_KEY, or sets its secret key to
//     S3_FILES_SECRET_KEY and enables it if it exists;
//  5. makes that policy the user's only policy (detaching any other).
//
// Every step is idempotent: running it again changes nothing but a secret
// key or policy that differs from the settings. On success it prints one
// line saying what it did (never a secret) and exits 0; otherwise it prints
// the reason on stderr and exits 1 (2 for arguments, which it takes none of).
//
// Settings come from the environment; the table is Settings (config.go)
// and the reference docs/configuration.md ("deploy/s3setup"). The
// credentials can instead be given as X_FILE, naming a file that holds the
// value (compose secrets under /run/secrets).
//
// The files service is then configured with S3_ACCESS_KEY and
// S3_SECRET_KEY set to the same values as S3_FILES_ACCESS_KEY and
// S3_FILES_SECRET_KEY, and the same S3_BUCKET.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func cli(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "s3setup: takes no arguments (got %q); settings come from the environment, see `go doc github.com/acme/platform/deploy/s3setup`\n", args)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := loadConfig(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "s3setup: %v\n", err)
		return 1
	}
	summary, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "s3setup: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "s3setup: %s\n", summary)
	return 0
}
