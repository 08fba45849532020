package composecheck

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/healthcheck"
	"github.com/acme/platform/scripts/stack"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
	"github.com/nats-io/nats-server/v2/server"
)

// testEnv stands in for the operator's .env: every variable compose.yaml
// requires, with values that are obviously not secrets.
var testEnv = map[string]string{
	"IDENTITY_PUBLIC_KEY":     "test-public-key",
	"IDENTITY_PRIVATE_KEY":    "test-private-key",
	"SERVICE_CREDENTIAL":      "test-credential",
	"ADMIN_PASSWORD":          "test-admin-password",
	"MFA_KEY":                 "test-mfa-key-of-32-characters-at-least",
	"MINIO_ROOT_USER":         "test-root",
	"MINIO_ROOT_PASSWORD":     "test-root-password",
	"S3_ACCESS_KEY":           "test-access",
	"S3_SECRET_KEY":           "test-secret-key",
	"NATS_AUTH_PASSWORD":      "testAuthPassword",
	"NATS_FILES_PASSWORD":     "testFilesPassword",
	"NATS_LOGS_PASSWORD":      "testLogsPassword",
	"NATS_GATEWAY_PASSWORD":   "testGatewayPassword",
	"NATS_PUBLISHER_PASSWORD": "testPublisherPassword",
	"MONGO_ROOT_PASSWORD":     "test-mongo-root-password",
	"MONGO_APP_PASSWORD":      "test-mongo-app-password",
}

// jobs are one-shot services: they run to completion before the services
// that depend on them start, so they have no healthcheck, and services wait
// for them with service_completed_successfully.
var jobs = map[string]bool{"files-setup": true}

// ours are the services built from this repository's Dockerfile, with the
// services they must wait for.
var ours = map[string][]string{
	"auth":    {"mongo", "nats"},
	"files":   {"files-setup", "minio", "mongo", "nats"},
	"logs":    {"mongo", "nats"},
	"gateway": {"auth", "files", "logs", "nats"},
}

func load(t *testing.T, env map[string]string, interpolate bool) (*types.Project, string) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := LoadProject(ctx, root, env, interpolate)
	if err != nil {
		t.Fatalf("compose.yaml does not load: %v", err)
	}
	return p, root
}

func TestComposeLoads(t *testing.T) {
	p, _ := load(t, testEnv, true)
	want := []string{"auth", "files", "files-setup", "gateway", "logs", "minio", "mongo", "nats"}
	if got := p.ServiceNames(); !slices.Equal(sortedCopy(got), want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	// Without .env the file refuses to start rather than run without keys.
	root, _ := RepoRoot()
	if _, err := LoadProject(context.Background(), root, map[string]string{}, true); err == nil ||
		!strings.Contains(err.Error(), "gensecrets") {
		t.Fatalf("loading without the secrets must fail and point at scripts/gensecrets, got %v", err)
	}
}

func TestEveryServiceHasAHealthcheck(t *testing.T) {
	p, _ := load(t, testEnv, true)
	for name, s := range p.Services {
		if jobs[name] {
			if s.Restart == "always" || s.Restart == "unless-stopped" {
				t.Errorf("%s: a one-shot job with restart %q would run forever", name, s.Restart)
			}
			continue
		}
		hc := s.HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) < 2 || (hc.Test[0] != "CMD" && hc.Test[0] != "CMD-SHELL") {
			t.Errorf("%s: no healthcheck (%+v)", name, hc)
			continue
		}
		if hc.Interval == nil || hc.Timeout == nil || hc.Retries == nil {
			t.Errorf("%s: healthcheck without interval, timeout and retries", name)
			continue
		}
		// The probe's own deadline must fire before Docker kills it.
		if time.Duration(*hc.Timeout) <= healthcheck.Timeout {
			t.Errorf("%s: healthcheck timeout %v not above the probe's %v", name, time.Duration(*hc.Timeout), healthcheck.Timeout)
		}
		if _, ok := ours[name]; ok {
			if got := []string(hc.Test); !slices.Equal(got, []string{"CMD", "/app", "healthcheck"}) {
				t.Errorf("%s: healthcheck %q, want the binary's own healthcheck mode", name, got)
			}
		}
	}
}

var versionTag = regexp.MustCompile(`^v?\d+\.\d+\.\d+([-.+][0-9A-Za-z.-]+)?$`)

func TestImagesPinned(t *testing.T) {
	p, _ := load(t, testEnv, true)
	for name, s := range p.Services {
		if s.Image == "" {
			t.Errorf("%s: no image name (a built image must be tagged with a version)", name)
			continue
		}
		ref, err := reference.ParseNormalizedNamed(s.Image)
		if err != nil {
			t.Errorf("%s: image %q: %v", name, s.Image, err)
			continue
		}
		if _, ok := ref.(reference.Digested); ok {
			continue
		}
		tagged, ok := ref.(reference.Tagged)
		if !ok {
			t.Errorf("%s: image %q has no tag", name, s.Image)
			continue
		}
		if !versionTag.MatchString(tagged.Tag()) {
			t.Errorf("%s: image %q: tag %q is not a full version", name, s.Image, tagged.Tag())
		}
		if s.Build != nil && !strings.HasPrefix(reference.FamiliarName(ref), "acme/") {
			t.Errorf("%s: built image %q must be named acme/...", name, s.Image)
		}
	}
}

func TestOnlyTheGatewayPublishesAPort(t *testing.T) {
	p, _ := load(t, testEnv, true)
	for name, s := range p.Services {
		if s.ContainerName != "" {
			t.Errorf("%s: container_name %q prevents --scale", name, s.ContainerName)
		}
		if name == "gateway" {
			if len(s.Ports) != 1 || s.Ports[0].Target != 8080 {
				t.Errorf("gateway: ports %+v, want one mapping to 8080", s.Ports)
			}
			continue
		}
		if len(s.Ports) > 0 {
			t.Errorf("%s: publishes %+v; only the gateway may", name, s.Ports)
		}
	}
}

func TestDependsOnHealthy(t *testing.T) {
	p, _ := load(t, testEnv, true)
	for name, s := range p.Services {
		for dep, d := range s.DependsOn {
			if jobs[dep] {
				if d.Condition != types.ServiceConditionCompletedSuccessfully {
					t.Errorf("%s: depends on the job %s with condition %q, want %s", name, dep, d.Condition, types.ServiceConditionCompletedSuccessfully)
				}
				continue
			}
			if d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: depends on %s with condition %q, want %s", name, dep, d.Condition, types.ServiceConditionHealthy)
			}
		}
		if want, ok := ours[name]; ok {
			var got []string
			for dep := range s.DependsOn {
				got = append(got, dep)
			}
			if !slices.Equal(sortedCopy(got), want) {
				t.Errorf("%s: depends on %v, want %v", name, sortedCopy(got), want)
			}
		}
	}
}

func TestContainersRunAsNonRoot(t *testing.T) {
	p, _ := load(t, testEnv, true)
	for name, s := range p.Services {
		uid, _, _ := strings.Cut(s.User, ":")
		if uid == "" || uid == "0" || uid == "root" {
			t.Errorf("%s: user %q; every container runs as a non-root user", name, s.User)
		}
	}
}

// TestAuthRuntimeSettings: the auth container gets the Go runtime settings
// that make run, the tests and the benchmarks give auth (stack.AuthGODEBUG,
// docs/auth.md "Memory"), and no other container needs them.
func TestAuthRuntimeSettings(t *testing.T) {
	p, _ := load(t, testEnv, true)
	for name, s := range p.Services {
		v := s.Environment["GODEBUG"]
		switch {
		case name == "auth" && (v == nil || *v != stack.AuthGODEBUG("")):
			t.Errorf("auth: GODEBUG %v, want %q", strOrNil(v), stack.AuthGODEBUG(""))
		case name != "auth" && v != nil:
			t.Errorf("%s: GODEBUG %q set; only auth needs one", name, *v)
		}
	}
}

func strOrNil(v *string) string {
	if v == nil {
		return "unset"
	}
	return *v
}

var (
	secretKey   = regexp.MustCompile(`PASSWORD|SECRET|PRIVATE_KEY|ACCESS_KEY|CREDENTIAL|TOKEN`)
	urlUserinfo = regexp.MustCompile(`://[^/@\s]+:[^/@\s]+@`)
	// ${ADMIN_PASSWORD:-changeme}, ${S3_SECRET_KEY-x}
	secretDefault = regexp.MustCompile(`\$\{[A-Z0-9_]*(PASSWORD|SECRET|PRIVATE_KEY|ACCESS_KEY|CREDENTIAL|TOKEN)[A-Z0-9_]*:?-[^}]*\}`)
)

// TestNoSecretInTheFile loads compose.yaml with every .env variable set to
// a marker naming it: a secret-looking setting is either a _FILE path (a
// compose secret) or exactly one variable of .env, never a literal or a
// default; and every secret comes from a variable of .env.
func TestNoSecretInTheFile(t *testing.T) {
	markers := map[string]string{}
	for k := range testEnv {
		markers[k] = "from-env:" + k
	}
	p, root := load(t, markers, true)
	for name, s := range p.Services {
		for k, v := range s.Environment {
			if v == nil {
				continue
			}
			if secretKey.MatchString(k) && !strings.HasSuffix(k, "_FILE") &&
				!(strings.HasPrefix(*v, "from-env:") && !strings.ContainsAny(*v, " @/")) {
				t.Errorf("%s: %s has a literal value; take it from a secret (%s_FILE) or ${VAR} in .env", name, k, k)
			}
			if urlUserinfo.MatchString(*v) {
				t.Errorf("%s: %s carries credentials in a URL", name, k)
			}
		}
		if s.Build != nil {
			for k := range s.Build.Args {
				if secretKey.MatchString(k) {
					t.Errorf("%s: build argument %s would be kept in the image history", name, k)
				}
			}
		}
	}
	for name, sec := range p.Secrets {
		if sec.Environment == "" {
			t.Errorf("secret %s: not from a variable of .env (file: %q)", name, sec.File)
		}
	}
	raw, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "PRIVATE KEY") {
		t.Error("compose.yaml contains a PEM key")
	}
	for _, m := range secretDefault.FindAllString(string(raw), -1) {
		t.Errorf("compose.yaml gives a secret a default value: %s", m)
	}
	ignored, err := os.ReadFile(filepath.Join(root, ".gitignore"))
	if err != nil || !slices.Contains(strings.Fields(string(ignored)), ".env") {
		t.Errorf(".gitignore must list .env (err %v)", err)
	}
}

// TestSecretsReachTheirReaders: every *_FILE setting names a secret the
// service mounts, readable by the container's user, and every mounted secret
// is read.
func TestSecretsReachTheirReaders(t *testing.T) {
	p, _ := load(t, testEnv, true)
	for name, s := range p.Services {
		mounted := map[string]types.ServiceSecretConfig{}
		for _, sec := range s.Secrets {
			if _, ok := p.Secrets[sec.Source]; !ok {
				t.Errorf("%s: secret %s is not declared", name, sec.Source)
			}
			mounted[SecretPath(sec)] = sec
			readable := sec.Mode != nil && *sec.Mode&0o004 != 0
			if uid, _, _ := strings.Cut(s.User, ":"); sec.UID == uid && sec.Mode != nil && *sec.Mode&0o400 != 0 {
				readable = true
			}
			if !readable {
				t.Errorf("%s: secret %s (mode %v, uid %q) is not readable by user %s", name, sec.Source, sec.Mode, sec.UID, s.User)
			}
		}
		read := map[string]bool{}
		for k, v := range s.Environment {
			if !strings.HasSuffix(k, "_FILE") || v == nil {
				continue
			}
			if _, ok := mounted[*v]; !ok {
				t.Errorf("%s: %s=%s is not a secret the service mounts", name, k, *v)
			}
			read[*v] = true
		}
		for path := range mounted {
			if !read[path] {
				t.Errorf("%s: mounts %s but no *_FILE setting reads it", name, path)
			}
		}
	}
}

// TestScaling: the scaled services are reached by name (Docker's DNS
// answers with every replica), listen on every interface, and share a
// network with whatever they call.
func TestScaling(t *testing.T) {
	p, _ := load(t, testEnv, true)
	gw := p.Services["gateway"]
	for _, svc := range []string{"auth", "files", "logs"} {
		s := p.Services[svc]
		addr := env(s, strings.ToUpper(svc)+"_ADDR")
		if !strings.HasPrefix(addr, ":") && !strings.HasPrefix(addr, "0.0.0.0:") {
			t.Errorf("%s: %s_ADDR=%q must listen on every interface", svc, strings.ToUpper(svc), addr)
			continue
		}
		_, port, _ := strings.Cut(addr, ":")
		if got, want := env(gw, "GATEWAY_"+strings.ToUpper(svc)+"_URL"), "http://"+svc+":"+port; got != want {
			t.Errorf("gateway reaches %s at %q, want %q", svc, got, want)
		}
		if s.Hostname != "" || s.Deploy != nil && s.Deploy.Replicas != nil {
			t.Errorf("%s: a fixed hostname or replica count fights --scale", svc)
		}
	}
	if addr := env(gw, "GATEWAY_ADDR"); addr != ":8080" {
		t.Errorf("GATEWAY_ADDR=%q, want :8080", addr)
	}
	for name, s := range p.Services {
		for dep := range s.DependsOn {
			if !shareNetwork(s, p.Services[dep]) {
				t.Errorf("%s and %s share no network", name, dep)
			}
		}
	}
}

// TestNATSWiring: each service logs in to NATS as its own user with the
// password deploy/nats.conf expects for that user.
func TestNATSWiring(t *testing.T) {
	p, root := load(t, testEnv, true)
	natsSvc := p.Services["nats"]
	conf, err := os.ReadFile(filepath.Join(root, "deploy", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// The server gets every variable the file refers to.
	for _, m := range regexp.MustCompile(`:\s*\$([A-Z][A-Z0-9_]*)`).FindAllStringSubmatch(string(conf), -1) {
		if env(natsSvc, m[1]) == "" {
			t.Errorf("deploy/nats.conf uses $%s but the nats service does not set it", m[1])
		}
	}
	if c, ok := p.Configs["nats_conf"]; !ok || filepath.Clean(c.File) != filepath.Join(root, "deploy", "nats.conf") {
		t.Errorf("the nats service must mount deploy/nats.conf (configs: %+v)", p.Configs)
	}
	for k, v := range natsSvc.Environment {
		if v != nil {
			t.Setenv(k, *v)
		}
	}
	opts, err := server.ProcessConfigFile(filepath.Join(root, "deploy", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]string{}
	for _, u := range opts.Users {
		users[u.Username] = u.Password
	}
	if c := env(p.Services["logs"], "LOGS_CONSUMER"); c != "" && c != consumer {
		t.Errorf("LOGS_CONSUMER=%q; deploy/nats.conf is written for %s", c, consumer)
	}
	for name := range ours {
		s := p.Services[name]
		user := env(s, "NATS_USER")
		if user != name {
			t.Errorf("%s: NATS_USER=%q, want its own user %q", name, user, name)
		}
		if prefix := env(s, "NATS_SUBJECT_PREFIX"); prefix != "acme" {
			t.Errorf("%s: NATS_SUBJECT_PREFIX=%q; deploy/nats.conf is written for acme", name, prefix)
		}
		pwPath := env(s, "NATS_PASSWORD_FILE")
		var secretVar string
		for _, sec := range s.Secrets {
			if SecretPath(sec) == pwPath {
				secretVar = p.Secrets[sec.Source].Environment
			}
		}
		want, ok := users[user]
		if !ok || secretVar == "" || testEnv[secretVar] != want {
			t.Errorf("%s: logs in as %q with the value of %s (%q); nats.conf expects %q", name, user, secretVar, testEnv[secretVar], want)
		}
	}
}

func env(s types.ServiceConfig, k string) string {
	if v := s.Environment[k]; v != nil {
		return *v
	}
	return ""
}

func shareNetwork(a, b types.ServiceConfig) bool {
	for n := range a.Networks {
		if _, ok := b.Networks[n]; ok {
			return true
		}
	}
	return false
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
