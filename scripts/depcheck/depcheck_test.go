package depcheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestImagesCompileTestedVersions fails when a module built into an image
// would compile any dependency at another version than the tests do, or
// when tidying a go.mod would move one. The fix is in docs/conventions.md
// (#dependencies): `go get` in the workspace, then `go work sync`, then `go
// mod tidy` with GOWORK=off in each module.
func TestImagesCompileTestedVersions(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH: the dependency sets cannot be listed")
	}
	root := repoRoot(t)
	uses := workspaceModules(t, root)
	// Every module the workspace's tests compile, with its version: the
	// workspace selects one version per module for all of them.
	var patterns []string
	for _, u := range uses {
		patterns = append(patterns, "./"+u+"/...")
	}
	workspace, err := BuildModules(root, filepath.Join(root, "go.work"), patterns...)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range Images {
		t.Run(dir, func(t *testing.T) {
			abs := filepath.Join(root, dir)
			image, err := BuildModules(abs, "off", "./...")
			if err != nil {
				t.Fatalf("the image's build (its go.mod alone) fails: %v", err)
			}
			tested, partial := workspace, true
			if slices.Contains(uses, dir) {
				// The tests of this module: the same packages, in the workspace.
				if tested, err = BuildModules(abs, filepath.Join(root, "go.work"), "./..."); err != nil {
					t.Fatal(err)
				}
				partial = false
			}
			// Outside the workspace (deploy/s3setup) its own tests use its
			// own go.mod; what it shares with the workspace (pkg and the
			// modules pkg compiles from) must be at the tested versions.
			for _, d := range Compare(image, tested, partial) {
				t.Errorf("%s (run `go work sync`, then `GOWORK=off go mod tidy` in %s)", d, dir)
			}
			if len(image) < 2 {
				t.Errorf("%s compiles from %d modules: the listing is broken", dir, len(image))
			}
			diff, err := Untidy(abs)
			if err != nil {
				t.Fatal(err)
			}
			if diff != "" {
				t.Errorf("`GOWORK=off go mod tidy` would change %s:\n%s", dir, diff)
			}
		})
	}
}

// TestImagesListed fails when compose.yaml builds a service image from a
// module that Images does not name, so a new service is checked too.
func TestImagesListed(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	built := regexp.MustCompile(`SERVICE:\s*([\w./-]+)`).FindAllStringSubmatch(string(b), -1)
	if len(built) == 0 {
		t.Fatal("compose.yaml names no SERVICE build argument: the pattern is out of date")
	}
	for _, m := range built {
		if !slices.Contains(Images, m[1]) {
			t.Errorf("compose.yaml builds an image of %s, which depcheck.Images does not list", m[1])
		}
	}
	for _, dir := range Images {
		if _, err := os.Stat(filepath.Join(root, dir, "go.mod")); err != nil {
			t.Errorf("depcheck.Images names %s: %v", dir, err)
		}
	}
}

// TestCompare checks that the comparison reports what it must: another
// version, another directory, a module on one side only (unless partial).
func TestCompare(t *testing.T) {
	a := Module{Path: "example.com/a", Version: "v1.2.0"}
	pkg := Module{Path: "example.com/pkg", Dir: "/src/pkg"}
	image := map[string]Module{a.Path: a, pkg.Path: pkg}
	for name, tc := range map[string]struct {
		tested  map[string]Module
		partial bool
		want    []string // substrings, one per expected difference
	}{
		"same":           {tested: map[string]Module{a.Path: a, pkg.Path: pkg}},
		"otherVersion":   {tested: map[string]Module{a.Path: {Path: a.Path, Version: "v1.3.0"}, pkg.Path: pkg}, want: []string{"example.com/a: the image compiles v1.2.0, the tests v1.3.0"}},
		"otherDir":       {tested: map[string]Module{a.Path: a, pkg.Path: {Path: pkg.Path, Dir: "/elsewhere"}}, want: []string{"(/elsewhere)"}},
		"imageOnly":      {tested: map[string]Module{pkg.Path: pkg}, want: []string{"not in the tested build"}},
		"testedOnly":     {tested: map[string]Module{a.Path: a, pkg.Path: pkg, "example.com/b": {Path: "example.com/b", Version: "v0.1.0"}}, want: []string{"not compiled into the image"}},
		"partialSubset":  {tested: map[string]Module{pkg.Path: pkg, "example.com/b": {Path: "example.com/b", Version: "v0.1.0"}}, partial: true},
		"partialVersion": {tested: map[string]Module{a.Path: {Path: a.Path, Version: "v1.1.0"}}, partial: true, want: []string{"v1.1.0"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := Compare(image, tc.tested, tc.partial)
			if len(got) != len(tc.want) {
				t.Fatalf("Compare = %q, want %d difference(s) %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("difference %q does not name %q", got[i], w)
				}
			}
		})
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	return root
}

// workspaceModules lists go.work's use directives, relative to root.
func workspaceModules(t *testing.T, root string) []string {
	t.Helper()
	out, err := Go(root, filepath.Join(root, "go.work"), "work", "edit", "-json")
	if err != nil {
		t.Fatal(err)
	}
	var w struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &w); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, u := range w.Use {
		dirs = append(dirs, filepath.ToSlash(filepath.Clean(u.DiskPath)))
	}
	if len(dirs) == 0 {
		t.Fatal("go.work uses no module")
	}
	return dirs
}
