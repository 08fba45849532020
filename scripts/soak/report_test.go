package main

import "testing"

// TestGrown: a flat but noisy measure passes, a rise past the base's noise
// fails, as does a steady climb or a failed reading; a rise of less than
// 10 % passes even above the base's max.
func TestGrown(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, end []float64
		bad       bool
	}{
		{"flat, noisy", []float64{42, 50, 44, 47, 43}, []float64{48, 49, 44, 46, 50}, false},
		{"a step past the noise", []float64{143, 143, 144, 143}, []float64{161, 161, 162, 161}, true},
		{"a steady climb", []float64{100, 104, 108, 112}, []float64{132, 136, 140, 144}, true},
		{"above the max but under 10 %", []float64{100, 101, 100, 102}, []float64{108, 109, 108, 109}, false},
		{"10 % up but within the noise", []float64{40, 60, 42, 58}, []float64{55, 56, 55, 57}, false},
		{"a failed reading", []float64{100, -1, 100}, []float64{100, 100, 100}, true},
	} {
		if g := grown(tc.base, tc.end); g.bad != tc.bad {
			t.Errorf("%s: %+v, want bad %v", tc.name, g, tc.bad)
		}
	}
}
