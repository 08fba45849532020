package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The kept banner holds the administrator's password: it is the user's
// only, even where a former file was readable by others.
func TestKeepBannerIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), BannerFile)
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := keepBanner(path, "the banner\n"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "the banner\n"; got != want {
		t.Errorf("kept %q, want %q", got, want)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("mode %v, want 0600", got)
	}
}

// After a stop, `make info` still prints the banner, under a line saying
// the platform is not running.
func TestMarkStopped(t *testing.T) {
	path := filepath.Join(t.TempDir(), BannerFile)
	if err := keepBanner(path, "\n== The platform is running ==\n"); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 23, 0, 0, 0, time.UTC)
	if err := markStopped(path, at); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	first, rest, _ := strings.Cut(string(b), "\n")
	if !strings.Contains(first, "stopped at 2026-11-27T23:00:00Z") || !strings.Contains(first, "not running") {
		t.Errorf("first line %q does not say when it stopped", first)
	}
	if rest != "\n== The platform is running ==\n" {
		t.Errorf("the banner after the note is %q", rest)
	}
	if err := markStopped(filepath.Join(t.TempDir(), "none"), at); err == nil {
		t.Error("marking a banner that was never kept: no error")
	}
}

// waitQuiet waits while lines keep coming, returns soon once they stop,
// and never waits past its bound.
func TestWaitQuiet(t *testing.T) {
	q := &quietWriter{w: io.Discard}
	q.Write([]byte("first line\n"))
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		end := time.After(300 * time.Millisecond)
		for {
			select {
			case <-tick.C:
				q.Write([]byte("start-up line\n"))
			case <-end:
				close(stop)
				return
			}
		}
	}()
	start := time.Now()
	q.waitQuiet(context.Background(), 150*time.Millisecond, 5*time.Second)
	took := time.Since(start)
	<-stop
	if took < 400*time.Millisecond || took > 3*time.Second {
		t.Errorf("waitQuiet took %v with lines for 300ms and a quiet of 150ms; want about 450ms", took)
	}

	q.Write([]byte("x"))
	start = time.Now()
	q.waitQuiet(context.Background(), time.Hour, 200*time.Millisecond)
	if took := time.Since(start); took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("waitQuiet bounded by 200ms took %v", took)
	}
}
