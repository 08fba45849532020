package containers

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The variables compose would substitute, and the .env's keys, are taken
// out of the caller's environment; the others stay.
func TestHermeticEnv(t *testing.T) {
	f := filepath.Join(t.TempDir(), "compose.yaml")
	if err := os.WriteFile(f, []byte("x: ${ADMIN_EMAIL:?set it}\ny: ${GATEWAY_PORT:-8080}\nz: $MONGO_URL\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env, err := HermeticEnv([]string{"PATH=/bin", "ADMIN_EMAIL=a@b", "GATEWAY_PORT=1", "MONGO_URL=m", "ACME_X=1", "HOME=/root"}, []string{"ACME_X"}, f)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin", "HOME=/root"}; !slices.Equal(env, want) {
		t.Fatalf("env %v, want %v", env, want)
	}
	// The repository's own compose files name what the tests must control.
	root := filepath.Join("..", "..")
	env, err = HermeticEnv([]string{"ADMIN_PASSWORD=x", "NATS_AUTH_PASSWORD=y", "PATH=/bin"}, nil,
		filepath.Join(root, "compose.yaml"), filepath.Join(root, "compose.ha.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(env, []string{"PATH=/bin"}) {
		t.Fatalf("compose.yaml's variables kept: %v", env)
	}
}
