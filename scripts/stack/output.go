package stack

import (
	"bytes"
	"strings"
	"sync"
)

// Output collects the output of a platform's processes (Options.Out),
// safe for their concurrent writes, for tests to search and print.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String is everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// Tail is the last n lines written.
func (o *Output) Tail(n int) string {
	lines := strings.Split(o.String(), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
