package containers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/acme/platform/scripts/composecheck"
	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadStackAndCompose loads compose.yaml and deploy/stack.yaml with the
// same values for every variable either names.
func loadStackAndCompose(t *testing.T) (compose, stack *types.Project) {
	t.Helper()
	root, err := composecheck.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(root, "compose.yaml"), filepath.Join(root, "deploy", "stack.yaml")}
	env := map[string]string{"ACME_SECRETS_DIR": "/run/acme-secrets"}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range composeVar.FindAllStringSubmatch(string(b), -1) {
			if env[m[1]] == "" {
				env[m[1]] = "value-of-" + m[1]
			}
		}
	}
	env["GATEWAY_PORT"] = "18080"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	compose, err = composecheck.LoadProject(ctx, root, env, true)
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	opts, err := cli.NewProjectOptions(files[1:], cli.WithWorkingDirectory(filepath.Dir(files[1])),
		cli.WithEnv(list), cli.WithInterpolation(true), cli.WithResolvedPaths(true), cli.WithName("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if stack, err = opts.LoadProject(ctx); err != nil {
		t.Fatalf("deploy/stack.yaml: %v", err)
	}
	return compose, stack
}

// TestStackFileMatchesCompose: deploy/stack.yaml runs compose.yaml's
// services as compose.yaml describes them (images, users, commands,
// settings, secrets, configs, networks, volumes, logging, grace periods,
// health checks, the gateway's port); it may differ only in what swarm
// needs (deploy sections, secrets from files, overlay networks).
func TestStackFileMatchesCompose(t *testing.T) {
	compose, stack := loadStackAndCompose(t)
	if got, want := sortedKeys(stack.Services), sortedKeys(compose.Services); !reflect.DeepEqual(got, want) {
		t.Fatalf("services %v, compose.yaml has %v", got, want)
	}
	for name, c := range compose.Services {
		s := stack.Services[name]
		same := func(what string, got, want any) {
			t.Helper()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %s %v in deploy/stack.yaml, %v in compose.yaml", name, what, got, want)
			}
		}
		same("image", s.Image, c.Image)
		same("user", s.User, c.User)
		same("entrypoint", s.Entrypoint, c.Entrypoint)
		same("command", s.Command, c.Command)
		if d := envDiff(s.Environment, c.Environment); len(d) > 0 {
			t.Errorf("%s: settings differ (deploy/stack.yaml / compose.yaml): %v", name, d)
		}
		same("secrets", s.Secrets, c.Secrets)
		same("configs", s.Configs, c.Configs)
		same("networks", sortedKeys(s.Networks), sortedKeys(c.Networks))
		same("volumes", s.Volumes, c.Volumes)
		same("logging", s.Logging, c.Logging)
		same("stop_grace_period", s.StopGracePeriod, c.StopGracePeriod)
		same("ports", portsOf(s), portsOf(c))
		// auth, files, logs and the gateway take their check from their
		// image (the Dockerfile's, equal to compose's: scripts/composecheck),
		// so a release that fails its own check is rolled back; the others
		// keep compose's.
		switch {
		case c.Build != nil && c.Build.Dockerfile == "Dockerfile":
			if s.HealthCheck != nil {
				t.Errorf("%s: deploy/stack.yaml sets a healthcheck; the image's applies", name)
			}
		default:
			same("healthcheck", s.HealthCheck, c.HealthCheck)
		}
	}
	if got, want := sortedKeys(stack.Secrets), sortedKeys(compose.Secrets); !reflect.DeepEqual(got, want) {
		t.Errorf("secrets %v, compose.yaml has %v", got, want)
	}
	for name, sec := range stack.Secrets {
		if want := filepath.Join("/run/acme-secrets", name); sec.File != want {
			t.Errorf("secret %s from %q, want %s (scripts/gensecrets -secrets-dir)", name, sec.File, want)
		}
	}
	for name, c := range compose.Configs {
		if stack.Configs[name].File != c.File {
			t.Errorf("config %s: %q in deploy/stack.yaml, %q in compose.yaml", name, stack.Configs[name].File, c.File)
		}
	}
	if got, want := sortedKeys(stack.Volumes), sortedKeys(compose.Volumes); !reflect.DeepEqual(got, want) {
		t.Errorf("volumes %v, compose.yaml has %v", got, want)
	}
	for name, c := range compose.Networks {
		s, ok := stack.Networks[name]
		if !ok || s.Internal != c.Internal || s.Driver != "overlay" || s.DriverOpts["encrypted"] != "true" {
			t.Errorf("network %s: %+v; want an encrypted overlay, internal %v as in compose.yaml", name, s, c.Internal)
		}
	}
	if len(stack.Networks) != len(compose.Networks) {
		t.Errorf("%d networks, compose.yaml has %d", len(stack.Networks), len(compose.Networks))
	}
}

// TestStackFileDeploy: every long-running service has replicas (the
// gateway one per node), a restart policy, resource limits and
// reservations, an update that rolls back on failure and a rollback
// configuration, and is found by every task's address (dnsrr); auth, files
// and logs start the new task first; the stateful services stop first and
// are placed by a node label (their volumes live on that node), the gateway
// stops first too (its port is published in host mode).
func TestStackFileDeploy(t *testing.T) {
	_, stack := loadStackAndCompose(t)
	for name, s := range stack.Services {
		if problems := deployProblems(name, s); len(problems) > 0 {
			t.Errorf("%s: want %v", name, problems)
		}
	}
}

// deployProblems lists what a service's deploy section lacks.
func deployProblems(name string, s types.ServiceConfig) []string {
	d := s.Deploy
	if d == nil {
		return []string{"a deploy section"}
	}
	if name == "files-setup" {
		if d.Mode != "replicated-job" || d.RestartPolicy == nil || d.RestartPolicy.Condition != "on-failure" {
			return []string{"a job (replicated-job) retried on failure"}
		}
		return nil
	}
	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	stateful := name == "mongo" || name == "nats" || name == "minio"
	check(d.Replicas != nil && *d.Replicas >= 1 || name == "gateway" && d.Mode == "global", "replicas (the gateway: global)")
	check(d.RestartPolicy != nil && d.RestartPolicy.Condition == "any", "restart_policy condition any")
	check(resourcesSet(d.Resources), "cpu and memory limits, and a memory reservation below the limit")
	u, r := d.UpdateConfig, d.RollbackConfig
	check(u != nil && u.FailureAction == "rollback" && u.Monitor >= types.Duration(20*time.Second), "update_config: failure_action rollback, monitor >= 20s")
	order := "start-first"
	if stateful || name == "gateway" {
		order = "stop-first"
	}
	check(u != nil && u.Order == order && r != nil && r.Order == order, "update and rollback order %s", order)
	check(d.EndpointMode == "dnsrr", "endpoint_mode dnsrr")
	if stateful {
		want := "node.labels.acme." + name + " == true"
		check(reflect.DeepEqual(d.Placement.Constraints, []string{want}), "placement %q", want)
	}
	if name == "gateway" {
		check(len(s.Ports) == 1 && s.Ports[0].Mode == "host", "its port published in host mode")
	}
	return problems
}

// resourcesSet: CPU and memory limits, and a memory reservation below the
// memory limit.
func resourcesSet(r types.Resources) bool {
	lim, res := r.Limits, r.Reservations
	if lim == nil || res == nil {
		return false
	}
	return lim.MemoryBytes > 0 && lim.NanoCPUs > 0 && res.MemoryBytes > 0 && res.MemoryBytes < lim.MemoryBytes
}

// envDiff lists the settings two environments disagree on, as
// "KEY: stack value / compose value".
func envDiff(stack, compose types.MappingWithEquals) []string {
	val := func(m types.MappingWithEquals, k string) string {
		if v, ok := m[k]; ok && v != nil {
			return *v
		} else if ok {
			return "(no value)"
		}
		return "(unset)"
	}
	var diff []string
	for _, k := range sortedKeys(map[string]*string(compose)) {
		if a, b := val(stack, k), val(compose, k); a != b {
			diff = append(diff, k+": "+a+" / "+b)
		}
	}
	for _, k := range sortedKeys(map[string]*string(stack)) {
		if _, ok := compose[k]; !ok {
			diff = append(diff, k+": "+val(stack, k)+" / (unset)")
		}
	}
	return diff
}

// portsOf is a service's published ports as "published:target/protocol"
// (the mode is swarm's: the stack publishes in host mode).
func portsOf(s types.ServiceConfig) []string {
	var out []string
	for _, p := range s.Ports {
		out = append(out, fmt.Sprintf("%s:%d/%s", p.Published, p.Target, p.Protocol))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
