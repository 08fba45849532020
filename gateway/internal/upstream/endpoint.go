package upstream

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// target is one configured base URL.
type target struct {
	scheme     string
	hostname   string // as configured: a name or an IP literal
	port       string
	path       string // base path, without a trailing slash
	hostHeader string // the configured host[:port], sent as Host
	literal    bool   // an IP address: never resolved
	rt         http.RoundTripper
}

type state int32

const (
	statePending state = iota
	stateReady
	stateNotReady
	stateDown
)

func (s state) String() string {
	switch s {
	case stateReady:
		return "ready"
	case stateNotReady:
		return "not ready"
	case stateDown:
		return "down"
	}
	return "pending"
}

// tier orders states by preference; -1 is never used.
func (s state) tier() int {
	switch s {
	case stateReady:
		return 0
	case statePending:
		return 1
	case stateNotReady:
		return 2
	}
	return -1
}

// endpoint is one address of a service.
type endpoint struct {
	g        *Group
	t        *target
	addr     string // ip:port
	inflight atomic.Int64
	st       atomic.Int32
	trial    atomic.Bool  // a last-resort request to it (down) is on its way
	trialAt  atomic.Int64 // when the last one started (mono)

	mu        sync.Mutex
	fails     int // consecutive connection failures
	nextProbe time.Time
	probing   bool
	removed   bool

	m endpointMetrics
}

func (e *endpoint) state() state { return state(e.st.Load()) }

// done ends a request begun by pick.
func (e *endpoint) done() {
	e.inflight.Add(-1)
	e.m.inflight.Dec()
}

// apply records the result of a probe (or of a request's failed dial).
func (e *endpoint) apply(out outcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.removed {
		return
	}
	now := time.Now()
	next := stateReady
	switch out {
	case outcomeReady:
		e.fails = 0
		e.nextProbe = now.Add(e.g.o.ProbeInterval)
	case outcomeNotReady:
		e.fails = 0
		next = stateNotReady
		e.nextProbe = now.Add(e.g.o.ProbeInterval)
	case outcomeDown:
		e.fails++
		next = stateDown
		e.nextProbe = now.Add(e.g.backoff(e.fails))
	}
	prev := state(e.st.Swap(int32(next)))
	if next == stateReady {
		e.m.healthy.Set(1)
	} else {
		e.m.healthy.Set(0)
	}
	if prev == next {
		return
	}
	if next != stateDown {
		e.g.usableAgain()
		e.g.broadcast()
	}
	log := e.g.o.Log.Info
	if next != stateReady {
		log = e.g.o.Log.Warn
	}
	log("upstream address "+next.String(), "upstream", e.g.name, "address", e.addr, "was", prev.String(),
		"next_probe_in", e.nextProbe.Sub(now).Round(time.Millisecond).String())
}

func (g *Group) backoff(fails int) time.Duration {
	d := g.o.BackoffMin
	for i := 1; i < fails && d < g.o.BackoffMax; i++ {
		d *= 2
	}
	return min(d, g.o.BackoffMax)
}

// markDown ejects e after a request could not connect to it. Requests
// failing together on an endpoint already down count once.
func (e *endpoint) markDown() {
	if e.state() == stateDown {
		return
	}
	e.apply(outcomeDown)
	e.g.kickProbe()
}

// revive makes a down endpoint that answered a last-resort request usable
// (pending: used while none is ready) and has it probed at once.
func (e *endpoint) revive() {
	e.mu.Lock()
	if !e.removed && e.state() == stateDown {
		e.fails = 0
		e.st.Store(int32(statePending))
		if !e.probing {
			e.nextProbe = time.Time{}
		}
		e.g.o.Log.Info("upstream address answering again", "upstream", e.g.name, "address", e.addr)
	}
	e.mu.Unlock()
	e.g.usableAgain()
	e.g.broadcast()
	e.g.kickProbe()
}

// suspect has e probed at once (its connection broke).
func (e *endpoint) suspect() {
	e.mu.Lock()
	if !e.removed && !e.probing {
		e.nextProbe = time.Time{}
	}
	e.mu.Unlock()
	e.g.kickProbe()
}
