package upstream

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// pick returns the usable endpoint with the fewest requests in flight,
// preferring ready ones, skipping skip; ties go round-robin. With every
// endpoint down it returns one whose last-resort slot is free, taking the
// slot (trial); paced (the pick of a waiting request) also passes over an
// endpoint whose last last-resort request started less than waitPoll ago,
// so that waiting requests do not hammer a dead address. The request is
// counted in flight; done must follow.
func (g *Group) pick(skip *endpoint, paced bool) (e *endpoint, trial bool) {
	eps := g.snapshot()
	n := len(eps)
	if n == 0 {
		return nil, false
	}
	start := int(g.rr.Add(1) % uint64(n))
	var best *endpoint
	bestTier, bestLoad := 0, int64(0)
	for i := range n {
		e := eps[(start+i)%n]
		tier := e.state().tier()
		if e == skip || tier < 0 {
			continue
		}
		load := e.inflight.Load()
		if best == nil || tier < bestTier || tier == bestTier && load < bestLoad {
			best, bestTier, bestLoad = e, tier, load
		}
	}
	if best != nil {
		g.usableAgain()
	} else {
		now := mono(time.Now())
		for i := range n {
			e := eps[(start+i)%n]
			if e == skip || e.state() != stateDown || !e.trial.CompareAndSwap(false, true) {
				continue
			}
			if paced && now-e.trialAt.Load() < int64(waitPoll) {
				e.trial.Store(false)
				continue
			}
			e.trialAt.Store(now)
			best, trial = e, true
			break
		}
	}
	if best != nil {
		best.inflight.Add(1)
		best.m.inflight.Inc()
		best.m.requests.Inc()
	}
	return best, trial
}

// RoundTrip sends req to one endpoint of the service; req.URL supplies the
// path and query only.
//
// Sending again: a request is sent again, at once, to another endpoint
// when that cannot repeat anything: after a failed connection attempt if
// no byte of its body was read, and, for GET and HEAD, after any failure
// before the answer's headers if its body was not read or can be read
// again (GetBody). That is its one retry; with waiting on (below) and no
// other endpoint, it goes to the same one on another connection. Once a
// body has been read from, a POST, PUT, PATCH or DELETE is never sent
// again.
//
// Waiting (Options.RetryWait > 0): a request that finds no usable endpoint
// (or whose retry finds none, or cannot connect either), and that may
// still be sent (nothing of it reached a service, or a GET or HEAD as
// above), waits instead of failing: the names are resolved again at once
// (rate-limited as always), and it is sent as soon as an endpoint becomes
// usable (a new address, a probe passing, a down endpoint taking a
// last-resort request, tried at most every waitPoll). Connection attempts
// that fail meanwhile (nothing sent) keep it waiting. It waits until
// RetryWait has passed since the service became unavailable (when a
// request first found nothing usable; cleared as soon as an endpoint is
// usable or a request is answered), and never longer than RetryWait in
// all: a short gap (containers being replaced) is invisible, and a long
// outage is answered at once after its first RetryWait. A request whose
// context ends stops waiting with the context's error; StopWaiting and
// Close end waits too. A connection attempt under way when the time is up
// is not cut (the transport's dial timeout bounds it).
//
// With no usable endpoint the error wraps ErrUnavailable.
func (g *Group) RoundTrip(req *http.Request) (*http.Response, error) {
	s := &sending{g: g, req: req}
	if req.Body != nil && req.Body != http.NoBody {
		s.body = &trackedBody{rc: req.Body}
	}
	for {
		var changed <-chan struct{}
		if g.o.RetryWait > 0 {
			changed = g.changes() // before pick: no change is missed
		}
		e, trial := g.pick(s.tried, s.fails > 1 || s.w.waited())
		if e == nil {
			if err := s.noEndpoint(changed); err != nil {
				return s.fail(err)
			}
			continue
		}
		resp, err := s.send(e, trial)
		if err == nil {
			return s.answered(e, trial, resp), nil
		}
		if err := s.attemptFailed(e, err); err != nil {
			return s.fail(err)
		}
	}
}

// sending is one request on its way through RoundTrip: its body, where its
// last attempt failed and why, and its wait for an endpoint.
type sending struct {
	g    *Group
	req  *http.Request
	body *trackedBody // nil: the request has no body
	w    waiting

	tried    *endpoint // where the last attempt failed: not picked next
	failedOn string
	lastErr  error
	lastDial bool // the last attempt could not connect
	fails    int
}

// fail ends the request with err: its body is closed (the RoundTripper's
// duty on failure) and its wait recorded.
func (s *sending) fail(err error) (*http.Response, error) {
	if s.body != nil {
		s.body.finish(true)
	}
	s.g.gm.observeWait(&s.w)
	return nil, err
}

// noEndpoint decides what a request does when pick found no endpoint: nil
// to pick again (its one retry on the endpoint that just failed, or after
// waiting for one), or the error to fail with.
func (s *sending) noEndpoint(changed <-chan struct{}) error {
	g := s.g
	g.kickResolve()
	if s.tried != nil && !s.lastDial && g.o.RetryWait > 0 {
		// Its one retry, after it broke on a connection (a kept alive one
		// the replica had just closed, say), and no other endpoint: the
		// same one again, on another connection.
		s.tried = nil
		return nil
	}
	if g.o.RetryWait <= 0 {
		if s.tried != nil { // no other endpoint to retry on
			return s.lastErr
		}
		g.gm.unavailable.Inc()
		return fmt.Errorf("%w for %s", ErrUnavailable, g.name)
	}
	if err := g.wait(s.req.Context(), changed, &s.w); err != nil {
		if errors.Is(err, ErrUnavailable) {
			g.gm.unavailable.Inc()
		}
		return err
	}
	s.tried = nil
	return nil
}

// send makes one attempt on e: the request with e's address, the
// configured Host and base path.
func (s *sending) send(e *endpoint, trial bool) (*http.Response, error) {
	if s.lastErr != nil {
		s.g.gm.retries.Inc()
		s.g.o.Log.Debug("upstream request sent again", "upstream", s.g.name, "failed_on", s.failedOn, "to", e.addr, "err", s.lastErr)
	}
	out := new(http.Request)
	*out = *s.req
	u := *s.req.URL
	u.Scheme, u.Host = e.t.scheme, e.addr
	if e.t.path != "" {
		u.Path = e.t.path + u.Path
		if u.RawPath != "" {
			u.RawPath = e.t.path + u.RawPath
		}
	}
	out.URL = &u
	out.Host = e.t.hostHeader
	if s.body != nil {
		out.Body = s.body
	}
	resp, err := e.t.rt.RoundTrip(out)
	if trial {
		e.trial.Store(false)
	}
	return resp, err
}

// answered ends a request e answered: a last-resort answer revives e, and
// e counts the request in flight until the answer's body is closed.
func (s *sending) answered(e *endpoint, trial bool, resp *http.Response) *http.Response {
	if s.body != nil {
		s.body.finish(false)
	}
	if trial {
		e.revive()
	}
	s.g.usableAgain()
	s.g.gm.observeWait(&s.w)
	return e.track(resp)
}

// attemptFailed records an attempt on e that got no answer (err), and
// returns nil when the request may be sent again (its body made ready for
// it), or the error to fail with.
func (s *sending) attemptFailed(e *endpoint, err error) error {
	e.done()
	// The client going away, or its body failing (too large, stalled,
	// cut), is not the endpoint's fault and is never retried.
	if s.req.Context().Err() != nil || s.body != nil && s.body.failed() {
		return err
	}
	e.m.failures.Inc()
	dial := isDialError(err)
	if dial {
		e.markDown()
	} else {
		e.suspect()
	}
	s.g.kickResolve()
	s.fails++
	read := s.body != nil && s.body.wasRead()
	if !s.mayResend(dial, read) {
		return err
	}
	if read {
		s.body.finish(true)
		rc, gerr := s.req.GetBody()
		if gerr != nil {
			return err
		}
		s.body = &trackedBody{rc: rc}
	} else if s.body != nil {
		s.body.rearm()
	}
	s.tried, s.failedOn, s.lastErr, s.lastDial = e, e.addr, err, dial
	return nil
}

// mayResend reports whether a failed attempt may be repeated: its one retry
// when that cannot repeat anything the service may have acted on, and
// beyond it only while nothing was sent, to wait for an endpoint.
func (s *sending) mayResend(dial, read bool) bool {
	if s.fails == 1 {
		m := s.req.Method
		return dial && !read || (m == http.MethodGet || m == http.MethodHead) && (!read || s.req.GetBody != nil)
	}
	return s.g.o.RetryWait > 0 && dial && !read
}

// isDialError reports a failure to connect (nothing was sent).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
