package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/acme/platform/scripts/composecheck"
	"github.com/compose-spec/compose-go/v2/dotenv"
)

// TestSwarmSecrets: swarmSecrets names every secret of compose.yaml with
// the variable compose.yaml reads it from, and nothing else.
func TestSwarmSecrets(t *testing.T) {
	root, err := composecheck.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := composecheck.LoadProject(ctx, root, generate(t), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Secrets) != len(swarmSecrets) {
		t.Errorf("compose.yaml has %d secrets, swarmSecrets %d", len(p.Secrets), len(swarmSecrets))
	}
	for name, s := range p.Secrets {
		if got := swarmSecrets[name]; got != s.Environment {
			t.Errorf("secret %s: swarmSecrets says %q, compose.yaml reads %q", name, got, s.Environment)
		}
	}
}

// TestSecretFiles: -secrets-dir writes each secret's value as compose
// hands it over (no newline), private, and never replaces a file; -from
// writes the same files from an existing .env.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	envPath := filepath.Join(dir, ".env")
	secrets := filepath.Join(dir, "secrets")
	if err := run(envPath, "admin@acme.local", secrets); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(envPath)
	if err != nil {
		t.Fatal(err)
	}
	env, err := dotenv.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	check := func(dir string) {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
			fi, _ := e.Info()
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want 0600", e.Name(), fi.Mode().Perm())
			}
			got, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			if want := env[swarmSecrets[e.Name()]]; string(got) != want || want == "" {
				t.Errorf("%s holds %q, want .env's %s %q", e.Name(), got, swarmSecrets[e.Name()], want)
			}
		}
		if len(names) != len(swarmSecrets) {
			sort.Strings(names)
			t.Errorf("files %v, want one per secret (%d)", names, len(swarmSecrets))
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("directory %s: %v %v, want mode 0700", dir, fi.Mode().Perm(), err)
		}
	}
	check(secrets)
	other := filepath.Join(dir, "from")
	if err := secretFilesFrom(envPath, other); err != nil {
		t.Fatal(err)
	}
	check(other)
	if err := secretFilesFrom(envPath, other); err == nil {
		t.Error("existing secret files were replaced")
	}
	// A refused secrets directory leaves no .env behind.
	if err := run(filepath.Join(dir, ".env2"), "admin@acme.local", other); err == nil {
		t.Error("-secrets-dir over existing files succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, ".env2")); err == nil {
		t.Error("a .env was left although its secret files were refused")
	}
}
