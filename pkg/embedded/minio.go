package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// MinIOModule and MinIOVersion pin the MinIO server build (MinIO ships as
// source only; the same version is used by tests, `make run` and compose).
const (
	MinIOModule  = "github.com/minio/minio"
	MinIOVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"
)

// CacheDir is where built tools are kept: $ACME_CACHE_DIR, else the user
// cache directory.
func CacheDir() string {
	if d := os.Getenv("ACME_CACHE_DIR"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "acme-platform")
	}
	return filepath.Join(os.TempDir(), "acme-platform-cache")
}

// MinIOBinary returns the path of the pinned MinIO server, building it once
// (a few minutes) into the cache. $MINIO_BINARY overrides. Concurrent callers,
// in this or other processes, wait for one build.
func MinIOBinary(ctx context.Context, progress io.Writer) (string, error) {
	return Pinned{Name: "MinIO", Package: MinIOModule, Version: MinIOVersion, Dir: "minio", File: "minio",
		Env: "MINIO_BINARY", Note: " (takes a few minutes the first time)"}.Binary(ctx, progress)
}

// MinIO is a running MinIO server process.
type MinIO struct {
	Endpoint  string // host:port
	AccessKey string
	SecretKey string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// MinIOOptions configure StartMinIO.
type MinIOOptions struct {
	Dir       string // data directory
	Addr      string // host:port; empty picks a free loopback port
	AccessKey string
	SecretKey string
	Log       io.Writer // server output; nil discards
}

// StartMinIO starts the server and waits until it is ready.
func StartMinIO(ctx context.Context, o MinIOOptions) (*MinIO, error) {
	bin, err := MinIOBinary(ctx, o.Log)
	if err != nil {
		return nil, err
	}
	if o.Addr == "" {
		if o.Addr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "server", "--quiet", "--address", o.Addr, o.Dir)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+o.AccessKey,
		"MINIO_ROOT_PASSWORD="+o.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	if o.Log != nil {
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("minio: %w", err)
	}
	m := &MinIO{Endpoint: o.Addr, AccessKey: o.AccessKey, SecretKey: o.SecretKey, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(m.exited) }()
	switch err := waitReady("http://"+o.Addr+"/minio/health/ready", m.exited, 60*time.Second, 100*time.Millisecond); {
	case errors.Is(err, errExited):
		return nil, errors.New("minio exited during start-up (port taken or data dir unusable?)")
	case err != nil:
		m.Stop()
		return nil, fmt.Errorf("minio: not ready after 60s")
	}
	return m, nil
}

// Stop terminates the server (SIGTERM, then SIGKILL after 10 s).
func (m *MinIO) Stop() {
	if m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}
