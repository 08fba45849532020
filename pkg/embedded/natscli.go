package embedded

import (
	"context"
	"io"
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
	return Pinned{Name: "the NATS CLI", Package: NATSCLIModule, Version: NATSCLIVersion, Dir: "natscli", File: "nats",
		Env: "NATS_CLI_BINARY"}.Binary(ctx, progress)
}
