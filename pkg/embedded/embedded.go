// Package embedded starts the real servers the platform depends on without
// Docker: NATS with JetStream inside the calling process, and FerretDB (a
// MongoDB-wire server on SQLite, patched so lookups by _id use the index)
// and MinIO as child processes, each built once from a pinned module
// version. `make run`, the test kit, the fault suite and the bench use it.
package embedded

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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
// take several before binding any (a platform's processes).
//
// The port is drawn at random from below the kernel's ephemeral range
// (ip_local_port_range): servers here are stopped and started again on the
// same address (fault tests, restarts), and a port from the ephemeral range
// may meanwhile be handed to any other process binding port 0 or opening a
// connection, which then answers in the server's place or keeps it from
// binding. Where the range cannot be read, the kernel picks (port 0).
func FreeAddr() (string, error) {
	givenMu.Lock()
	defer givenMu.Unlock()
	lo, hi := belowEphemeral()
	for range 200 {
		a := "127.0.0.1:0"
		if lo < hi {
			a = fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))
			if given[a] {
				continue
			}
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			continue // taken
		}
		a = l.Addr().String()
		l.Close()
		if !given[a] {
			given[a] = true
			return a, nil
		}
	}
	return "", fmt.Errorf("no unused loopback port after 200 tries")
}

// belowEphemeral is the port range [lo, hi) FreeAddr draws from: from 20000
// up to the first ephemeral port (none when that is not above 21000).
func belowEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first <= 21000 {
		return 0, 0
	}
	return 20000, first
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
	return startNATS(opts)
}

// startNATS starts a NATS server with opts and waits until it accepts
// connections.
func startNATS(opts *server.Options) (*server.Server, error) {
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
