//go:build unix

package imaging

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Process stops when its context ends: a decode of the attack with no scan
// bound ends at the decoder's next read after the deadline (a read is at
// most 32 bytes, less than one of its scans) instead of walking all 400
// scans (12 s or more), and returns the context's cause.
func TestProcessStopsAtTheDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes a 40 MP image")
	}
	b := hostileJPEG(6300, 400, false)
	o := Options{MaxPixels: 40_000_000, MaxSide: 2048, JPEGQuality: 80}
	cause := errors.New("deadline of the test")
	// Past the DC scan (about 0.3 s), into the refinement scans.
	ctx, cancel := context.WithTimeoutCause(context.Background(), 1500*time.Millisecond, cause)
	defer cancel()
	start := cpuTime()
	_, err := Process(ctx, b, o)
	if !errors.Is(err, cause) {
		t.Fatalf("got %v, want the context's cause", err)
	}
	if d := cpuTime() - start; d > 3*time.Second {
		t.Fatalf("stopped after %v of CPU, deadline 1.5 s", d)
	}

	done, stop := context.WithCancelCause(context.Background())
	stop(cause)
	if _, err := Process(done, encodeJPEG(t, twoTone(300, 200)), opts); !errors.Is(err, cause) {
		t.Fatalf("ended context: %v, want its cause", err)
	}
}
