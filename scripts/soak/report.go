package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/scripts/stack"
)

// The measures of the services during a run, and the report at its end.

// sample is one reading of every service.
type sample struct {
	at         time.Duration
	rss        map[string]int64
	goroutines map[string]int
}

func takeSample(p *stack.Platform, at time.Duration) sample {
	s := sample{at: at, rss: map[string]int64{}, goroutines: map[string]int{}}
	for _, name := range stack.Services {
		if pr := p.Procs[name]; pr != nil {
			s.rss[name] = rss(pr.Pid())
		}
		s.goroutines[name] = goroutines(p.MetricsURLs[name])
	}
	return s
}

func (s sample) brief(l *load) string {
	n, errs := l.totals()
	var parts []string
	for _, name := range stack.Services {
		parts = append(parts, fmt.Sprintf("%s %dMiB/%dg", name, s.rss[name]>>20, s.goroutines[name]))
	}
	return fmt.Sprintf("requests %d errors %d late %d | %s", n, errs, l.late.Load(), strings.Join(parts, "  "))
}

// rss is the process's resident memory in use, in bytes: its resident set
// (Rss of /proc/<pid>/smaps_rollup) less the pages it gave back with
// MADV_FREE that the kernel has not taken yet (LazyFree). Those stay
// counted in the resident set until memory is short, but they are free:
// auth runs with GODEBUG=madvdontneed=0 (docs/auth.md), so its resident
// set reads near the highest its heap ever reached, and rose by a 19 MiB
// argon2id buffer at random moments of an otherwise flat run, with
// nothing more in use.
func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	var res, lazy int64 = -1, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "Rss" && k != "LazyFree") {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return -1
		}
		if k == "Rss" {
			res = kb << 10
		} else {
			lazy = kb << 10
		}
	}
	if res < 0 {
		return -1
	}
	return res - lazy
}

// goroutines reads go_goroutines from a /metrics endpoint.
func goroutines(url string) int {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f)
		}
	}
	return -1
}

// report prints the figures and decides pass or fail.
func report(out io.Writer, cfg config, l *load, samples []sample, svcOut *lineCounter) bool {
	pass := true
	fmt.Fprintf(out, "\nsoak: %s at %d requests/s (%d late ticks)\n\n", cfg.duration, cfg.rate, l.late.Load())
	fmt.Fprintf(out, "%-20s %8s %7s %9s %9s %9s\n", "operation", "requests", "errors", "p50", "p99", "max")
	l.mu.Lock()
	var names []string
	for n := range l.stats {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := l.stats[n]
		sort.Slice(s.lat, func(i, j int) bool { return s.lat[i] < s.lat[j] })
		q := func(f float64) time.Duration {
			if len(s.lat) == 0 {
				return 0
			}
			return s.lat[min(len(s.lat)-1, int(f*float64(len(s.lat))))].Round(time.Millisecond)
		}
		fmt.Fprintf(out, "%-20s %8d %7d %9s %9s %9s\n", n, s.n, s.errors, q(.5), q(.99), q(1))
		if s.errors > 0 {
			pass = false
		}
	}
	for _, f := range l.failures {
		fmt.Fprintln(out, "  unexpected:", f)
	}
	l.mu.Unlock()
	// The rate is held when at most 1 % of the ticks found every worker
	// busy (a late tick sends no request).
	if late, ticks := l.late.Load(), int64(cfg.duration.Seconds()*float64(cfg.rate)); late*100 > ticks {
		fmt.Fprintf(out, "  FAIL: %d of %d ticks found every worker busy: the rate was not held\n", late, ticks)
		pass = false
	} else if late > 0 {
		fmt.Fprintf(out, "  note: %d of %d ticks found every worker busy (at most 1 %% allowed)\n", late, ticks)
	}

	// Growth after the warm-up: the first third of the samples after it
	// against the last third (see grown).
	warm := max(cfg.duration/5, 30*time.Second)
	var after []sample
	for _, s := range samples {
		if s.at >= warm {
			after = append(after, s)
		}
	}
	fmt.Fprintf(out, "\nresident memory in use (Rss less LazyFree) and goroutines, %d samples after a warm-up of %s:\n"+
		"base = median (max) of the first third, end = median of the last third; a FAIL is an end 10 %% or more above the base and above its max\n", len(after), warm)
	fmt.Fprintf(out, "%-8s %18s %10s %8s   %16s %9s %8s   %s\n", "service", "mem base (max)", "mem end", "growth", "gor. base (max)", "gor. end", "growth", "result")
	if len(after) < 6 {
		fmt.Fprintf(out, "  too few samples after the warm-up (%d): run longer\n", len(after))
		return false
	}
	k := len(after) / 3
	series := func(ss []sample, f func(sample) float64) []float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		return v
	}
	for _, name := range stack.Services {
		mem := func(s sample) float64 { return float64(s.rss[name]) }
		gor := func(s sample) float64 { return float64(s.goroutines[name]) }
		rm := grown(series(after[:k], mem), series(after[len(after)-k:], mem))
		gm := grown(series(after[:k], gor), series(after[len(after)-k:], gor))
		res := "pass"
		if rm.bad || gm.bad {
			res, pass = "FAIL", false
		}
		fmt.Fprintf(out, "%-8s %8.1fM (%5.1fM) %9.1fM %7.1f%%   %7.1f (%6.1f) %9.1f %7.1f%%   %s\n", name,
			rm.base/(1<<20), rm.max/(1<<20), rm.end/(1<<20), rm.pct, gm.base, gm.max, gm.end, gm.pct, res)
	}
	fmt.Fprintf(out, "\nservice log lines: %d (errors %d)\n", svcOut.lines.Load(), svcOut.errors.Load())
	if pass {
		fmt.Fprintln(out, "soak: PASS")
	} else {
		fmt.Fprintln(out, "soak: FAIL")
	}
	return pass
}

// growth is one measure of one service over a run.
type growth struct {
	base, max, end, pct float64
	bad                 bool
}

// grown compares the samples of the first and the last third after the
// warm-up. The measure has grown when the end's median is at least 10 %
// above the base's median and above every base sample: a rise past the
// noise the base itself showed. At a fixed rate single readings swing
// with the requests in flight, the idle connections the pools keep from
// the last burst and the collector's timing (the files service's resident
// memory between 42 and 50 MiB, its goroutines between 42 and 71, in a
// run whose heap in use stayed at 24-25 MB); a leak keeps rising past all
// of it. A reading that failed (<= 0) is bad.
func grown(base, end []float64) growth {
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	g := growth{base: median(base), max: slices.Max(base), end: median(end)}
	if g.base <= 0 || slices.Min(base) <= 0 || slices.Min(end) <= 0 {
		g.bad = true
		return g
	}
	g.pct = (g.end - g.base) / g.base * 100
	g.bad = g.pct >= 10 && g.end > g.max
	return g
}
