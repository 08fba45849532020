package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Revocations applies auth's revocation messages to a Resolver and fences
// the Resolver's cache, so that a session ended through any gateway replica
// is refused by every replica from the next request on, not within the
// cache TTL.
//
// Why this is enough, on one NATS server: auth publishes a revocation and
// flushes it (the server has processed it) before it answers the request
// that ended the session. Before serving a cached identity, the gateway
// makes a round trip to the same server (PING/PONG, nats.Conn.Flush) that
// started after the request arrived. The server writes to a connection in
// order, so the revocation message reached this gateway before the PONG;
// the client library puts it on our channel in its read loop before it
// handles the PONG, and Sync then waits until every message on the channel
// has been applied. A request that arrives after a sign-out answered
// therefore never sees the signed-out session in the cache. Concurrent
// requests share round trips (a request joins the next one to start, and a
// new one starts at once unless maxRounds are in flight), so the cost is
// about one NATS round trip of latency (tens of microseconds on a LAN), not
// one per request.
//
// When the round trip fails (NATS away) the resolver asks auth for every
// request, which is also exact. After a reconnect or a dropped message
// (slow consumer) the whole cache is cleared, since revocations may have
// been missed.
type Revocations struct {
	nc  *nats.Conn
	sub *nats.Subscription
	ch  chan *nats.Msg
	r   *Resolver
	log *slog.Logger
	// timeout bounds one round trip; a slower server makes the request ask
	// auth instead.
	timeout time.Duration

	appliedMu sync.Mutex
	applied   int64 // messages taken off ch and applied
	appliedC  *sync.Cond

	mu       sync.Mutex
	open     *round // the round requests join; its PING is not sent yet
	inflight int    // rounds running (at most maxRounds)
	// what Sync saw last: reconnects and dropped messages clear the cache.
	seenMu     sync.Mutex
	reconnects uint64
	dropped    int
	stop, done chan struct{}
	// applyDelay, when set (tests), slows applying each message, so that
	// applying lags behind delivery as it can under load.
	applyDelay time.Duration
}

// NewRevocations subscribes to subject on nc and applies every revocation
// to r. Call Close when done; Sync is the fence (see Resolver.SetFence).
func NewRevocations(nc *nats.Conn, subject string, r *Resolver, log *slog.Logger) (*Revocations, error) {
	rv := &Revocations{nc: nc, r: r, log: log, timeout: 2 * time.Second,
		ch: make(chan *nats.Msg, 1<<16), reconnects: nc.Stats().Reconnects,
		stop: make(chan struct{}), done: make(chan struct{})}
	rv.appliedC = sync.NewCond(&rv.appliedMu)
	sub, err := nc.ChanSubscribe(subject, rv.ch)
	if err != nil {
		return nil, err
	}
	rv.sub = sub
	go rv.applyLoop()
	return rv, nil
}

func (rv *Revocations) applyLoop() {
	defer close(rv.done)
	for {
		var m *nats.Msg
		select {
		case m = <-rv.ch:
		case <-rv.stop:
			return
		}
		if rv.applyDelay > 0 {
			time.Sleep(rv.applyDelay)
		}
		var rev Revocation
		if err := json.Unmarshal(m.Data, &rev); err != nil {
			rv.log.Warn("bad revocation message", "err", err)
		} else {
			rv.r.Apply(rev)
		}
		rv.appliedMu.Lock()
		rv.applied++
		rv.appliedC.Broadcast()
		rv.appliedMu.Unlock()
	}
}

// Close unsubscribes and stops applying (the channel is left open: the
// client library may still hold a message for it).
func (rv *Revocations) Close() {
	_ = rv.sub.Unsubscribe()
	close(rv.stop)
	<-rv.done
}

// Sync returns nil once every revocation published (and flushed) before
// the call has been applied, or an error when that cannot be known (NATS
// unreachable): then cached answers must not be trusted.
func (rv *Revocations) Sync(ctx context.Context) error {
	w := make(chan error, 1)
	rv.mu.Lock()
	if rv.open == nil {
		rv.open = &round{}
		if rv.inflight < maxRounds {
			rv.inflight++
			rv.open.running = true
			go rv.run(rv.open)
		}
	}
	rv.open.waiting = append(rv.open.waiting, w)
	rv.mu.Unlock()
	select {
	case err := <-w:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A round is one round trip and the requests it serves: those that joined
// before its PING was sent.
type round struct {
	waiting []chan error
	running bool
}

// maxRounds bounds the round trips in flight at once. Rounds overlap: a
// request that arrives while one is in flight starts the next at once
// rather than waiting for it to end, so a request waits about one round
// trip, not one and a half.
const maxRounds = 4

// run runs round r, then the open round if no other goroutine has taken it.
func (rv *Revocations) run(r *round) {
	for r != nil {
		rv.mu.Lock()
		if rv.open == r {
			rv.open = nil // closed: later requests need a later PING
		}
		ws := r.waiting
		rv.mu.Unlock()
		err := rv.roundTrip()
		for _, w := range ws {
			w <- err
		}
		rv.mu.Lock()
		r = nil
		if rv.open != nil && !rv.open.running {
			r = rv.open
			r.running = true
		} else {
			rv.inflight--
		}
		rv.mu.Unlock()
	}
}

var errNotConnected = errors.New("revocations: NATS not connected")

func (rv *Revocations) roundTrip() error {
	if !rv.nc.IsConnected() {
		return errNotConnected
	}
	if err := rv.nc.FlushTimeout(rv.timeout); err != nil {
		return err
	}
	// Everything the server sent before the PONG is on rv.ch (or was
	// dropped, counted below); wait until it has been applied.
	delivered, err := rv.sub.Delivered()
	if err != nil {
		return err
	}
	deadline := time.AfterFunc(rv.timeout, func() {
		rv.appliedMu.Lock()
		rv.appliedC.Broadcast()
		rv.appliedMu.Unlock()
	})
	start := time.Now()
	rv.appliedMu.Lock()
	for rv.applied < delivered && time.Since(start) < rv.timeout {
		rv.appliedC.Wait()
	}
	ok := rv.applied >= delivered
	rv.appliedMu.Unlock()
	deadline.Stop()
	if !ok {
		return errors.New("revocations: applying took too long")
	}
	// Messages missed while disconnected, or dropped by a full channel:
	// forget everything cached.
	reconnects := rv.nc.Stats().Reconnects
	dropped, _ := rv.sub.Dropped()
	rv.seenMu.Lock()
	defer rv.seenMu.Unlock()
	if reconnects != rv.reconnects || dropped != rv.dropped {
		rv.log.Warn("revocations may have been missed; session cache cleared",
			"reconnects", reconnects, "dropped", dropped)
		rv.r.Clear()
		rv.reconnects, rv.dropped = reconnects, dropped
	}
	return nil
}
