package main

import (
	"testing"
	"time"
)

func TestCountsForKeepsTheRatios(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want scaleCounts
	}{
		{100_000, scaleCounts{files: 100_000, owners: 5_000, users: 100_000, sessions: 200_000, logs: 1_000_000}},
		{10_000, scaleCounts{files: 10_000, owners: 500, users: 10_000, sessions: 20_000, logs: 100_000}},
		{1_000, scaleCounts{files: 1_000, owners: 50, users: 1_000, sessions: 2_000, logs: 10_000}},
		{10, scaleCounts{files: 10, owners: 1, users: 10, sessions: 20, logs: 100}},
	} {
		if got := countsFor(tc.n); got != tc.want {
			t.Errorf("countsFor(%d) = %+v, want %+v", tc.n, got, tc.want)
		}
		// Every owner of a file record (record i is user i/20's) is a user.
		if c := countsFor(tc.n); (c.files-1)/filesPerOwner >= c.users {
			t.Errorf("countsFor(%d): record %d's owner is not among %d users", tc.n, c.files-1, c.users)
		}
	}
}

func TestCursorDepth(t *testing.T) {
	for logs, want := range map[int]int{1_000_000: 50_000, 100_000: 50_000, 10_000: 5_000, 0: 0} {
		if got := cursorDepth(logs); got != want {
			t.Errorf("cursorDepth(%d) = %d, want %d", logs, got, want)
		}
	}
}

func TestQuantile(t *testing.T) {
	if q := quantile(nil, 0.99); q != 0 {
		t.Fatalf("quantile of nothing = %s", q)
	}
	// 200 samples, 1..200 ms, shuffled: p50 is the 101st, p99 the 199th
	// (the second slowest), p100 the slowest.
	var ds []time.Duration
	for i := 200; i >= 1; i-- {
		ds = append(ds, time.Duration((i*7)%200+1)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{0.5: 101 * time.Millisecond, 0.99: 199 * time.Millisecond, 1: 200 * time.Millisecond, 0: time.Millisecond} {
		if got := quantile(ds, p); got != want {
			t.Errorf("quantile(p=%v) = %s, want %s", p, got, want)
		}
	}
	if got := quantile([]time.Duration{3, 1, 2}, 0.99); got != 3 {
		t.Errorf("p99 of three = %d, want the slowest", got)
	}
}
