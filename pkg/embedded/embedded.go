// Package embedded starts the real servers the platform depends on without
// Docker: NATS with JetStream and FerretDB (a MongoDB-wire server on SQLite)
// inside the calling process, and MinIO as a child process built once from a
// pinned module version. `make run` and the test kit both use it.
package embedded

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
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

// Mongo is a running embedded FerretDB.
type Mongo struct {
	URI    string
	cancel context.CancelFunc
	done   chan struct{}
}

// FerretDB starts a MongoDB-wire server backed by SQLite files under dir.
// addr "127.0.0.1:0" picks a free port. logw receives FerretDB's warnings.
func FerretDB(dir, addr string, logw io.Writer) (*Mongo, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if logw == nil {
		logw = io.Discard
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: addr},
		Handler:   "sqlite",
		SQLiteURL: "file:" + abs + "/",
		Logger:    slog.New(newLazyHandler(slog.NewTextHandler(logw, nil), slog.LevelError)),
	})
	if err != nil {
		return nil, fmt.Errorf("ferretdb: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mongo{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		_ = f.Run(ctx)
	}()
	m.URI = f.MongoDBURI()
	// Wait until it accepts connections.
	host := m.URI[len("mongodb://") : len(m.URI)-1]
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			m.Stop()
			return nil, fmt.Errorf("ferretdb: not listening on %s: %w", host, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m, nil
}

// Stop shuts the server down and waits for it.
func (m *Mongo) Stop() {
	m.cancel()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
	}
}

// FreeAddr returns a loopback address with a port that was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

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
