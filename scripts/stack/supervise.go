package stack

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Backoff is how Supervise spaces the restarts of one process: the first
// after Initial, each next one twice as long after the last, up to Max;
// a process that stayed up for Reset starts over at Initial.
type Backoff struct {
	Initial, Max, Reset time.Duration
}

// DefaultBackoff is `make run`'s: 1 s doubling to 30 s, reset after a
// minute up (compose's `restart: unless-stopped` also waits longer after
// each quick failure).
var DefaultBackoff = Backoff{Initial: time.Second, Max: 30 * time.Second, Reset: time.Minute}

// next is the wait before the restart that follows one after delay.
func (b Backoff) next(delay time.Duration) time.Duration {
	if delay <= 0 {
		return b.Initial
	}
	return min(2*delay, b.Max)
}

// Proc is the current process of the service name (the first replica),
// safe to call while Supervise or Restart replace it.
func (p *Platform) Proc(name string) *Proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Procs[name]
}

func (p *Platform) isStopping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping
}

// Supervise restarts every process of the platform that exits (a crash, a
// kill -9, a panic that got through) in its place, with the same binary,
// address and environment, waiting b between attempts, and prints a line
// to out for each exit and restart, until ctx ends or Stop is called. It
// returns at once; the returned function waits until the supervision has
// ended (after ctx ended or Stop). A process that cannot be started again
// (it dies during start-up) is retried after the next, longer wait.
func (p *Platform) Supervise(ctx context.Context, b Backoff, out io.Writer) (wait func()) {
	if b.Initial <= 0 {
		b = DefaultBackoff
	}
	p.mu.Lock()
	procs := append([]*Proc{}, p.order...)
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, proc := range procs {
		wg.Go(func() { p.supervise(ctx, proc, b, out) })
	}
	return wg.Wait
}

func (p *Platform) supervise(ctx context.Context, proc *Proc, b Backoff, out io.Writer) {
	up := time.Now()
	var delay time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-proc.Exited():
		}
		if ctx.Err() != nil || p.isStopping() {
			return
		}
		lasted := time.Since(up)
		if lasted >= b.Reset {
			delay = 0
		}
		delay = b.next(delay)
		wait := time.After(delay)
		if held := p.heldUntil(); held != nil {
			fmt.Fprintf(out, "supervisor: %s stopped and held\n", proc.Name)
			select {
			case <-ctx.Done():
				return
			case <-held:
			}
			delay, wait = 0, time.After(0)
		} else {
			fmt.Fprintf(out, "supervisor: %s exited (%v) after %s; restarting in %s\n",
				proc.Name, proc.err, lasted.Round(time.Millisecond), delay)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-wait:
			}
			if p.isStopping() {
				return
			}
			np, err := p.Restart(proc)
			if err == nil {
				if p.isStopping() || ctx.Err() != nil { // Stop began meanwhile
					np.Stop(5 * time.Second)
					return
				}
				fmt.Fprintf(out, "supervisor: %s restarted (pid %d) on %s\n", np.Name, np.Pid(), np.Addr)
				proc, up = np, time.Now()
				break
			}
			delay = b.next(delay)
			wait = time.After(delay)
			fmt.Fprintf(out, "supervisor: %s did not start again: %v; next attempt in %s\n", proc.Name, err, delay)
		}
	}
}

// SetEnv sets the variable key of every process of the service name to
// value for its next start (Restart, or Supervise after it exits); the
// running processes keep theirs.
func (p *Platform) SetEnv(name, key, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for proc, st := range p.starts {
		if st.name != name {
			continue
		}
		env := slices.DeleteFunc(slices.Clone(st.env), func(e string) bool { return strings.HasPrefix(e, key+"=") })
		st.env = append(env, key+"="+value)
		p.starts[proc] = st
	}
}

// Hold stops every process of the platform (the gateways first) and keeps
// them stopped until Release: Supervise starts none of them meanwhile. A
// restore (`make restore`) writes the data while no service reads or
// writes it.
func (p *Platform) Hold(grace time.Duration) {
	p.mu.Lock()
	if p.released == nil {
		p.released = make(chan struct{})
	}
	order := append([]*Proc{}, p.order...)
	p.mu.Unlock()
	for i := len(order) - 1; i >= 0; i-- {
		order[i].Stop(grace)
	}
}

// Release lets Supervise start the processes Hold stopped, at once.
func (p *Platform) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released != nil {
		close(p.released)
		p.released = nil
	}
}

// Held tells whether Hold stopped the processes and Release has not
// started them again.
func (p *Platform) Held() bool { return p.heldUntil() != nil }

// heldUntil is the channel Release closes, or nil when not held.
func (p *Platform) heldUntil() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.released
}
