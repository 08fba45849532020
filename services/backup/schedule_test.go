package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/acme/platform/services/backup/internal/backup"
	"github.com/robfig/cron/v3"
)

// prune keeps the newest `keep` backups named acme-*, and leaves alone
// what it did not make (another name, a folder without a manifest).
func TestPruneKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"acme-20260101T030000Z", "acme-20260102T030000Z", "acme-20260103T030000Z", "mine", "acme-20260104T030000Z"} {
		os.MkdirAll(filepath.Join(dir, n), 0o700)
		os.WriteFile(filepath.Join(dir, n, backup.ManifestName), []byte("{}"), 0o600)
	}
	os.MkdirAll(filepath.Join(dir, "acme-20250101T030000Z"), 0o700) // unfinished: no manifest
	root, err := backup.OpenTarget(dir, backup.S3Login{})
	if err != nil {
		t.Fatal(err)
	}
	removed, err := prune(context.Background(), root, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"acme-20260101T030000Z", "acme-20260102T030000Z"}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"acme-20250101T030000Z", "acme-20260103T030000Z", "acme-20260104T030000Z", "mine"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}

func TestScheduleExpressions(t *testing.T) {
	for _, spec := range []string{"0 3 * * *", "@daily", "@every 6h", "*/15 * * * *"} {
		if _, err := cron.ParseStandard(spec); err != nil {
			t.Errorf("%q: %v", spec, err)
		}
	}
	if _, err := cron.ParseStandard("every night"); err == nil {
		t.Error("a malformed schedule was accepted")
	}
}
