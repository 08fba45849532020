// Package natsfence applies invalidation messages from a core NATS subject
// to a local cache and fences that cache: Sync returns nil only once every
// message published (and flushed) on the subject before Sync was called has
// been applied. A cache that calls Sync before serving an entry therefore
// never serves an entry that a writer had invalidated before the request
// arrived, whichever replica the writer was.
//
// Why this is enough, on one NATS server: the writer publishes the
// invalidation and flushes it (the server has processed it) before it
// answers the request that made the change. Sync makes a round trip to the
// same server (PING/PONG, nats.Conn.Flush) that starts after Sync was
// called. The server writes to a connection in order, so the invalidation
// reached this process before the PONG; the client library puts it on our
// channel in its read loop before it handles the PONG, and Sync then waits
// until every message on the channel has been applied. Concurrent callers
// share round trips (a caller joins the next one to start, and a new one
// starts at once unless MaxRounds are in flight), so the cost is about one
// NATS round trip of latency, not one per request.
//
// When the round trip fails (NATS away) Sync returns an error and the
// caller must not trust its cache. After a reconnect or a dropped message
// (slow consumer) the reset callback runs before Sync succeeds again, since
// messages may have been missed.
//
// Used by the gateway's session cache (gateway/internal/sessions) and auth's
// user cache (services/auth/internal/usercache), both on
// <prefix>.auth.revoked.
package natsfence

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// MaxRounds bounds the round trips in flight at once. Rounds overlap: a
// caller that arrives while one is in flight starts the next at once rather
// than waiting for it to end, so a caller waits about one round trip, not
// one and a half.
const MaxRounds = 4

// ErrNotConnected is Sync's answer while NATS is not connected.
var ErrNotConnected = errors.New("natsfence: NATS not connected")

// Fence subscribes to one subject and fences a cache (see the package
// documentation).
type Fence struct {
	nc    *nats.Conn
	sub   *nats.Subscription
	ch    chan *nats.Msg
	apply func([]byte)
	reset func()
	log   *slog.Logger
	// timeout bounds one round trip; a slower server makes Sync fail.
	timeout time.Duration

	appliedMu sync.Mutex
	applied   int64 // messages taken off ch and applied
	appliedC  *sync.Cond

	mu       sync.Mutex
	open     *round // the round callers join; its PING is not sent yet
	inflight int    // rounds running (at most MaxRounds)
	// what Sync saw last: reconnects and dropped messages reset the cache.
	seenMu     sync.Mutex
	reconnects uint64
	dropped    int
	stop, done chan struct{}
	// applyDelay, when set (tests), slows applying each message.
	applyDelay time.Duration
}

// New subscribes to subject on nc and hands every message's data to apply,
// one at a time, in order. reset is called when messages may have been
// missed (after a reconnect or a dropped message); it must forget
// everything cached. Call Close when done.
func New(nc *nats.Conn, subject string, apply func(data []byte), reset func(), log *slog.Logger) (*Fence, error) {
	f := &Fence{nc: nc, apply: apply, reset: reset, log: log, timeout: 2 * time.Second,
		ch: make(chan *nats.Msg, 1<<16), reconnects: nc.Stats().Reconnects,
		stop: make(chan struct{}), done: make(chan struct{})}
	f.appliedC = sync.NewCond(&f.appliedMu)
	sub, err := nc.ChanSubscribe(subject, f.ch)
	if err != nil {
		return nil, err
	}
	f.sub = sub
	go f.applyLoop()
	return f, nil
}

// SetApplyDelay slows applying each message by d (tests: applying lagging
// behind delivery, as it can under load). Call it before messages arrive.
func (f *Fence) SetApplyDelay(d time.Duration) { f.applyDelay = d }

// Applied returns how many messages have been applied so far.
func (f *Fence) Applied() int64 {
	f.appliedMu.Lock()
	defer f.appliedMu.Unlock()
	return f.applied
}

// InFlight returns how many round trips are running.
func (f *Fence) InFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight
}

func (f *Fence) applyLoop() {
	defer close(f.done)
	for {
		var m *nats.Msg
		select {
		case m = <-f.ch:
		case <-f.stop:
			return
		}
		if f.applyDelay > 0 {
			time.Sleep(f.applyDelay)
		}
		f.apply(m.Data)
		f.appliedMu.Lock()
		f.applied++
		f.appliedC.Broadcast()
		f.appliedMu.Unlock()
	}
}

// Close unsubscribes and stops applying (the channel is left open: the
// client library may still hold a message for it).
func (f *Fence) Close() {
	_ = f.sub.Unsubscribe()
	close(f.stop)
	<-f.done
}

// Sync returns nil once every message published (and flushed) before the
// call has been applied, or an error when that cannot be known (NATS
// unreachable, or ctx ended): then cached entries must not be trusted.
func (f *Fence) Sync(ctx context.Context) error {
	o, _ := ctx.Value(onceKey{}).(*once)
	if o.passed(f) {
		return nil
	}
	err := f.sync(ctx)
	if err == nil {
		o.pass(f)
	}
	return err
}

type onceKey struct{}

// once records the fences that passed during one request (Once).
type once struct {
	mu   sync.Mutex
	done map[*Fence]bool
}

// Once returns a context under which a fence that passed once passes at
// once afterwards: a request that reads several cached values pays one
// round trip, not one per read. That keeps Sync's promise: the first
// round trip began after the request arrived, so every message published
// before the request was applied before any later read of it. Use it per
// request, never for a longer-lived context.
func Once(ctx context.Context) context.Context {
	return context.WithValue(ctx, onceKey{}, &once{})
}

func (o *once) passed(f *Fence) bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done[f]
}

func (o *once) pass(f *Fence) {
	if o == nil {
		return
	}
	o.mu.Lock()
	if o.done == nil {
		o.done = map[*Fence]bool{}
	}
	o.done[f] = true
	o.mu.Unlock()
}

func (f *Fence) sync(ctx context.Context) error {
	w := make(chan error, 1)
	f.mu.Lock()
	if f.open == nil {
		f.open = &round{}
		if f.inflight < MaxRounds {
			f.inflight++
			f.open.running = true
			go f.run(f.open)
		}
	}
	f.open.waiting = append(f.open.waiting, w)
	f.mu.Unlock()
	select {
	case err := <-w:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A round is one round trip and the callers it serves: those that joined
// before its PING was sent.
type round struct {
	waiting []chan error
	running bool
}

// run runs round r, then the open round if no other goroutine has taken it.
func (f *Fence) run(r *round) {
	for r != nil {
		f.mu.Lock()
		if f.open == r {
			f.open = nil // closed: later callers need a later PING
		}
		ws := r.waiting
		f.mu.Unlock()
		err := f.roundTrip()
		for _, w := range ws {
			w <- err
		}
		f.mu.Lock()
		r = nil
		if f.open != nil && !f.open.running {
			r = f.open
			r.running = true
		} else {
			f.inflight--
		}
		f.mu.Unlock()
	}
}

func (f *Fence) roundTrip() error {
	if !f.nc.IsConnected() {
		return ErrNotConnected
	}
	if err := f.nc.FlushTimeout(f.timeout); err != nil {
		return err
	}
	// Everything the server sent before the PONG is on f.ch (or was
	// dropped, counted below); wait until it has been applied.
	delivered, err := f.sub.Delivered()
	if err != nil {
		return err
	}
	deadline := time.AfterFunc(f.timeout, func() {
		f.appliedMu.Lock()
		f.appliedC.Broadcast()
		f.appliedMu.Unlock()
	})
	start := time.Now()
	f.appliedMu.Lock()
	for f.applied < delivered && time.Since(start) < f.timeout {
		f.appliedC.Wait()
	}
	ok := f.applied >= delivered
	f.appliedMu.Unlock()
	deadline.Stop()
	if !ok {
		return errors.New("natsfence: applying took too long")
	}
	// Messages missed while disconnected, or dropped by a full channel:
	// forget everything cached.
	reconnects := f.nc.Stats().Reconnects
	dropped, _ := f.sub.Dropped()
	f.seenMu.Lock()
	defer f.seenMu.Unlock()
	if reconnects != f.reconnects || dropped != f.dropped {
		f.log.Warn("invalidations may have been missed; cache cleared", "subject", f.sub.Subject,
			"reconnects", reconnects, "dropped", dropped)
		f.reset()
		f.reconnects, f.dropped = reconnects, dropped
	}
	return nil
}

// FlushTimeout bounds Publish's wait for the NATS server's confirmation.
const FlushTimeout = 2 * time.Second

// Publish sends an invalidation on subject and waits until the NATS server
// has processed it (a flush), so that a Sync begun on any replica after
// Publish returns applies it. Call it before answering the request that
// made the change. While NATS is away the message waits in the client's
// reconnect buffer and Publish returns an error at once rather than hold
// the request up: the caller logs it, and caches elsewhere fall back on
// their expiry.
func Publish(nc *nats.Conn, subject string, data []byte) error {
	err := nc.Publish(subject, data)
	if err == nil && !nc.IsConnected() {
		err = nats.ErrConnectionReconnecting
	}
	if err == nil {
		err = nc.FlushTimeout(FlushTimeout)
	}
	return err
}
