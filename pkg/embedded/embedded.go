// Package embedded starts the real servers the platform depends on without
// Docker: NATS with JetStream inside the calling process, and FerretDB (a
// MongoDB-wire server on SQLite, patched so lookups by _id use the index)
// and MinIO as child processes, each built once from a pinned module
// version. `make run`, the test kit, the fault suite and the bench use it.
package embedded

import (
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATS starts an embedded NATS server with JetStream storing under dir.
// port 0 picks a free port.
func NATS(dir, host string, port int) (*server.Server, error) {
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "acme-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 1 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("nats: not ready after 15s")
	}
	return s, nil
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
// It never returns the same address twice in one process: callers often
// take several before binding any (a platform's processes), and the kernel
// may hand a just-closed port out again.
func FreeAddr() (string, error) {
	givenMu.Lock()
	defer givenMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		a := l.Addr().String()
		l.Close()
		if !given[a] {
			given[a] = true
			return a, nil
		}
	}
	return "", fmt.Errorf("no unused loopback port after 100 tries")
}

var (
	givenMu sync.Mutex
	given   = map[string]bool{}
)

// NATSWithConfig starts an embedded NATS server from a configuration file
// (deploy/nats.conf, to test its permissions) on a free loopback port, with
// JetStream storing under dir instead of the file's store_dir and the
// monitoring endpoint, if the file enables it, on a free loopback port.
// Variables in the file ($NAME) resolve from the process environment, as
// nats-server resolves them.
func NATSWithConfig(path, dir string) (*server.Server, error) {
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	if opts.HTTPPort != 0 {
		opts.HTTPHost, opts.HTTPPort = "127.0.0.1", server.RANDOM_PORT
	}
	opts.StoreDir = dir
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("nats: not ready after 15s")
	}
	return s, nil
}
