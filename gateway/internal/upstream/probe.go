package upstream

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

type outcome int

const (
	outcomeReady outcome = iota
	outcomeNotReady
	outcomeDown
)

func (g *Group) probeLoop() {
	defer g.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-timer.C:
		case <-g.probeKick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		now := time.Now()
		wait := g.o.ProbeInterval
		for _, e := range g.snapshot() {
			e.mu.Lock()
			due := !e.probing && !now.Before(e.nextProbe)
			if due {
				e.probing = true
			} else if !e.probing {
				wait = min(wait, e.nextProbe.Sub(now))
			}
			e.mu.Unlock()
			if due {
				g.wg.Add(1)
				go func() {
					defer g.wg.Done()
					ctx, cancel := context.WithTimeout(g.ctx, g.o.ProbeTimeout)
					out := g.check(ctx, e)
					cancel()
					e.mu.Lock()
					e.probing = false
					e.mu.Unlock()
					if g.ctx.Err() == nil {
						e.apply(out)
						g.kickProbe() // schedule its next probe
					}
				}()
			}
		}
		timer.Reset(max(wait, time.Millisecond))
	}
}

// check sends one readiness probe to e.
func (g *Group) check(ctx context.Context, e *endpoint) outcome {
	u := url.URL{Scheme: e.t.scheme, Host: e.addr, Path: e.t.path + g.o.ProbePath}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return outcomeNotReady
	}
	req.Host = e.t.hostHeader
	req.Header.Set("User-Agent", "acme-gateway-probe")
	resp, err := e.t.rt.RoundTrip(req)
	if err != nil {
		if isDialError(err) {
			return outcomeDown
		}
		return outcomeNotReady
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return outcomeNotReady
	}
	return outcomeReady
}

func (g *Group) kickProbe() {
	select {
	case g.probeKick <- struct{}{}:
	default:
	}
}

// Check describes one endpoint's answer to a probe made by CheckNow.
type Check struct {
	Address string
	Result  string // ok, not ready, unreachable
}

// CheckNow probes every current endpoint at once (bounded by ctx), records
// the results as the background probes would, and returns them by address.
func (g *Group) CheckNow(ctx context.Context) []Check {
	eps := g.snapshot()
	out := make([]Check, len(eps))
	var wg sync.WaitGroup
	for i, e := range eps {
		wg.Go(func() {
			res := g.check(ctx, e)
			if ctx.Err() == nil {
				e.apply(res)
			}
			out[i] = Check{Address: e.addr, Result: [...]string{"ok", "not ready", "unreachable"}[res]}
		})
	}
	wg.Wait()
	return out
}
