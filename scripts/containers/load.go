package containers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Op is one kind of request a load worker sends, again and again.
type Op struct {
	Name       string
	Idempotent bool // GET, HEAD: must never fail while a replica dies
	Do         func() (Response, error)
	// OK says whether an answer is a success; nil means 2xx.
	OK func(Response) bool
}

// Outcome is one request of a load run.
type Outcome struct {
	Op     string
	Start  time.Time
	Took   time.Duration
	Status int // 0 when the request failed without an answer
	Err    string
	Body   string // of a failed answer, cut short
	OK     bool
}

// Load runs workers, each sending its Op in a loop, until Stop.
type Load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	out    []Outcome
}

// StartLoad starts one worker per op (an op listed twice runs twice), each
// waiting pause between its requests.
func StartLoad(ops []Op, pause time.Duration) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cancel: cancel}
	for _, op := range ops {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				r, err := op.Do()
				o := Outcome{Op: op.Name, Start: t0, Took: time.Since(t0), Status: r.Status}
				switch {
				case err != nil:
					o.Err = err.Error()
				case op.OK != nil:
					o.OK = op.OK(r)
				default:
					o.OK = r.Status >= 200 && r.Status < 300
				}
				if !o.OK {
					o.Body = fmt.Sprintf("%.200s", r.Body)
				}
				l.mu.Lock()
				l.out = append(l.out, o)
				l.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		})
	}
	return l
}

// Stop ends the run and returns every outcome, in start order.
func (l *Load) Stop() []Outcome {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	sort.Slice(l.out, func(i, j int) bool { return l.out[i].Start.Before(l.out[j].Start) })
	return l.out
}

// Tally counts outcomes: all of them, the failed ones, and the failed ones
// of idempotent ops, between from and to (zero times: no bound).
type Tally struct {
	Requests, Failed int
	ByOp             map[string][2]int // op → {requests, failed}
	Failures         []Outcome
}

// Count tallies the outcomes that started in [from, to).
func Count(out []Outcome, from, to time.Time) Tally {
	t := Tally{ByOp: map[string][2]int{}}
	for _, o := range out {
		if !from.IsZero() && o.Start.Before(from) || !to.IsZero() && !o.Start.Before(to) {
			continue
		}
		c := t.ByOp[o.Op]
		c[0]++
		t.Requests++
		if !o.OK {
			c[1]++
			t.Failed++
			t.Failures = append(t.Failures, o)
		}
		t.ByOp[o.Op] = c
	}
	return t
}

// String is a one-line summary: "1732 requests, 0 failed (GET /me 800/0, ...)".
func (t Tally) String() string {
	ops := make([]string, 0, len(t.ByOp))
	for op := range t.ByOp {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	parts := make([]string, 0, len(ops))
	for _, op := range ops {
		c := t.ByOp[op]
		parts = append(parts, fmt.Sprintf("%s %d/%d", op, c[0], c[1]))
	}
	return fmt.Sprintf("%d requests, %d failed (%s)", t.Requests, t.Failed, strings.Join(parts, ", "))
}

// FailureList describes at most n failures, for a test's message.
func (t Tally) FailureList(n int) string {
	var b strings.Builder
	for i, o := range t.Failures {
		if i == n {
			fmt.Fprintf(&b, "... and %d more\n", len(t.Failures)-n)
			break
		}
		fmt.Fprintf(&b, "%s %s +%s: status %d %s %s\n", o.Start.Format("15:04:05.000"), o.Op, o.Took.Round(time.Millisecond), o.Status, o.Err, o.Body)
	}
	return b.String()
}
