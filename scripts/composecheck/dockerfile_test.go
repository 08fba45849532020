package composecheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/embedded"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
)

func TestParseDockerfile(t *testing.T) {
	stages, err := ParseDockerfile(`# comment
ARG X=1
ARG GO_IMAGE=golang:1.26.8-bookworm
FROM ${GO_IMAGE} AS build
RUN a \
    b \
# inner comment
    c
FROM scratch
USER 65532
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || stages[0].Name != "build" || stages[0].Image != "golang:1.26.8-bookworm" || stages[1].Image != "scratch" {
		t.Fatalf("stages %+v", stages)
	}
	if run := stages[0].Instructions[0]; run.Cmd != "RUN" || strings.Join(strings.Fields(run.Args), " ") != "a b c" || run.Line != 5 {
		t.Fatalf("continuation: %+v", run)
	}
	if _, err := ParseDockerfile("RUN x\n"); err == nil {
		t.Fatal("RUN before FROM accepted")
	}
	if _, err := ParseDockerfile("ARG BASE\nFROM ${BASE}\n"); err == nil {
		t.Fatal("FROM of an ARG without a default accepted")
	}
}

var (
	patchTag = regexp.MustCompile(`^\d+\.\d+\.\d+(-[a-z0-9.]+)?$`)
	argLine  = regexp.MustCompile(`^([A-Z_]+)=(\S+)$`)
)

// TestDockerfilePattern: every image compose.yaml builds is multi-stage,
// from pinned base images, compiled without cgo, and runs as nonroot on
// distroless static with no shell; its HEALTHCHECK is the one compose runs.
func TestDockerfilePattern(t *testing.T) {
	p, root := load(t, testEnv, true)
	for name, s := range p.Services {
		if s.Build == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(s.Build.Context, s.Build.Dockerfile)
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			stages, err := ParseDockerfile(string(text))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			checkStages(t, stages)
			final := stages[len(stages)-1]
			hc, ok := final.Last("HEALTHCHECK")
			if !ok {
				t.Fatal("no HEALTHCHECK in the final stage")
			}
			_, cmd, _ := strings.Cut(hc.Args, "CMD ")
			var argv []string
			if err := json.Unmarshal([]byte(cmd), &argv); err != nil {
				t.Fatalf("HEALTHCHECK must use the exec form: %s", hc.Args)
			}
			if got := []string(s.HealthCheck.Test); !slices.Equal(got, append([]string{"CMD"}, argv...)) {
				t.Errorf("compose healthcheck %q differs from the image's %q", got, argv)
			}
			if filepath.Base(path) == "Dockerfile" {
				checkServiceBinary(t, root, name, s)
			}
		})
	}
}

func checkStages(t *testing.T, stages []Stage) {
	t.Helper()
	if len(stages) < 2 {
		t.Fatalf("%d stage(s); build and runtime must be separate stages", len(stages))
	}
	for _, st := range stages {
		ref, err := reference.ParseNormalizedNamed(st.Image)
		if err != nil {
			t.Errorf("FROM %s: %v", st.Image, err)
			continue
		}
		_, digested := ref.(reference.Digested)
		tagged, isTagged := ref.(reference.Tagged)
		switch {
		case digested:
		case !isTagged || tagged.Tag() == "latest":
			t.Errorf("FROM %s is not pinned", st.Image)
		case reference.FamiliarName(ref) == "golang" && !patchTag.MatchString(tagged.Tag()):
			t.Errorf("FROM %s: pin the Go patch release (golang:1.x.y-...)", st.Image)
		}
	}
	build, final := stages[:len(stages)-1], stages[len(stages)-1]
	cgoOff := false
	for _, st := range build {
		for _, in := range st.Instructions {
			cgoOff = cgoOff || (in.Cmd == "RUN" && strings.Contains(in.Args, "CGO_ENABLED=0") &&
				(strings.Contains(in.Args, "go build") || strings.Contains(in.Args, "go install")))
		}
	}
	if !cgoOff {
		t.Error("no static build (RUN ... CGO_ENABLED=0 go build/install)")
	}
	if !strings.HasPrefix(final.Image, "gcr.io/distroless/static") || !strings.Contains(final.Image, "nonroot") {
		t.Errorf("final stage FROM %s, want gcr.io/distroless/static-...:nonroot", final.Image)
	}
	if u, ok := final.Last("USER"); !ok || !slices.Contains([]string{"nonroot", "nonroot:nonroot", "65532", "65532:65532"}, u.Args) {
		t.Errorf("final stage USER %q, want nonroot", u.Args)
	}
	for _, in := range final.Instructions {
		if in.Cmd == "RUN" {
			t.Errorf("line %d: RUN in the final stage (distroless has no shell)", in.Line)
		}
		if (in.Cmd == "ENTRYPOINT" || in.Cmd == "CMD") && !strings.HasPrefix(in.Args, "[") {
			t.Errorf("line %d: %s must use the exec form", in.Line, in.Cmd)
		}
	}
	if _, ok := final.Last("ENTRYPOINT"); !ok {
		t.Error("no ENTRYPOINT")
	}
}

// checkServiceBinary: the Go program compose builds for a service has the
// healthcheck mode, reading the listen address compose sets.
func checkServiceBinary(t *testing.T, root, name string, s types.ServiceConfig) {
	t.Helper()
	dir := s.Build.Args["SERVICE"]
	if dir == nil {
		t.Fatal("no SERVICE build argument")
	}
	main, err := os.ReadFile(filepath.Join(root, *dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	addrVar := strings.ToUpper(name) + "_ADDR"
	// service.Main (pkg/service) gives every binary the healthcheck mode,
	// probing the ADDR setting of the service's table under its prefix:
	// the variable named here.
	if want := `service.Main("` + name + `", app.Prefix, `; !strings.Contains(string(main), want) {
		t.Errorf("%s/main.go lacks %s", *dir, want)
	}
	config, err := os.ReadFile(filepath.Join(root, *dir, "internal", "app", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`const Prefix = "` + strings.ToUpper(name) + `"`, `{Key: "ADDR",`} {
		if !strings.Contains(string(config), want) {
			t.Errorf("%s/internal/app/config.go lacks %s", *dir, want)
		}
	}
	if env(s, addrVar) == "" {
		t.Errorf("compose sets no %s; the healthcheck would probe the default address", addrVar)
	}
}

// TestPinnedServersMatchTheTests: the MinIO and NATS images are built from
// the very versions the test suite runs (and deploy/nats.conf is checked on).
func TestPinnedServersMatchTheTests(t *testing.T) {
	p, root := load(t, testEnv, true)
	gomod, err := os.ReadFile(filepath.Join(root, "pkg", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	natsVersion := ""
	if m := regexp.MustCompile(`(?m)^\s*github\.com/nats-io/nats-server/v2 (v\S+)`).FindSubmatch(gomod); m != nil {
		natsVersion = string(m[1])
	}
	for _, c := range []struct{ service, file, arg, version string }{
		{"minio", "deploy/minio.Dockerfile", "MINIO_VERSION", embedded.MinIOVersion},
		{"nats", "deploy/nats.Dockerfile", "NATS_SERVER_VERSION", natsVersion},
	} {
		if c.version == "" {
			t.Fatalf("%s: version unknown", c.service)
		}
		text, err := os.ReadFile(filepath.Join(root, c.file))
		if err != nil {
			t.Fatal(err)
		}
		stages, err := ParseDockerfile(string(text))
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, in := range stages[0].Instructions {
			if m := argLine.FindStringSubmatch(in.Args); in.Cmd == "ARG" && m != nil && m[1] == c.arg {
				got = m[2]
			}
		}
		if got != c.version {
			t.Errorf("%s builds %s=%q; the tests use %q", c.file, c.arg, got, c.version)
		}
		if img := p.Services[c.service].Image; !strings.HasSuffix(img, ":"+c.version) {
			t.Errorf("%s image %q is not tagged with %s", c.service, img, c.version)
		}
	}
}

// TestDockerignore: the build context never carries .env or other local
// state into the builder.
func TestDockerignore(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(text), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	if len(patterns) == 0 || patterns[0] != "*" {
		t.Fatalf(".dockerignore must start by excluding everything (*), then list what the builds need: %q", patterns)
	}
	for _, pt := range patterns {
		if strings.HasPrefix(pt, "!") && (strings.Contains(pt, ".env") || strings.Contains(pt, ".git") || pt == "!data" || pt == "!data/") {
			t.Errorf(".dockerignore re-includes %s", pt)
		}
	}
}
