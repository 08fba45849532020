package natsingest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Tail follows the log stream for live viewers: each follower gets its own
// ordered (ephemeral, unacknowledged) JetStream consumer that starts at the
// next message (DeliverNew), so a viewer sees records as they are published,
// independently of the durable writer, and costs the writer nothing.
// Messages the writer would dead-letter are skipped.
//
// Records written over HTTP (POST /log) do not pass through the stream:
// the replica that stored them announces them on core NATS subjects
// <prefix>.logtail.<app>.<type> (Announce), which every follower also
// subscribes to (only the logs service may publish there, see
// deploy/nats.conf).
type Tail struct {
	JS        jetstream.JetStream
	NC        *nats.Conn // for the HTTP-written records; nil: stream only
	Config    Config
	Validator logs.Validator
	// Inactive is how long the server keeps a follower's consumer after
	// its follower stopped (pull requests end; no delete permission is
	// needed, see deploy/nats.conf); default 5s.
	Inactive time.Duration
}

// Follower is one viewer's subscription.
type Follower struct {
	C       <-chan logs.Record // new records, in stream order
	dropped atomic.Uint64
	cc      jetstream.ConsumeContext
	sub     *nats.Subscription
}

// Dropped is how many records were skipped because the viewer fell behind.
func (f *Follower) Dropped() uint64 { return f.dropped.Load() }

// Stop ends the subscription (idempotent).
func (f *Follower) Stop() {
	f.cc.Stop()
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
	}
}

// TailSubject is where a replica announces the records it stored from
// HTTP writes, for the live tails.
func TailSubject(prefix, app, typ string) string { return prefix + ".logtail." + app + "." + typ }

// Announce tells every follower (in every replica) about records stored
// from HTTP writes; best effort, like the tail itself.
func (t *Tail) Announce(recs ...logs.Record) {
	if t == nil || t.NC == nil {
		return
	}
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err == nil {
			_ = t.NC.Publish(TailSubject(t.Config.Prefix, r.App, r.Type), b)
		}
	}
}

// Follow subscribes to new records of type typ and app ("" = any), with a
// buffer of buf records; a slower viewer loses records (counted) rather
// than slowing anything down. It returns once the consumer exists on the
// server: every record published after that is delivered.
func (t *Tail) Follow(ctx context.Context, typ, app string, buf int) (*Follower, error) {
	filter := t.Config.Prefix + ".logs." + orAny(app) + "." + orAny(typ)
	inactive := t.Inactive
	if inactive <= 0 {
		inactive = 5 * time.Second
	}
	cons, err := t.JS.OrderedConsumer(ctx, StreamName(t.Config.Prefix), jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{filter},
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		InactiveThreshold: inactive,
		// no NamePrefix: the default (a NUID) is unique per follower and
		// replica; a fixed one would make followers share one consumer.
	})
	if err != nil {
		return nil, fmt.Errorf("tail consumer: %w", err)
	}
	ch := make(chan logs.Record, max(buf, 1))
	f := &Follower{C: ch}
	if t.NC != nil {
		f.sub, err = t.NC.Subscribe(TailSubject(t.Config.Prefix, orAny(app), orAny(typ)), func(m *nats.Msg) {
			var rec logs.Record
			if json.Unmarshal(m.Data, &rec) != nil || rec.ID == "" {
				return
			}
			select {
			case ch <- rec:
			default:
				f.dropped.Add(1)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("tail subscribe: %w", err)
		}
		// The subscription is registered on the server before Follow
		// returns, like the consumer below.
		if err := t.NC.FlushTimeout(5 * time.Second); err != nil {
			_ = f.sub.Unsubscribe()
			return nil, fmt.Errorf("tail subscribe: %w", err)
		}
	}
	tag, err := Tag(ctx, t.JS, t.Config.Prefix)
	if err != nil {
		if f.sub != nil {
			_ = f.sub.Unsubscribe()
		}
		return nil, fmt.Errorf("tail: %w", err)
	}
	parser := &Ingestor{Config: t.Config, Validator: t.Validator, StreamTag: tag}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		p := parser.parse(m)
		if p.dead != nil {
			return // the writer dead-letters it; admins see it under /log/dead
		}
		rec := p.record
		rec.ID = logs.StreamRecordID(rec.Stream, rec.Seq) // the id the stored record has
		select {
		case ch <- rec:
		default:
			f.dropped.Add(1)
		}
	})
	if err != nil {
		if f.sub != nil {
			_ = f.sub.Unsubscribe()
		}
		return nil, fmt.Errorf("tail consume: %w", err)
	}
	f.cc = cc
	return f, nil
}

func orAny(s string) string {
	if s == "" {
		return "*"
	}
	return s
}
