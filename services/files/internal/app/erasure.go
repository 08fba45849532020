package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/acme/platform/pkg/userevents"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErasureConsumer is the durable consumer, shared by every replica, of the
// user deletions auth publishes (pkg/userevents).
const ErasureConsumer = "files-erasure"

// eraseDeletedUsers erases the files of every deleted user announced on
// the user stream, until ctx ends. A replica stopped during an erasure
// leaves its message unacknowledged: it is delivered again (to this or
// another replica) and the erasure, idempotent, goes on from where it
// stopped. Setting up waits for NATS as long as it takes.
func eraseDeletedUsers(ctx context.Context, log *slog.Logger, nc *nats.Conn, prefix string, svc *files.Service, ackWait time.Duration, maxDeliver int) {
	js, err := jetstream.New(nc)
	if err != nil {
		log.Error("erasure: jetstream", "err", err)
		return
	}
	var cons jetstream.Consumer
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		cons, err = userevents.SetupConsumer(sctx, js, prefix, ErasureConsumer, ackWait, maxDeliver)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("erasure consumer not set up yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		log.Error("erasure: consume", "err", err)
		return
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn("erasure: next message", "err", err)
			continue
		}
		eraseOne(ctx, log, svc, msg, ackWait)
	}
}

// eraseOne handles one deletion, telling JetStream it is in progress while
// it runs (an erasure of many files outlasts the ack wait).
func eraseOne(ctx context.Context, log *slog.Logger, svc *files.Service, msg jetstream.Msg, ackWait time.Duration) {
	d, err := userevents.ParseDeleted(msg.Data())
	if err != nil {
		log.Error("erasure: malformed event dropped", "err", err)
		_ = msg.Term()
		return
	}
	busy, done := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(max(ackWait/3, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-busy.Done():
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	n, err := svc.EraseOwner(ctx, d.UserID)
	done()
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("erasure incomplete; it is retried", "user", d.UserID, "erased", n, "err", err)
		}
		return // unacknowledged: delivered again after the back-off
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil {
		log.Warn("erasure: ack failed; the event will be handled again (idempotent)", "user", d.UserID, "err", err)
		return
	}
	log.Info("erased the files of a deleted user", "user", d.UserID, "files", n)
}
