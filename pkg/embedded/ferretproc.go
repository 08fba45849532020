package embedded

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// FerretDBProgramVersion is the version of pkg/cmd/ferretdb. Bump it when
// that program changes, so cached binaries are rebuilt.
const FerretDBProgramVersion = "5"

//go:embed ferretpatch/*.go.txt
var ferretPatchFS embed.FS

// ferretDBModule is the FerretDB module the program is built from.
const ferretDBModule = "github.com/FerretDB/FerretDB"

// FerretDBVersion is the FerretDB module version linked into this binary (the
// one pinned in pkg/go.mod), which the server program is built with too.
func FerretDBVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == ferretDBModule {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "v1.24.0"
}

// FerretDBBinaryName is the cached server program's file name: the
// FerretDB version, FerretDBProgramVersion and a hash of the patch, so that
// a change of any of them builds a new binary.
func FerretDBBinaryName() string {
	return "ferretdb-" + FerretDBVersion() + "-p" + FerretDBProgramVersion + "-" + ferretDBPatchHash()
}

// ferretDBPatchHash is a short hash of ferretDBEdits and ferretDBFiles'
// contents.
var ferretDBPatchHash = sync.OnceValue(func() string {
	h := sha256.New()
	for _, e := range ferretDBEdits {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00%s\x00", e.file, e.count, e.from, e.to)
	}
	names := make([]string, 0, len(ferretDBFiles))
	for rel := range ferretDBFiles {
		names = append(names, rel)
	}
	slices.Sort(names)
	for _, rel := range names {
		b, _ := ferretPatchFS.ReadFile("ferretpatch/" + ferretDBFiles[rel])
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:10]
})

// FerretDBBinary returns the path of the FerretDB server program
// (pkg/cmd/ferretdb), building it once, without the race detector, into the
// cache next to MinIO. $FERRETDB_BINARY overrides. The file name carries the
// FerretDB version and FerretDBProgramVersion; concurrent callers, in this or
// other processes, wait for one build, which goes to a temporary name first.
func FerretDBBinary(ctx context.Context, progress io.Writer) (string, error) {
	if p := os.Getenv("FERRETDB_BINARY"); p != "" {
		return p, nil
	}
	dir := CacheDir()
	bin := filepath.Join(dir, FerretDBBinaryName())
	return CachedBinary(bin, func(out string) error {
		src, err := ferretDBSource()
		if err != nil {
			return err
		}
		if progress != nil {
			fmt.Fprintf(progress, "building the FerretDB %s server once into %s...\n", FerretDBVersion(), bin)
		}
		work, err := os.MkdirTemp(dir, "ferretdb-build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		modfile, err := ferretDBPatched(ctx, src, work)
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "go", "build", "-modfile", modfile, "-o", out, "./cmd/ferretdb")
		cmd.Dir = filepath.Join(src, "..", "..")
		// Never race-instrumented, whatever GOFLAGS the tests run with.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building ferretdb: %w\n%s", err, b)
		}
		return nil
	})
}

// FerretDBServerBinary returns FerretDB's own server program
// (github.com/FerretDB/FerretDB/cmd/ferretdb, with its flags: SQLite
// handler, debug endpoints with /debug/readyz, and the experimental SCRAM
// authentication with a setup user) built from the same patched copy as
// FerretDBBinary, static, into the cache. The container tests run it as the
// stand-in for MongoDB, where authentication matters; the in-process tests
// use FerretDBBinary.
func FerretDBServerBinary(ctx context.Context, progress io.Writer) (string, error) {
	bin := filepath.Join(CacheDir(), "ferretdb-server-"+FerretDBVersion()+"-"+ferretDBPatchHash())
	return CachedBinary(bin, func(out string) error {
		src, err := ferretDBSource()
		if err != nil {
			return err
		}
		if progress != nil {
			fmt.Fprintf(progress, "building FerretDB %s's own server program once into %s...\n", FerretDBVersion(), bin)
		}
		work, err := os.MkdirTemp(CacheDir(), "ferretdb-build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		if _, err := ferretDBPatched(ctx, src, work); err != nil {
			return err
		}
		// FerretDB's release builds generate build/version/version.txt
		// (embedded into the program, which refuses to start without it);
		// the module source does not carry it.
		versionTxt := filepath.Join(work, "ferretdb", "build", "version", "version.txt")
		if err := os.WriteFile(versionTxt, []byte(FerretDBVersion()+"\n"), 0o644); err != nil {
			return err
		}
		// Built in the patched copy, with FerretDB's own go.mod and go.sum.
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/ferretdb")
		cmd.Dir = filepath.Join(work, "ferretdb")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false -mod=mod", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building ferretdb's server program: %w\n%s", err, b)
		}
		return nil
	})
}

// ferretDBPatched prepares work: a patched copy of the FerretDB module and
// a go.mod/go.sum pair replacing the module with it; it returns the go.mod.
func ferretDBPatched(ctx context.Context, src, work string) (string, error) {
	root := filepath.Join(src, "..", "..") // the pkg module
	// `go mod download -json` fetches the pinned version if this machine
	// does not have it yet (nothing else may have needed its source) and
	// says where it is.
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", ferretDBModule)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("ferretdb: downloading the module source: %w", err)
	}
	var dl struct{ Dir, Error string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.Dir == "" {
		return "", fmt.Errorf("ferretdb: no module source (%s): %v", dl.Error, err)
	}
	from := dl.Dir
	copyDir := filepath.Join(work, "ferretdb")
	if err := os.CopyFS(copyDir, os.DirFS(from)); err != nil {
		return "", fmt.Errorf("ferretdb: copying the module source: %w", err)
	}
	if err := applyFerretDBPatch(copyDir); err != nil {
		return "", err
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return "", err
	}
	modfile := filepath.Join(work, "go.mod")
	mod = append(mod, fmt.Sprintf("\nreplace %s => %s\n", ferretDBModule, copyDir)...)
	if err := os.WriteFile(modfile, mod, 0o644); err != nil {
		return "", err
	}
	return modfile, os.WriteFile(filepath.Join(work, "go.sum"), sum, 0o644)
}

// applyFerretDBPatch applies ferretDBEdits and adds ferretDBFiles to the
// module copy in dir.
func applyFerretDBPatch(dir string) error {
	edited := map[string]string{}
	for _, e := range ferretDBEdits {
		code, ok := edited[e.file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(e.file)))
			if err != nil {
				return fmt.Errorf("ferretdb: %w", err)
			}
			code = string(b)
		}
		if n := strings.Count(code, e.from); n != e.count {
			return fmt.Errorf("ferretdb: %s has %d copies of the code to patch, want %d:\n%s", e.file, n, e.count, e.from)
		}
		edited[e.file] = strings.ReplaceAll(code, e.from, e.to)
	}
	write := func(rel string, b []byte) error {
		target := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.Chmod(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(target); err == nil {
			if err := os.Chmod(target, 0o644); err != nil {
				return err
			}
		}
		return os.WriteFile(target, b, 0o644)
	}
	for rel, code := range edited {
		if err := write(rel, []byte(code)); err != nil {
			return err
		}
	}
	for rel, name := range ferretDBFiles {
		b, err := ferretPatchFS.ReadFile("ferretpatch/" + name)
		if err != nil {
			return err
		}
		if err := write(rel, b); err != nil {
			return err
		}
	}
	return nil
}

// ferretDBSource finds pkg/cmd/ferretdb from this file's location.
func ferretDBSource() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("ferretdb: cannot locate the source of pkg/cmd/ferretdb (set FERRETDB_BINARY)")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "cmd", "ferretdb")
	if _, err := os.Stat(filepath.Join(dir, "main.go")); err != nil {
		return "", fmt.Errorf("ferretdb: source not found at %s (set FERRETDB_BINARY): %w", dir, err)
	}
	return dir, nil
}

// FerretDBOptions configure StartFerretDB.
type FerretDBOptions struct {
	Dir  string    // SQLite data directory
	Addr string    // host:port; empty picks a free loopback port
	Log  io.Writer // server output; nil discards
	// Synchronous is SQLite's synchronous setting, "normal" or "full";
	// empty keeps the program's default (normal). See pkg/cmd/ferretdb's
	// -synchronous.
	Synchronous string
	// Env is added to the server's environment (for example
	// ACME_FERRETDB_SCAN_LOG, docs/design/ferretdb.md).
	Env []string
	// Auth, when set, makes the server require a login (FerretDBAuth,
	// ferretauth.go); URI then carries it.
	Auth *FerretDBAuth
}

// FerretDBProc is a FerretDB server running as a child process. It can be
// stopped, paused and restarted on the same address and data directory, which
// is what the fault tests do to it.
type FerretDBProc struct {
	URI  string // mongodb://host:port/
	Addr string // host:port

	bin  string
	opts FerretDBOptions

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartFerretDB builds the server program if needed, starts it and waits
// until it accepts connections.
func StartFerretDB(ctx context.Context, o FerretDBOptions) (*FerretDBProc, error) {
	bin, err := o.prepare(ctx)
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
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return nil, err
	}
	p := &FerretDBProc{URI: o.uri(), Addr: o.Addr, bin: bin, opts: o}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *FerretDBProc) start(ctx context.Context) error {
	cmd := p.opts.command(p.bin)
	if len(p.opts.Env) > 0 {
		cmd.Env = append(os.Environ(), p.opts.Env...)
	}
	if p.opts.Log != nil {
		cmd.Stdout, cmd.Stderr = p.opts.Log, p.opts.Log
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ferretdb: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("ferretdb exited during start-up on %s (port taken or data dir unusable?)", p.Addr)
		case <-ctx.Done():
			p.Stop()
			return ctx.Err()
		default:
		}
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			c.Close()
			// Listening, but is it this process? Another may hold the
			// address (then this one exits: address in use).
			var pid int64
			if pid, err = serverPid(ctx, p.URI); err == nil && pid == int64(cmd.Process.Pid) {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("another process (pid %d) answers on %s", pid, p.Addr)
			}
		}
		if time.Now().After(deadline) {
			p.Stop()
			return fmt.Errorf("ferretdb: not listening on %s after 30s: %w", p.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the server's process id (of the current run).
func (p *FerretDBProc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Stop terminates the server: SIGTERM, then SIGKILL after 10 s. Stopping a
// stopped server does nothing.
func (p *FerretDBProc) Stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot handle SIGTERM
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Kill ends the server with SIGKILL and waits for it.
func (p *FerretDBProc) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart starts the server again on the same address and data directory
// (after Stop or Kill; it stops a running one first).
func (p *FerretDBProc) Restart(ctx context.Context) error {
	p.Stop()
	return p.start(ctx)
}

// Pause freezes the server with SIGSTOP: connections stay open, nothing is
// answered. Resume undoes it.
//
// It returns once every thread of the process is stopped (the kernel
// stops a process's threads one by one, each when it next runs; on a
// loaded machine that can take a moment, in which a thread could still
// answer a request).
func (p *FerretDBProc) Pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return waitStopped(p.Pid(), 10*time.Second)
}

// waitStopped waits until every thread of pid is in the stopped state
// ('T' in /proc/PID/task/TID/stat).
func waitStopped(pid int, max time.Duration) error {
	deadline := time.Now().Add(max)
	for {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			return fmt.Errorf("ferretdb: pid %d: no threads to check (%v)", pid, err)
		}
		running := ""
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue // a thread that ended
			}
			// The state follows the command name, which is in parentheses.
			if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] != 'T' && b[i+2] != 't' {
				running = t
				break
			}
		}
		if running == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ferretdb: pid %d not stopped after %s (%s)", pid, max, running)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Resume continues a paused server (SIGCONT).
func (p *FerretDBProc) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *FerretDBProc) signal(s syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return errors.New("ferretdb: not started")
	}
	return p.cmd.Process.Signal(s)
}

// Exited is closed when the current run of the server ends.
func (p *FerretDBProc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// serverPid asks the FerretDB server at uri for its process id
// (serverStatus).
func serverPid(ctx context.Context, uri string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetDirect(true).SetServerSelectionTimeout(2 * time.Second))
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	var st struct {
		Pid int64 `bson:"pid"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&st); err != nil {
		return 0, err
	}
	return st.Pid, nil
}
