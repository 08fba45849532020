package lazylog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestHandler: attributes and groups added with With reach the output
// of an enabled record, in order, and disabled levels write nothing.
func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	base := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	l := slog.New(New(base, slog.LevelError))
	l.With("sql", "INSERT big").WithGroup("g").With("n", 3).Info("hidden")
	if buf.Len() != 0 {
		t.Fatalf("info written below the error level: %q", buf.String())
	}
	l.With("sql", "INSERT big").WithGroup("g").With("n", 3).Error("boom", "k", "v")
	got := buf.String()
	for _, want := range []string{`msg=boom`, `sql="INSERT big"`, `g.n=3`, `g.k=v`} {
		if !strings.Contains(got, want) {
			t.Errorf("output %q lacks %q", got, want)
		}
	}
}
