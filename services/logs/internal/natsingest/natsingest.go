// Package natsingest moves log records from the JetStream stream into the
// store: a durable pull consumer shared by every replica, batches written
// with one unordered insert, acks only after the write, and poison messages
// terminated and kept as dead letters.
package natsingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/nats-io/nats.go/jetstream"
)

// Config of the stream and the consumer.
type Config struct {
	Prefix       string        // NATS_SUBJECT_PREFIX
	Consumer     string        // durable name, shared by the replicas
	BatchSize    int           // messages per fetch and per insert
	FetchWait    time.Duration // longest wait for a batch to fill
	AckWait      time.Duration // first redelivery delay; BackOff grows from it
	MaxDeliver   int           // deliveries before JetStream gives up
	Duplicates   time.Duration // JetStream dedupe window on Nats-Msg-Id
	StreamMaxAge time.Duration // how long the stream keeps messages
	Replicas     int           // stream replicas (1 on a single server)
}

// StreamName is "<PREFIX>_LOGS".
func StreamName(prefix string) string { return strings.ToUpper(prefix) + "_LOGS" }

// BackOff returns the redelivery delays: AckWait doubling, at most 5
// minutes, one fewer than MaxDeliver (JetStream requires it).
func (c Config) BackOff() []time.Duration {
	n := min(c.MaxDeliver-1, 8)
	var out []time.Duration
	d := c.AckWait
	for range n {
		out = append(out, d)
		d = min(d*2, 5*time.Minute)
	}
	return out
}

// Setup creates or updates the stream and the durable consumer.
//
// The stream is updated only when its configuration differs from ours:
// replicas starting together would otherwise update it while another
// creates the consumer, which nats-server v2.15.2 does not synchronise (its
// race detector reports fileStore.UpdateConfig against ConsumerStore).
func Setup(ctx context.Context, js jetstream.JetStream, c Config) (jetstream.Consumer, error) {
	want := jetstream.StreamConfig{
		Name:        StreamName(c.Prefix),
		Description: "log records published by services (pkg/logclient)",
		Subjects:    []string{logclient.StreamSubjects(c.Prefix)},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      c.StreamMaxAge,
		Duplicates:  c.Duplicates,
		Replicas:    max(c.Replicas, 1),
		Discard:     jetstream.DiscardOld,
	}
	var err error
	if st, gerr := js.Stream(ctx, want.Name); gerr == nil {
		if !sameStream(st.CachedInfo().Config, want) {
			_, err = js.UpdateStream(ctx, want)
		}
	} else if errors.Is(gerr, jetstream.ErrStreamNotFound) {
		// Created by another replica meanwhile: the same configuration is
		// accepted as is.
		_, err = js.CreateStream(ctx, want)
	} else {
		err = gerr
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", StreamName(c.Prefix), err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, StreamName(c.Prefix), jetstream.ConsumerConfig{
		Durable:       c.Consumer,
		Description:   "logs service writer",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		BackOff:       c.BackOff(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: logclient.StreamSubjects(c.Prefix),
		MaxAckPending: max(c.BatchSize*8, 1000),
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", c.Consumer, err)
	}
	return cons, nil
}

// Tag returns the logs.StreamTag of the log stream as it is now.
func Tag(ctx context.Context, js jetstream.JetStream, prefix string) (string, error) {
	st, err := js.Stream(ctx, StreamName(prefix))
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", StreamName(prefix), err)
	}
	info := st.CachedInfo()
	return logs.StreamTag(info.Config.Name, info.Created), nil
}

// Ingestor writes the stream's messages to the store.
type Ingestor struct {
	Consumer jetstream.Consumer
	// StreamTag is Tag of the consumer's stream: with a message's stream
	// sequence it makes the record's id and idempotency key.
	StreamTag string
	// RefreshTag, when set, reads StreamTag again (Tag). Run calls it after
	// a fetch failed (the consumer may have gone with its stream, and a
	// stream made again under the same name starts its sequences over: the
	// old tag would take its messages for redeliveries of the old ones) and
	// at least every tagCheckEvery.
	RefreshTag func(context.Context) (string, error)
	Store      logs.Store
	Validator  logs.Validator
	Config     Config
	Log        *slog.Logger
	Meter      Meter // may be nil

	// afterWrite, when set (tests), runs after a batch is written and before
	// it is acked; returning true abandons the batch unacked, as a crash
	// at that point would.
	afterWrite func(n int) bool

	tagStale   atomic.Bool // a fetch failed since the tag was read
	tagChecked time.Time
}

// tagCheckEvery bounds how long Run trusts StreamTag without reading it.
const tagCheckEvery = time.Second

// checkTag reads the stream tag again when it may have changed; false: it
// could not, and the batch must wait.
func (in *Ingestor) checkTag(ctx context.Context) bool {
	if in.RefreshTag == nil || (!in.tagStale.Load() && time.Since(in.tagChecked) < tagCheckEvery) {
		return true
	}
	in.tagStale.Store(false)
	tag, err := in.RefreshTag(ctx)
	if err != nil {
		in.tagStale.Store(true)
		in.Log.Warn("ingest: cannot read the stream tag; batch given back", "err", err)
		return false
	}
	if tag != in.StreamTag {
		in.Log.Warn("ingest: the stream was made again; new stream tag", "old", in.StreamTag, "new", tag)
		in.StreamTag = tag
	}
	in.tagChecked = time.Now()
	return true
}

// Run consumes until ctx ends. A batch already fetched is finished (written
// and acked) with a context of its own, so cancelling never leaves a
// written batch waiting for a redelivery it does not need.
func (in *Ingestor) Run(ctx context.Context) error {
	if in.StreamTag == "" {
		return errors.New("natsingest: Ingestor.StreamTag is not set")
	}
	// Fetching the next batch overlaps with writing the current one: the
	// fetcher stays one batch ahead (MaxAckPending leaves room for it).
	batches := make(chan fetched, 1)
	fctx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	go func() {
		defer close(batches)
		in.fetch(fctx, batches)
	}()
	in.tagChecked = time.Now()
	for b := range batches {
		if ctx.Err() != nil {
			nakAll(b.msgs) // fetched but not started: give them back at once
			continue
		}
		if !in.checkTag(ctx) {
			nakAll(b.msgs)
			sleep(ctx, time.Second)
			continue
		}
		if err := in.process(ctx, b); err != nil {
			stopFetch()
			for rest := range batches {
				nakAll(rest.msgs)
			}
			return err
		}
	}
	return nil
}

// fetched is a batch and when it was fetched (its ack deadline runs from
// then).
type fetched struct {
	msgs []jetstream.Msg
	at   time.Time
}

// fetch pulls batches until ctx ends.
func (in *Ingestor) fetch(ctx context.Context, out chan<- fetched) {
	fail := 0
	for ctx.Err() == nil {
		at := time.Now()
		batch, err := in.Consumer.Fetch(in.Config.BatchSize, jetstream.FetchMaxWait(in.Config.FetchWait))
		if err != nil {
			fail++
			in.tagStale.Store(true)
			in.Log.Warn("ingest: fetch failed", "err", err)
			sleep(ctx, min(time.Duration(fail)*200*time.Millisecond, 5*time.Second))
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			fail++
			in.tagStale.Store(true)
			in.Log.Warn("ingest: fetch ended with error", "err", err, "messages", len(msgs))
			if len(msgs) == 0 {
				sleep(ctx, min(time.Duration(fail)*200*time.Millisecond, 5*time.Second))
			}
		} else {
			fail = 0
		}
		if len(msgs) == 0 {
			continue
		}
		select {
		case out <- fetched{msgs: msgs, at: at}:
		case <-ctx.Done():
			nakAll(msgs)
			return
		}
	}
}

func nakAll(msgs []jetstream.Msg) {
	for _, m := range msgs {
		_ = m.Nak()
	}
}

type parsed struct {
	msg        jetstream.Msg
	record     logs.Record
	dead       *logs.DeadLetter
	deliveries uint64
	seq        uint64
	stream     string
}

// process writes one batch. Poison messages are dead-lettered then
// terminated; valid ones are inserted then acked. A store outage is retried
// in place (the messages are kept alive with InProgress, so they do not burn
// deliveries); on shutdown they are left for redelivery.
func (in *Ingestor) process(ctx context.Context, b fetched) error {
	msgs := b.msgs
	var good []parsed
	var dead []parsed
	for _, m := range msgs {
		p := in.parse(m)
		if p.dead != nil {
			dead = append(dead, p)
		} else {
			good = append(good, p)
		}
	}
	if len(dead) > 0 {
		ds := make([]logs.DeadLetter, len(dead))
		for i, p := range dead {
			ds[i] = *p.dead
		}
		if !in.retry(ctx, b, "dead letters", func(wctx context.Context) error { return in.Store.AddDeadLetters(wctx, ds) }) {
			return nil
		}
		for _, p := range dead {
			in.Log.Warn("ingest: poison message terminated", "subject", p.dead.Subject, "seq", p.dead.Sequence, "reason", p.dead.Reason)
			_ = p.msg.TermWithReason(p.dead.Reason)
		}
		in.meter().DeadLettered(len(dead))
	}
	if len(good) == 0 {
		return nil
	}
	rs := make([]logs.Record, len(good))
	for i, p := range good {
		rs[i] = p.record
	}
	var per []error
	if !in.retry(ctx, b, "records", func(wctx context.Context) error {
		var err error
		per, err = in.Store.InsertBatch(wctx, rs)
		return err
	}) {
		return nil
	}
	if in.afterWrite != nil && in.afterWrite(len(rs)) {
		return nil
	}
	var last []logs.DeadLetter
	var lastMsgs []jetstream.Msg
	stored, dups := 0, 0
	for i, p := range good {
		switch {
		case per[i] == nil:
			stored++
			_ = p.msg.Ack()
			continue
		case errors.Is(per[i], logs.ErrDuplicate): // stored by an earlier delivery
			dups++
			_ = p.msg.Ack()
			continue
		}
		// A document the server refused for a reason of its own: let
		// JetStream redeliver it later, and keep it as a dead letter when
		// this was its last delivery.
		in.Log.Error("ingest: record refused by the store", "msgId", p.record.MsgID, "deliveries", p.deliveries, "err", per[i])
		if int(p.deliveries) < in.Config.MaxDeliver {
			_ = p.msg.NakWithDelay(in.Config.AckWait)
			continue
		}
		last = append(last, in.deadLetter(p.msg, p.stream, p.seq, p.deliveries,
			fmt.Sprintf("refused by the store on all %d deliveries: %v", p.deliveries, per[i])))
		lastMsgs = append(lastMsgs, p.msg)
	}
	if len(last) > 0 && in.retry(ctx, b, "dead letters", func(wctx context.Context) error { return in.Store.AddDeadLetters(wctx, last) }) {
		for _, m := range lastMsgs {
			_ = m.Term()
		}
		in.meter().DeadLettered(len(last))
	}
	in.meter().Stored(stored)
	in.meter().Duplicates(dups)
	return nil
}

// retry runs write until it succeeds (true) or ctx ends (false, messages
// left unacked for redelivery). While a write runs, the messages are kept
// alive with progress signals; a write that finds it could not send them in
// time (the process was paused) is cancelled, because JetStream may already
// be redelivering its messages to another replica and the store must stop
// listing them (see mongostore).
func (in *Ingestor) retry(ctx context.Context, b fetched, what string, write func(context.Context) error) bool {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := in.attempt(ctx, b, write)
		if err == nil {
			return true
		}
		in.Log.Error("ingest: write failed, retrying", "what", what, "attempt", attempt, "err", err)
		if !sleep(ctx, wait) {
			return false
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// attempt runs one write with a keep-alive: every quarter of the ack wait
// the messages get a progress signal, unless three quarters of it have
// passed since the last one (the process was paused and JetStream is about
// to redeliver them): then the write is cancelled.
func (in *Ingestor) attempt(ctx context.Context, b fetched, write func(context.Context) error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	tick := max(in.Config.AckWait/4, time.Millisecond)
	late := in.Config.AckWait * 3 / 4
	last := b.at
	renew := func(now time.Time) {
		for _, m := range b.msgs {
			_ = m.InProgress()
		}
		last = now
	}
	if time.Since(last) > tick {
		renew(time.Now()) // fetched a while ago (behind a slow batch)
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				if now.Sub(last) > late {
					cancel()
					return
				}
				renew(now)
			}
		}
	}()
	err := write(wctx)
	close(done)
	return err
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sameStream compares the settings Setup chooses.
func sameStream(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention && have.Storage == want.Storage && have.MaxAge == want.MaxAge &&
		have.Duplicates == want.Duplicates && have.Replicas == want.Replicas && have.Discard == want.Discard
}
