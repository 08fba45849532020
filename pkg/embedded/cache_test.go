package embedded

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// GoInstall builds a pinned module's program into the cache, named as go
// install names it (the element before a /vN suffix).
func TestGoInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	for pkg, want := range map[string]string{"github.com/nats-io/nats-server/v2": "nats-server", "github.com/minio/minio": "minio", "x/examples/base": "base"} {
		if got := programName(pkg); got != want {
			t.Errorf("programName(%s) = %s, want %s", pkg, got, want)
		}
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	got, err := CachedBinary(bin, func(out string) error {
		return GoInstall(context.Background(), "github.com/nats-io/nats-server/v2", "v2.15.2", out)
	})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(got); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s: %v %v", got, fi, err)
	}
}
