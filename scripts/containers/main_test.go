//go:build containers

package containers

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// The run's shared preparation: Docker's plugins and stand-ins, the test
// images, and the source version the acme/* images are tagged with.
var (
	root    string
	base    BaseImages
	version string
)

func TestMain(m *testing.M) {
	if err := prepare(); err != nil {
		fmt.Fprintln(os.Stderr, "containers:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func prepare() error {
	var err error
	if root, err = Root(); err != nil {
		return err
	}
	t0 := time.Now()
	if base, err = PrepareDocker(root); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := BuildTestImages(ctx, root); err != nil {
		return err
	}
	if version, err = SourceVersion(root); err != nil {
		return err
	}
	fmt.Printf("containers: docker ready in %s (images tagged %s)\n", time.Since(t0).Round(time.Second), version)
	fmt.Printf("| %-58s | %s |\n|---|---|\n", "what", "figures")
	return nil
}

// newStack is a project with its images built (once per source version),
// made of compose.yaml, the test stand-ins and any further compose files.
func newStack(t *testing.T, extra map[string]string, files ...string) *Stack {
	t.Helper()
	s := New(t, root, version, extra)
	for _, f := range files {
		s.AddFile(f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	took, err := s.BuildImages(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if took > 0 {
		t.Logf("images built in %s", took.Round(time.Second))
		report("image build", took.Round(time.Second).String())
	} else {
		t.Logf("images of %s already built in this run", version)
	}
	return s
}

// report prints a line of the test's table of figures.
func report(what, value string) {
	fmt.Printf("| %-58s | %s |\n", what, value)
}
