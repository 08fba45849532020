package app

import (
	"testing"
	"time"
)

// Counting sessions never takes more than 1/countBudget of the time, and a
// fast count keeps the configured interval.
func TestCountPause(t *testing.T) {
	every := 30 * time.Second
	for _, took := range []time.Duration{0, 5 * time.Millisecond, 299 * time.Millisecond, 300 * time.Millisecond, 301 * time.Millisecond, 2 * time.Second, 40 * time.Second} {
		p := countPause(every, took)
		if p < every {
			t.Errorf("count took %v: pause %v shorter than the interval %v", took, p, every)
		}
		if share := float64(took) / float64(took+p); share > 1.0/countBudget {
			t.Errorf("count took %v, pause %v: counting takes %.2f%% of the time, over 1/%d", took, p, share*100, countBudget)
		}
		if took*countBudget <= every && p != every {
			t.Errorf("count took %v: pause %v, want the interval %v", took, p, every)
		}
	}
}
