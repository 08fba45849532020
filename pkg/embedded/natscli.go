package embedded

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The NATS command-line tool (`nats pub`, `nats sub`, ...), pinned: tests
// publish with it as a user types it.
const (
	NATSCLIModule  = "github.com/nats-io/natscli/nats"
	NATSCLIVersion = "v0.5.1"
)

// NATSCLIBinary returns the path of the pinned `nats` program, building it
// once into the cache. $NATS_CLI_BINARY overrides. Concurrent callers, in
// this or other processes, wait for one build.
func NATSCLIBinary(ctx context.Context, progress io.Writer) (string, error) {
	if p := os.Getenv("NATS_CLI_BINARY"); p != "" {
		return p, nil
	}
	dir := filepath.Join(CacheDir(), "natscli-"+NATSCLIVersion)
	return CachedBinary(filepath.Join(dir, "nats"), func(out string) error {
		if progress != nil {
			fmt.Fprintf(progress, "building the NATS CLI %s once into %s...\n", NATSCLIVersion, dir)
		}
		return GoInstall(ctx, NATSCLIModule, NATSCLIVersion, out)
	})
}
