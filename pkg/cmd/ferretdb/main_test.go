package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// An unknown -synchronous value is refused before anything starts: SQLite
// would otherwise ignore a pragma it does not know and keep its default.
func TestSynchronousValidated(t *testing.T) {
	for _, v := range []string{"off", "NORMAL ", "extra", ""} {
		err := run(context.Background(), []string{"-dir", t.TempDir(), "-listen", "127.0.0.1:0", "-synchronous", v}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-synchronous") {
			t.Errorf("-synchronous %q: %v, want an error naming the flag", v, err)
		}
	}
}
