// Package containers runs the platform the way its users do: images built
// from the repository's Dockerfiles, started with `docker compose up`, used
// through the gateway's published port only. It is the harness of the
// container tests (make test-compose, make test-scale; build tag
// containers): a Stack is one compose project with its own secrets, networks
// and volumes, removed with `docker compose down -v` when the test ends,
// also when it fails.
//
// This machine's engine cannot pull images, so the harness builds against
// the local stand-ins of scripts/dockerenv.sh (GO_IMAGE, RUNTIME_IMAGE
// build arguments) and replaces MongoDB, and only MongoDB, with the patched
// FerretDB through testdata/standin.compose.yaml. docs/deployment.md lists
// every substitution.
package containers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/scripts/stack"
)

// Images the harness makes besides the compose project's own.
const (
	FerretDBImage = "acme-standin/ferretdb:" + "v1.24.0"
	ProbeImage    = "acme-test/stackprobe:latest"
)

// Stack is one compose project under test.
type Stack struct {
	T       testing.TB
	Root    string            // repository root (the compose project directory)
	Project string            // compose project name, unique per test
	Env     map[string]string // the project's .env: secrets and settings
	envFile string
	files   []string
	// GatewayURL is the gateway's published port on the loopback address.
	GatewayURL string
	// Version is the acme/* image tag (ACME_VERSION): a hash of the sources.
	Version string
}

// BaseImages are the stand-ins scripts/dockerenv.sh made (GO_IMAGE and
// RUNTIME_IMAGE), read from its output.
type BaseImages struct{ Go, Runtime string }

// PrepareDocker runs scripts/dockerenv.sh: compose and buildx plugins and
// the base-image stand-ins, each made only when missing.
func PrepareDocker(root string) (BaseImages, error) {
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "dockerenv.sh"))
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return BaseImages{}, fmt.Errorf("scripts/dockerenv.sh: %w", err)
	}
	var b BaseImages
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "GO_IMAGE":
			b.Go = v
		case "RUNTIME_IMAGE":
			b.Runtime = v
		}
	}
	if b.Go == "" || b.Runtime == "" {
		return b, fmt.Errorf("scripts/dockerenv.sh named no stand-ins: %q", out)
	}
	return b, nil
}

// New prepares a compose project: a fresh .env from scripts/gensecrets plus
// the test's settings (the gateway on a free loopback port, cookies without
// Secure since the test speaks plain HTTP), and the down -v clean-up. extra
// settings are appended to .env.
func New(t testing.TB, root, version string, extra map[string]string) *Stack {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{
		T:       t,
		Root:    root,
		Project: "acmetest" + strings.ToLower(randomID(4)),
		Version: version,
		files: []string{
			filepath.Join(root, "compose.yaml"),
			filepath.Join(root, "scripts", "containers", "testdata", "standin.compose.yaml"),
		},
		GatewayURL: fmt.Sprintf("http://127.0.0.1:%d", port),
	}
	dir := t.TempDir()
	s.envFile = filepath.Join(dir, ".env")
	gen := exec.Command("go", "run", "./scripts/gensecrets", "-o", s.envFile)
	gen.Dir = root
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("gensecrets: %v\n%s", err, out)
	}
	settings := map[string]string{
		"GATEWAY_PORT":       fmt.Sprint(port),
		"AUTH_COOKIE_SECURE": "false",
		"PUBLIC_BASE_URL":    s.GatewayURL,
		"ACME_VERSION":       version,
	}
	for k, v := range extra {
		settings[k] = v
	}
	f, err := os.OpenFile(s.envFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(f, "%s=%s\n", k, settings[k])
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Env, err = readEnv(s.envFile); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Remove)
	return s
}

// AddFile adds a compose file to the project's, after the others (an
// override such as compose.ha.yaml).
func (s *Stack) AddFile(path string) { s.files = append(s.files, path) }

// Remove takes the project down with its volumes and networks, printing the
// services' last log lines first when the test failed.
func (s *Stack) Remove() {
	if s.T.Failed() {
		if out, err := s.Compose(context.Background(), "logs", "--no-color", "--tail", "40"); err == nil {
			s.T.Logf("last log lines of %s:\n%s", s.Project, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := s.Compose(ctx, "down", "-v", "--remove-orphans", "--timeout", "10")
	if err != nil && strings.Contains(out, "has active endpoints") {
		// The engine can still hold a removed container's endpoint on a
		// network for a moment (seen with Docker 20.10 under load, every
		// container already removed): the second down finds the network
		// free. Anything else, or a second failure, fails the test.
		time.Sleep(3 * time.Second)
		out, err = s.Compose(ctx, "down", "-v", "--remove-orphans", "--timeout", "10")
	}
	if err != nil {
		s.T.Errorf("compose down -v: %v\n%s", err, out)
	}
}

// Compose runs `docker compose` on the project and returns its combined
// output.
func (s *Stack) Compose(ctx context.Context, args ...string) (string, error) {
	full := []string{"compose", "--project-name", s.Project, "--project-directory", s.Root, "--env-file", s.envFile}
	for _, f := range s.files {
		full = append(full, "--file", f)
	}
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	env, err := HermeticEnv(os.Environ(), keys, s.files...)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "docker", append(full, args...)...)
	cmd.Dir = s.Root
	cmd.Env = append(env, "COMPOSE_PROGRESS=plain", "COMPOSE_MENU=false")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// MustCompose is Compose that fails the test on an error.
func (s *Stack) MustCompose(ctx context.Context, args ...string) string {
	s.T.Helper()
	out, err := s.Compose(ctx, args...)
	if err != nil {
		s.T.Fatalf("docker compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Up runs `up -d --wait` with extra arguments and returns how long it took.
func (s *Stack) Up(ctx context.Context, extra ...string) time.Duration {
	s.T.Helper()
	t0 := time.Now()
	s.MustCompose(ctx, append([]string{"up", "-d", "--wait", "--wait-timeout", "300"}, extra...)...)
	return time.Since(t0)
}

// Network is the docker name of one of the project's networks.
func (s *Stack) Network(name string) string { return s.Project + "_" + name }

// Container is what the harness reads of one container.
type Container struct {
	ID, Name, Service, Health string
	// The latest healthcheck: when it began and whether it passed.
	LastCheck       time.Time
	LastCheckPassed bool
	// Checks describes Docker's last few healthchecks (start, duration,
	// exit code, output): what a container that stays unhealthy answered.
	Checks    []string
	User      string // the configured user
	Pid       int
	Running   bool
	StartedAt time.Time
	IPs       map[string]string // network name → address
}

// Containers lists the project's containers (also stopped ones) of the
// given services, or of all services when none is named.
func (s *Stack) Containers(ctx context.Context, services ...string) ([]Container, error) {
	args := []string{"ps", "-a", "-q", "--filter", "label=com.docker.compose.project=" + s.Project}
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("docker ps: %w", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return nil, nil
	}
	out, err = exec.CommandContext(ctx, "docker", append([]string{"inspect"}, ids...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("docker inspect: %w", err)
	}
	var raw []struct {
		ID     string `json:"Id"`
		Name   string
		Config struct {
			User   string
			Labels map[string]string
		}
		State struct {
			Running   bool
			Pid       int
			StartedAt time.Time
			Health    *struct {
				Status string
				Log    []struct {
					Start, End time.Time
					ExitCode   int
					Output     string
				}
			}
		}
		NetworkSettings struct {
			Networks map[string]struct{ IPAddress string }
		}
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, err
	}
	var cs []Container
	for _, r := range raw {
		c := Container{
			ID: r.ID, Name: strings.TrimPrefix(r.Name, "/"), Service: r.Config.Labels["com.docker.compose.service"],
			User: r.Config.User, Pid: r.State.Pid, Running: r.State.Running, StartedAt: r.State.StartedAt,
			IPs: map[string]string{},
		}
		if h := r.State.Health; h != nil {
			c.Health = h.Status
			if len(h.Log) > 0 {
				last := h.Log[len(h.Log)-1]
				c.LastCheck, c.LastCheckPassed = last.Start, last.ExitCode == 0
			}
			for _, l := range h.Log {
				c.Checks = append(c.Checks, fmt.Sprintf("%s took %s, exit %d: %s", l.Start.Format("15:04:05.000"),
					l.End.Sub(l.Start).Round(time.Millisecond), l.ExitCode, strings.TrimSpace(l.Output)))
			}
		}
		for n, ep := range r.NetworkSettings.Networks {
			c.IPs[strings.TrimPrefix(n, s.Project+"_")] = ep.IPAddress
		}
		if len(services) == 0 || contains(services, c.Service) {
			cs = append(cs, c)
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	return cs, nil
}

// WaitHealthy waits until every running container of the project that has
// a healthcheck reports healthy with a passing check that began after since,
// and returns how long that took. Docker marks a container unhealthy after
// consecutive failed checks (a service whose database or bus was away) and
// healthy again at its next passing check, up to one interval later; a
// container still "healthy" whose checks are failing right now would turn
// unhealthy moments later, so the status alone is not enough.
func (s *Stack) WaitHealthy(ctx context.Context, since time.Time, max time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for {
		waiting, err := s.notHealthySince(ctx, since)
		if err != nil {
			return 0, err
		}
		if len(waiting) == 0 {
			return time.Since(t0), nil
		}
		if time.Since(t0) > max {
			return 0, fmt.Errorf("not healthy after %s: %s", max, strings.Join(waiting, "; "))
		}
		time.Sleep(time.Second)
	}
}

// notHealthySince names the running containers with a healthcheck that are
// not healthy, or whose latest check began before since or failed.
func (s *Stack) notHealthySince(ctx context.Context, since time.Time) ([]string, error) {
	cs, err := s.Containers(ctx)
	if err != nil {
		return nil, err
	}
	var waiting []string
	for _, c := range cs {
		if !c.Running || c.Health == "" {
			continue
		}
		var why string
		switch {
		case c.Health != "healthy":
			why = " " + c.Health
		case c.LastCheck.Before(since):
			why = " (no check since)"
		case !c.LastCheckPassed:
			why = " (last check failed)"
		default:
			continue
		}
		// Docker's own record of the checks, for the message of a wait
		// that times out.
		waiting = append(waiting, c.Name+why+" [checks: "+strings.Join(c.Checks, " | ")+"]")
	}
	return waiting, nil
}

// RunProbe runs the stackprobe tool (cmd/stackprobe) in a throw-away
// container on the project's network with the given environment, and
// returns its output.
func (s *Stack) RunProbe(ctx context.Context, network string, env map[string]string, args ...string) (string, error) {
	full := []string{"run", "--rm", "--network", s.Network(network), "--label", "com.docker.compose.project=" + s.Project}
	for k, v := range env {
		full = append(full, "--env", k+"="+v)
	}
	full = append(full, ProbeImage)
	cmd := exec.CommandContext(ctx, "docker", append(full, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// SourceVersion is a tag for the acme/* images made of a hash of everything
// their builds read (Dockerfiles, deploy/, pkg/, gateway/, services/), so a
// second test of the same run finds the images already built and a change
// of the sources makes new ones.
func SourceVersion(root string) (string, error) {
	h := sha256.New()
	for _, p := range []string{"Dockerfile", "compose.yaml", "deploy", "pkg", "gateway", "services"} {
		err := filepath.WalkDir(filepath.Join(root, p), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s %d\n", rel, len(b))
			h.Write(b)
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return "src-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// BuildImages builds the project's images with the stand-in base images,
// unless images of this source version were built already (a stamp file
// in the cache, and the images still present). It returns how long the
// build took (0 when skipped).
func (s *Stack) BuildImages(ctx context.Context, base BaseImages) (time.Duration, error) {
	stamp := filepath.Join(embedded.CacheDir(), "docker", "images-"+s.Version)
	if _, err := os.Stat(stamp); err == nil && s.imagesPresent(ctx) {
		return 0, nil
	}
	t0 := time.Now()
	out, err := s.Compose(ctx, "build", "--build-arg", "GO_IMAGE="+base.Go, "--build-arg", "RUNTIME_IMAGE="+base.Runtime)
	if err != nil {
		return 0, fmt.Errorf("compose build: %w\n%s", err, tail(out, 60))
	}
	if err := os.WriteFile(stamp, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func (s *Stack) imagesPresent(ctx context.Context) bool {
	out, err := s.Compose(ctx, "config", "--images")
	if err != nil {
		return false
	}
	for _, img := range strings.Fields(out) {
		if strings.HasPrefix(img, "acme/") {
			if exec.CommandContext(ctx, "docker", "image", "inspect", img).Run() != nil {
				return false
			}
		}
	}
	return true
}

// BuildTestImages makes the two images only the tests use, from programs
// built on this machine: the FerretDB stand-in for MongoDB (FerretDB's
// own server program with the repository's patch, plus the healthcheck
// probe) and the stackprobe tool. Both are root filesystems imported with
// `docker import` on top of nothing: no base image, no registry.
func BuildTestImages(ctx context.Context, root string) error {
	bin, err := os.MkdirTemp("", "acme-test-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	ferret, err := embedded.FerretDBServerBinary(ctx, os.Stderr)
	if err != nil {
		return err
	}
	build := func(dir, pkg, out string) error {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
		return nil
	}
	probe := filepath.Join(bin, "probe")
	if err := build(filepath.Join(root, "pkg"), "./healthcheck/cmd/probe", probe); err != nil {
		return err
	}
	tool := filepath.Join(bin, "stackprobe")
	if err := build(filepath.Join(root, "scripts"), "./containers/cmd/stackprobe", tool); err != nil {
		return err
	}
	if err := importImage(ctx, FerretDBImage, []rootFile{
		{"ferretdb", ferret}, {"probe", probe},
	}, []string{"data/db"}, `ENTRYPOINT ["/ferretdb"]`); err != nil {
		return err
	}
	return importImage(ctx, ProbeImage, []rootFile{{"stackprobe", tool}}, nil, `ENTRYPOINT ["/stackprobe"]`)
}

type rootFile struct{ name, src string }

// importImage writes a root filesystem (the files, directories owned by
// 65532, /etc/passwd with the nonroot user, CA certificates) as a tar
// stream into `docker import`.
func importImage(ctx context.Context, ref string, files []rootFile, dirs []string, entrypoint string) error {
	cmd := exec.CommandContext(ctx, "docker", "import",
		"--change", "USER 65532:65532", "--change", entrypoint, "-", ref)
	pr, pw := io.Pipe()
	cmd.Stdin = pr
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	werr := writeRootFS(pw, files, dirs)
	pw.CloseWithError(werr)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("docker import %s: %w\n%s", ref, err, out.String())
	}
	return werr
}

func writeRootFS(w io.Writer, files []rootFile, dirs []string) error {
	tw := newTar(w)
	tw.dir("etc", 0, 0o755)
	tw.file("etc/passwd", []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), 0, 0o644)
	tw.file("etc/group", []byte("root:x:0:\nnonroot:x:65532:\n"), 0, 0o644)
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		tw.dir("etc/ssl", 0, 0o755)
		tw.dir("etc/ssl/certs", 0, 0o755)
		tw.file("etc/ssl/certs/ca-certificates.crt", ca, 0, 0o644)
	}
	tw.dir("tmp", 0, 0o1777)
	for _, d := range dirs {
		parts := strings.Split(d, "/")
		for i := range parts {
			tw.dir(strings.Join(parts[:i+1], "/"), 65532, 0o755)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		tw.file(f.name, b, 0, 0o755)
	}
	return tw.close()
}

// Ports: the gateway's published port is taken from the free loopback
// ports below the ephemeral range, like the test kit's servers.
func freePort() (int, error) {
	addr, err := embedded.FreeAddr()
	if err != nil {
		return 0, err
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscan(p, &n)
	return n, err
}

// freePortRange returns the first of n consecutive free loopback ports (a
// published port range, one port per gateway replica).
func freePortRange(n int) (int, error) {
	for range 50 {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		free := true
		for i := 1; i < n && free; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+i))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports", n)
}

func readEnv(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		env[k] = v
	}
	return env, nil
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Root is the repository root.
func Root() (string, error) { return stack.Root() }
