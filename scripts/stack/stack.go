// Package stack builds the platform's four binaries and runs them as
// separate processes against given servers. `make run` and the end-to-end
// tests both use it, so what the tests start is what a developer runs.
package stack

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Services in start order (the gateway last).
var Services = []string{"auth", "files", "logs", "gateway"}

// pkgPath is each service's main package, relative to the repository root.
var pkgPath = map[string]string{
	"auth":    "./services/auth",
	"files":   "./services/files",
	"logs":    "./services/logs",
	"gateway": "./gateway",
}

// Root finds the repository root (the folder holding go.work).
func Root() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above " + file)
		}
		dir = parent
	}
}

// Build compiles the services into outDir and returns their paths.
func Build(ctx context.Context, outDir string, race bool) (map[string]string, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	bins := map[string]string{}
	args := []string{"build"}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "-o", outDir+string(os.PathSeparator))
	for _, s := range Services {
		args = append(args, pkgPath[s])
		bins[s] = filepath.Join(outDir, filepath.Base(pkgPath[s]))
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bins, nil
}

// Proc is a running service process.
type Proc struct {
	Name   string
	Addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// Direct, as the output of Start or Launch, is handed to the processes
// themselves: their lines go straight to the file, unprefixed (every
// service's JSON lines name it), and never pass through this process, which
// a benchmark needs (this process shares the cores being measured).
type Direct struct{ *os.File }

// Start runs bin with env (added to a minimal environment), prefixing each
// output line with the name (unless out is Direct), and waits until GET
// http://addr/healthz is 200.
func Start(name, bin, addr string, env []string, out io.Writer) (*Proc, error) {
	cmd := exec.Command(bin)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if d, ok := out.(Direct); ok {
		cmd.Stdout, cmd.Stderr = d.File, d.File
	} else {
		pw := &prefixWriter{prefix: fmt.Sprintf("%-8s| ", name), w: out}
		cmd.Stdout, cmd.Stderr = pw, pw
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Name: name, Addr: addr, cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	if err := p.waitHealthy(60 * time.Second); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

func (p *Proc) waitHealthy(max time.Duration) error {
	deadline := time.Now().Add(max)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start-up: %v", p.Name, p.err)
		default:
		}
		resp, err := client.Get("http://" + p.Addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy on %s after %s", p.Name, p.Addr, max)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM and waits up to grace, then kills.
func (p *Proc) Stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused process cannot act on SIGTERM
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.Kill()
	}
}

// Signal sends sig to the process (SIGSTOP and SIGCONT pause and resume it,
// SIGTERM asks it to shut down).
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Exited is closed when the process ends.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

type prefixWriter struct {
	mu     sync.Mutex
	prefix string
	w      io.Writer
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

// Secret returns n random bytes, base64url.
func Secret(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// ResetPeakRSS starts a new peak for PeakRSS of pid (Linux: "5" written to
// /proc/PID/clear_refs sets VmHWM to the current resident size), so a
// measurement sees the peak of what follows, not of earlier load.
func ResetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// PeakRSS reads the process's peak resident set (VmHWM) in bytes.
func PeakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%d", &kb)
			return kb << 10, nil
		}
	}
	return 0, errors.New("VmHWM not found")
}
