package upstream

import (
	"context"
	"fmt"
	"time"
)

// waiting is one request's wait for a usable endpoint.
type waiting struct {
	start, end time.Time // of the whole wait; zero start: it never waited
	result     string    // how its last part ended: found, expired, canceled
}

func (w *waiting) waited() bool { return !w.start.IsZero() }

// wait holds the request until an endpoint may have become usable (nil),
// or its wait is over: ErrUnavailable when its time is up (or the group is
// closing), the context's error when the client went away.
func (g *Group) wait(ctx context.Context, changed <-chan struct{}, w *waiting) error {
	now := time.Now()
	stop := func(result string, err error) error {
		if w.waited() {
			w.end, w.result = now, result
		}
		return err
	}
	unavailable := func() error { return fmt.Errorf("%w for %s", ErrUnavailable, g.name) }
	if err := ctx.Err(); err != nil {
		return stop("canceled", err)
	}
	if g.ctx.Err() != nil {
		return stop("canceled", unavailable())
	}
	since := g.unusableSince.Load()
	if since == 0 {
		if g.unusableSince.CompareAndSwap(0, mono(now)) {
			g.o.Log.Warn("upstream service has no usable address; requests wait for one", "upstream", g.name,
				"retry_wait", g.o.RetryWait.String())
		}
		if since = g.unusableSince.Load(); since == 0 {
			since = mono(now)
		}
	}
	// RetryWait since the service became unavailable, and at most
	// RetryWait for this request.
	deadline := since + int64(g.o.RetryWait)
	if w.waited() {
		deadline = min(deadline, mono(w.start)+int64(g.o.RetryWait))
	}
	result := "expired"
	if c := g.waitCutoff.Load(); c != 0 && c < deadline {
		deadline, result = c, "canceled"
	}
	left := time.Duration(deadline - mono(now))
	if left <= 0 {
		return stop(result, unavailable())
	}
	if !w.waited() {
		w.start = now
	}
	g.kickResolve()
	t := time.NewTimer(min(waitPoll, left))
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
		now = time.Now()
		return stop("canceled", ctx.Err())
	case <-g.ctx.Done():
		now = time.Now()
		return stop("canceled", unavailable())
	}
	w.end, w.result = time.Now(), "found"
	return nil
}
