package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// CachedBinary returns bin, building it first if it is not there: under an
// exclusive lock on bin+".lock", so that concurrent callers in this and
// other processes (parallel test binaries) wait for one build; build writes
// the program to the temporary path it is given, which is then renamed to
// bin, so nobody ever sees a half-written binary.
func CachedBinary(bin string, build func(out string) error) (string, error) {
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built while this caller waited
	}
	out := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	defer os.Remove(out)
	if err := build(out); err != nil {
		return "", err
	}
	if err := os.Rename(out, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// GoInstall is a build function for CachedBinary: `go install pkg@version`
// (static, trimmed, outside any workspace) into a temporary GOBIN beside
// out, then the program renamed to out.
func GoInstall(ctx context.Context, pkg, version, out string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(out), "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", pkg+"@"+version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s@%s: %w\n%s", pkg, version, err, b)
	}
	return os.Rename(filepath.Join(tmp, programName(pkg)), out)
}

// programName is the file name go install gives pkg's program: its last
// path element, or the one before a major version suffix (/v2).
func programName(pkg string) string {
	parts := strings.Split(pkg, "/")
	name := parts[len(parts)-1]
	if len(parts) > 1 && len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = parts[len(parts)-2]
	}
	return name
}

// Pinned is a Go program built once from a pinned module into the cache
// (CachedBinary with GoInstall): MinIO, Mailpit, the NATS CLI, PocketBase.
type Pinned struct {
	Name    string // for the progress line: "MinIO"
	Package string // the main package's import path
	Version string // the module's version
	Dir     string // the cache's subdirectory, before "-<version>"
	File    string // the program's file name in it
	Env     string // a variable naming a binary to use instead
	Note    string // said after the progress line: "(a few minutes the first time)"
}

// Binary returns the program's path: $Env when set, else the cached build,
// made once (concurrent callers, in this or other processes, wait for it).
func (p Pinned) Binary(ctx context.Context, progress io.Writer) (string, error) {
	if b := os.Getenv(p.Env); p.Env != "" && b != "" {
		return b, nil
	}
	dir := filepath.Join(CacheDir(), p.Dir+"-"+p.Version)
	return CachedBinary(filepath.Join(dir, p.File), func(out string) error {
		if progress != nil {
			fmt.Fprintf(progress, "building %s %s once into %s%s...\n", p.Name, p.Version, dir, p.Note)
		}
		return GoInstall(ctx, p.Package, p.Version, out)
	})
}

// errExited and errNotReady are waitReady's failures.
var (
	errExited   = errors.New("exited during start-up")
	errNotReady = errors.New("not ready")
)

// waitReady polls url every interval until it answers 200 (nil), the child
// process ends (exited closes: errExited) or within passes (errNotReady).
func waitReady(url string, exited <-chan struct{}, within, interval time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		select {
		case <-exited:
			return errExited
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errNotReady
		}
		time.Sleep(interval)
	}
}
