package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// StackLabel is the label `docker stack deploy` puts on everything it makes.
const StackLabel = "com.docker.stack.namespace"

// SwarmStack is one stack, deploy/stack.yaml plus the test's stand-ins,
// deployed on this engine's swarm under a name of its own.
type SwarmStack struct {
	T     testing.TB
	Root  string
	Name  string            // the stack's name, acmeswarm<hex>
	Env   map[string]string // the .env of scripts/gensecrets plus the test's settings
	files []string
	// GatewayURL is the gateway's port (host mode), reached at the
	// node's own address.
	GatewayURL string
	Node       string // this node's ID
	images     []string
	removed    bool
}

// NewSwarmStack prepares a stack: a fresh .env and secret files from
// scripts/gensecrets (-secrets-dir), the gateway on a free port, and the
// removal at the end of the test (also when it fails).
func NewSwarmStack(t testing.TB, root, version, node string) *SwarmStack {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &SwarmStack{
		T: t, Root: root, Node: node,
		Name: "acmeswarm" + strings.ToLower(randomID(3)),
		files: []string{
			filepath.Join(root, "deploy", "stack.yaml"),
			filepath.Join(root, "scripts", "containers", "testdata", "standin.stack.yaml"),
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, err := Docker(ctx, "info", "--format", "{{.Swarm.NodeAddr}}")
	if err != nil {
		t.Fatal(err)
	}
	s.GatewayURL = fmt.Sprintf("http://%s:%d", strings.TrimSpace(addr), port)
	dir := t.TempDir()
	envFile, secrets := filepath.Join(dir, ".env"), filepath.Join(dir, "secrets")
	gen := exec.Command("go", "run", "./scripts/gensecrets", "-o", envFile, "-secrets-dir", secrets)
	gen.Dir = root
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("gensecrets: %v\n%s", err, out)
	}
	if s.Env, err = readEnv(envFile); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"GATEWAY_PORT":       fmt.Sprint(port),
		"AUTH_COOKIE_SECURE": "false",
		"PUBLIC_BASE_URL":    s.GatewayURL,
		"ACME_VERSION":       version,
		"ACME_SECRETS_DIR":   secrets,
	} {
		s.Env[k] = v
	}
	t.Cleanup(s.Remove)
	return s
}

// Stack runs `docker stack <args>` in dir (the root when ""), with stdin
// (nil: none), in an environment of the stack's .env only (docker stack
// deploy reads no .env file: it substitutes from its environment).
func (s *SwarmStack) Stack(ctx context.Context, dir string, stdin []byte, args ...string) (string, error) {
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	env, err := HermeticEnv(os.Environ(), keys, s.files...)
	if err != nil {
		return "", err
	}
	for _, k := range keys {
		env = append(env, k+"="+s.Env[k])
	}
	cmd := exec.CommandContext(ctx, "docker", append([]string{"stack"}, args...)...)
	cmd.Dir, cmd.Env = s.Root, env
	if dir != "" {
		cmd.Dir = dir
	}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker stack %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Deploy runs `docker stack deploy` with deploy/stack.yaml and the
// stand-ins. --resolve-image never: there is no registry to ask for
// digests; the tasks use the images built on this engine.
func (s *SwarmStack) Deploy(ctx context.Context) error {
	merged, err := mergeStackFiles(ctx, s.files)
	if err != nil {
		return err
	}
	// From standard input, docker stack deploy resolves relative paths
	// (./nats.conf) from its working directory: deploy/, as for the file.
	_, err = s.Stack(ctx, filepath.Join(s.Root, "deploy"), merged, "deploy", "--resolve-image", "never", "--compose-file", "-", s.Name)
	return err
}

// mergeStackFiles merges compose files with the compose specification's
// rules (an override's list, such as a healthcheck's test, replaces the
// base's; `docker stack deploy -c a -c b` appends them) and returns the
// result as JSON, which `docker stack deploy` reads as it reads YAML.
// Variables and relative paths are left for docker stack deploy.
func mergeStackFiles(ctx context.Context, files []string) ([]byte, error) {
	var cfs []types.ConfigFile
	for _, f := range files {
		cfs = append(cfs, types.ConfigFile{Filename: f})
	}
	details := types.ConfigDetails{WorkingDir: filepath.Dir(files[0]), ConfigFiles: cfs, Environment: types.Mapping{}}
	model, err := loader.LoadModelWithContext(ctx, details, func(o *loader.Options) {
		o.SkipNormalization = true
		o.Interpolate = nil
		o.ResolvePaths = false
		o.SetProjectName("acme", true)
	})
	if err != nil {
		return nil, fmt.Errorf("merging %s: %w", strings.Join(files, ", "), err)
	}
	return json.Marshal(model)
}

// Service is the full name of one of the stack's services.
func (s *SwarmStack) Service(name string) string { return s.Name + "_" + name }

// SwarmService is what `docker service ls` says of one service.
type SwarmService struct {
	Name, Mode, Replicas, Image string
}

// Services lists the stack's services.
func (s *SwarmStack) Services(ctx context.Context) ([]SwarmService, error) {
	out, err := Docker(ctx, "service", "ls", "--filter", "label="+StackLabel+"="+s.Name, "--format", "{{json .}}")
	if err != nil {
		return nil, err
	}
	var list []SwarmService
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var sv SwarmService
		if err := json.Unmarshal([]byte(line), &sv); err != nil {
			return nil, err
		}
		list = append(list, sv)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list, nil
}

// converged says whether a service runs every replica it should (a task is
// running once its health check passed), or a job completed.
func (sv SwarmService) converged() bool {
	if strings.HasSuffix(sv.Mode, "job") {
		return strings.Contains(sv.Replicas, "completed") && jobDone(sv.Replicas)
	}
	have, want, ok := strings.Cut(sv.Replicas, "/")
	want, _, _ = strings.Cut(want, " ")
	return ok && have == want && want != "0"
}

// jobDone reads "0/1 (1/1 completed)".
func jobDone(replicas string) bool {
	_, paren, _ := strings.Cut(replicas, "(")
	done, rest, _ := strings.Cut(paren, "/")
	total, _, _ := strings.Cut(rest, " ")
	return done != "" && done == total
}

// WaitConverged waits until every service of the stack converged and no
// update is under way, and returns how long that took.
func (s *SwarmStack) WaitConverged(ctx context.Context, max time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for {
		list, err := s.Services(ctx)
		if err != nil {
			return 0, err
		}
		var waiting []string
		for _, sv := range list {
			if !sv.converged() {
				waiting = append(waiting, sv.Name+" "+sv.Replicas)
			}
		}
		if len(list) > 0 && len(waiting) == 0 {
			return time.Since(t0), nil
		}
		if time.Since(t0) > max {
			return 0, fmt.Errorf("not converged after %s: %s\n%s", max, strings.Join(waiting, ", "), s.taskErrors(ctx))
		}
		time.Sleep(2 * time.Second)
	}
}

// taskErrors lists the stack's tasks that did not run, with swarm's reason.
func (s *SwarmStack) taskErrors(ctx context.Context) string {
	out, _ := Docker(ctx, "stack", "ps", "--no-trunc", "--format", "{{.Name}} {{.Image}} {{.DesiredState}} {{.CurrentState}} {{.Error}}", s.Name)
	return out
}

// Tasks lists the running containers of one of the stack's services.
func (s *SwarmStack) Tasks(ctx context.Context, service string) ([]string, error) {
	out, err := Docker(ctx, "ps", "-q", "--filter", "label=com.docker.swarm.service.name="+s.Service(service))
	if err != nil {
		return nil, err
	}
	ids := strings.Fields(out)
	sort.Strings(ids)
	return ids, nil
}

// UpdateState is the state of a service's last update ("" before any):
// updating, completed, paused, rollback_started, rollback_completed...
func (s *SwarmStack) UpdateState(ctx context.Context, service string) (string, error) {
	out, err := Docker(ctx, "service", "inspect", "--format", "{{if .UpdateStatus}}{{.UpdateStatus.State}} {{.UpdateStatus.Message}}{{end}}", s.Service(service))
	return strings.TrimSpace(out), err
}

// WaitUpdate waits until a service's update reaches one of the final
// states and returns it.
func (s *SwarmStack) WaitUpdate(ctx context.Context, service string, max time.Duration) (string, error) {
	t0 := time.Now()
	for {
		st, err := s.UpdateState(ctx, service)
		if err != nil {
			return "", err
		}
		state, _, _ := strings.Cut(st, " ")
		switch state {
		case "completed", "rollback_completed", "paused", "rollback_paused":
			return st, nil
		}
		if time.Since(t0) > max {
			return st, fmt.Errorf("%s: update still %q after %s\n%s", service, st, max, s.taskErrors(ctx))
		}
		time.Sleep(time.Second)
	}
}

// RunJob runs the stackprobe tool once as a swarm job on one of the stack's
// networks (the networks are not attachable: a container outside swarm
// cannot join them), and returns its output.
func (s *SwarmStack) RunJob(ctx context.Context, network string, env map[string]string, args ...string) (string, error) {
	name := s.Name + "_probe" + randomID(2)
	full := []string{"service", "create", "--detach", "--name", name, "--mode", "replicated-job",
		"--restart-condition", "none", "--network", s.Service(network), "--label", StackLabel + "=" + s.Name}
	for k, v := range env {
		full = append(full, "--env", k+"="+v)
	}
	if _, err := Docker(ctx, append(append(full, ProbeImage), args...)...); err != nil {
		return "", err
	}
	defer Docker(context.Background(), "service", "rm", name)
	for {
		out, err := Docker(ctx, "service", "ps", "--format", "{{.CurrentState}}", name)
		if err != nil {
			return "", err
		}
		state := strings.TrimSpace(out)
		if strings.HasPrefix(state, "Complete") || strings.HasPrefix(state, "Failed") || strings.HasPrefix(state, "Rejected") {
			logs, _ := Docker(ctx, "service", "logs", "--raw", name)
			if !strings.HasPrefix(state, "Complete") {
				return logs, fmt.Errorf("job %s: %s\n%s", name, state, s.taskErrors(ctx))
			}
			return logs, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("job %s: %s: %w", name, state, ctx.Err())
		}
		time.Sleep(time.Second)
	}
}

// Leftovers names what carries the stack's label: services, secrets,
// configs, networks, volumes and containers.
func (s *SwarmStack) Leftovers(ctx context.Context) ([]string, error) {
	filter := "label=" + StackLabel + "=" + s.Name
	var left []string
	for _, kind := range []string{"service", "secret", "config", "network", "volume", "container"} {
		args := []string{kind, "ls", "--filter", filter, "--format", "{{.Name}}"}
		if kind == "container" {
			args = []string{"ps", "-a", "--filter", filter, "--format", "{{.Names}}"}
		}
		out, err := Docker(ctx, args...)
		if err != nil {
			return nil, err
		}
		for _, n := range strings.Fields(out) {
			left = append(left, kind+" "+n)
		}
	}
	return left, nil
}

// RemoveStack runs `docker stack rm` and waits until nothing the stack
// made is left but its volumes (stack rm keeps the data) and the exited
// containers of its jobs (swarm on Engine 20.10 does not remove a job's
// task containers with the service); it returns both.
func (s *SwarmStack) RemoveStack(ctx context.Context) (volumes, exited []string, err error) {
	if _, err := s.Stack(ctx, "", nil, "rm", s.Name); err != nil {
		return nil, nil, err
	}
	s.removed = true
	for {
		left, err := s.Leftovers(ctx)
		if err != nil {
			return nil, nil, err
		}
		running, err := Docker(ctx, "ps", "-q", "--filter", "label="+StackLabel+"="+s.Name)
		if err != nil {
			return nil, nil, err
		}
		var others []string
		volumes, exited = volumes[:0], exited[:0]
		for _, l := range left {
			kind, name, _ := strings.Cut(l, " ")
			switch {
			case kind == "volume":
				volumes = append(volumes, name)
			case kind == "container" && strings.TrimSpace(running) == "":
				exited = append(exited, name)
			default:
				others = append(others, l)
			}
		}
		if len(others) == 0 {
			return volumes, exited, nil
		}
		if ctx.Err() != nil {
			return volumes, exited, fmt.Errorf("left after docker stack rm: %s", strings.Join(others, ", "))
		}
		time.Sleep(time.Second)
	}
}

// Remove takes the stack down and removes its volumes, printing the
// services' last log lines first when the test failed.
func (s *SwarmStack) Remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if s.T.Failed() {
		list, _ := s.Services(ctx)
		for _, sv := range list {
			out, _ := Docker(ctx, "service", "logs", "--no-trunc", "--tail", "20", sv.Name)
			s.T.Logf("last log lines of %s:\n%s", sv.Name, out)
		}
		s.T.Logf("tasks:\n%s", s.taskErrors(ctx))
	}
	if !s.removed {
		volumes, exited, err := s.RemoveStack(ctx)
		if err != nil {
			s.T.Errorf("stack rm: %v", err)
		}
		if err := removeLeftovers(ctx, volumes, exited); err != nil {
			s.T.Error(err)
		}
	}
	if len(s.images) > 0 {
		if out, err := Docker(ctx, append([]string{"image", "rm"}, s.images...)...); err != nil {
			s.T.Errorf("image rm: %v %s", err, out)
		}
	}
}

// removeLeftovers removes the exited job containers and the volumes that
// `docker stack rm` kept.
func removeLeftovers(ctx context.Context, volumes, exited []string) error {
	if len(exited) > 0 {
		if out, err := Docker(ctx, append([]string{"rm", "-f"}, exited...)...); err != nil {
			return fmt.Errorf("rm: %w %s", err, out)
		}
	}
	if len(volumes) > 0 {
		if out, err := Docker(ctx, append([]string{"volume", "rm", "-f"}, volumes...)...); err != nil {
			return fmt.Errorf("volume rm: %w %s", err, out)
		}
	}
	return nil
}

// BuildDerived builds an image from a Dockerfile given as text (no build
// context: FROM an image on this engine, then LABEL, HEALTHCHECK and the
// like), tags it, and records it for removal with the stack.
func (s *SwarmStack) BuildDerived(ctx context.Context, tag, dockerfile string) error {
	cmd := exec.CommandContext(ctx, "docker", "build", "--tag", tag, "-")
	cmd.Stdin = strings.NewReader(dockerfile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker build %s: %w\n%s", tag, err, tail(string(out), 30))
	}
	s.images = append(s.images, tag)
	return nil
}
