// Package depcheck checks that the modules built into images compile from the
// dependency versions the tests compile from.
//
// The tests run in the Go workspace (go.work), where minimal version selection
// takes, for each module, the highest version any workspace module requires.
// The images build each module with GOWORK=off (Dockerfile,
// deploy/minio.Dockerfile), where only that module's go.mod (and the go.mod of
// pkg, which it replaces with a local directory) decides. The two agree only
// when every module's go.mod requires what the workspace resolves; `go work
// sync` writes that, and this package finds where it has not been done.
//
// What is compared is the set of modules that provide a package to the
// module's build and its tests, with the version each is compiled at: `go list
// -deps -test -f {{.Module}} ./...`, once with GOWORK=off and once in the
// workspace. That is exactly what differs in a binary if it differs (`go
// version -m` lists the same modules for the binary). `go list -m all` also
// names modules that only sit in the requirement graph (a dependency's own
// test requirements) and provide no package; their versions change no byte of
// any binary, and `go mod tidy` removes any requirement that would pin them,
// so they are left out. Each module's go.mod and go.sum must also be what
// `go mod tidy` leaves (`go mod tidy -diff`), so tidying never moves a version.
package depcheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Images are the modules built into images, relative to the repository root.
// pkg is built into every service's image; deploy/s3setup is the MinIO
// image's setup job and stands outside the workspace.
var Images = []string{"pkg", "gateway", "services/auth", "services/backup", "services/files", "services/logs", "deploy/s3setup"}

// Module is one module a build compiles packages from.
type Module struct {
	Path    string
	Version string // "" for a module compiled from a local directory
	Dir     string // the local directory (workspace module or replace), else ""
}

// String is the path and what Source says.
func (m Module) String() string { return m.Path + " " + m.Source() }

// Source is the version, or the directory a local module is compiled from.
func (m Module) Source() string {
	if m.Version == "" {
		return "(" + m.Dir + ")"
	}
	return m.Version
}

// Go runs the go command in dir with GOWORK set to gowork ("off", or the
// workspace file) and -mod=readonly, so a go.mod that lacks a requirement
// fails instead of being edited.
func Go(dir, gowork string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+gowork, "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		shown := slices.Clone(args)
		for i, a := range shown {
			if strings.Contains(a, "{{") {
				shown[i] = "<format>"
			}
		}
		var msg []string // without the module cache's progress lines
		for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			if !strings.HasPrefix(l, "go: downloading ") {
				msg = append(msg, l)
			}
		}
		return out, fmt.Errorf("GOWORK=%s go %s in %s: %w\n%s", gowork, strings.Join(shown, " "), dir, err, strings.Join(msg, "\n"))
	}
	return out, nil
}

// listFormat prints, for each package, the module it comes from: path,
// version, and the local directory when the module is replaced by one or is
// a workspace module (its version then is "" or the placeholder v0.0.0).
const listFormat = `{{with .Module}}{{.Path}}	{{if .Replace}}{{if not .Replace.Version}}local	{{.Replace.Dir}}{{else}}{{.Replace.Version}}	{{end}}{{else if .Main}}local	{{.Dir}}{{else}}{{.Version}}	{{end}}{{end}}`

// BuildModules lists the modules the packages matching patterns in dir, and
// their tests, compile from, with GOWORK=gowork, keyed by module path.
func BuildModules(dir, gowork string, patterns ...string) (map[string]Module, error) {
	out, err := Go(dir, gowork, append([]string{"list", "-deps", "-test", "-f", listFormat}, patterns...)...)
	if err != nil {
		return nil, err
	}
	mods := map[string]Module{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			continue // a standard library package: no module
		}
		m := Module{Path: f[0], Version: f[1]}
		if f[1] == "local" {
			m.Version, m.Dir = "", filepath.Clean(f[2])
		}
		mods[m.Path] = m
	}
	return mods, nil
}

// Compare reports every difference between what an image compiles from
// (image) and what the tests compile the same code from (tested): a module
// at another version or from another directory, a module only one of them
// uses. With partial, modules the tests do not compile are not reported (a
// module outside the workspace: its own tests run with its own go.mod).
func Compare(image, tested map[string]Module, partial bool) []string {
	var diffs []string
	for p, m := range image {
		t, ok := tested[p]
		switch {
		case !ok && !partial:
			diffs = append(diffs, fmt.Sprintf("%s: compiled into the image, not in the tested build", m))
		case ok && m != t:
			diffs = append(diffs, fmt.Sprintf("%s: the image compiles %s, the tests %s", p, m.Source(), t.Source()))
		}
	}
	if !partial {
		for p, t := range tested {
			if _, ok := image[p]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s: in the tested build, not compiled into the image", t))
			}
		}
	}
	sort.Strings(diffs)
	return diffs
}

// Untidy returns what `go mod tidy` would change in dir's go.mod and go.sum
// (GOWORK=off), or "" when nothing.
func Untidy(dir string) (string, error) {
	out, err := Go(dir, "off", "mod", "tidy", "-diff")
	if err != nil && len(out) > 0 {
		return string(out), nil // -diff exits 1 when it prints a diff
	}
	return "", err
}
