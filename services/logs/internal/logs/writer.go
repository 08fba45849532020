package logs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"
)

// RecordID is the id of the record stored for a message id: the first 12
// bytes of its SHA-256 in hex (an ObjectID's shape), so a redelivered
// message always maps to the same record.
func RecordID(msgID string) string {
	sum := sha256.Sum256([]byte(msgID))
	return hex.EncodeToString(sum[:12])
}

// Writer groups records written one at a time (POST /log) into batches:
// each Write waits for the batch holding its record to be stored. Under
// load a batch takes whatever arrived while the previous one was written,
// so the per-record cost falls as concurrency grows; alone, a record is
// written at once.
type Writer struct {
	Store    Store
	MaxBatch int
	in       chan pending
}

type pending struct {
	ctx  context.Context
	r    Record
	done chan error
}

// ErrWriterClosed is returned by Write after Run has ended.
var ErrWriterClosed = errors.New("log writer stopped")

// NewWriter returns a writer; call Run.
func NewWriter(s Store, maxBatch int) *Writer {
	return &Writer{Store: s, MaxBatch: max(maxBatch, 1), in: make(chan pending, max(maxBatch, 1))}
}

// Write stores r (its MsgID must be set) and returns when it is stored.
func (w *Writer) Write(ctx context.Context, r Record) error {
	p := pending{ctx: ctx, r: r, done: make(chan error, 1)}
	select {
	case w.in <- p:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		// The record may still be stored; the caller reports a failure
		// it cannot be sure of, as any timed-out write would.
		return ctx.Err()
	}
}

// Run writes batches until ctx ends; records still queued then fail with
// ErrWriterClosed.
func (w *Writer) Run(ctx context.Context) {
	for {
		var batch []pending
		select {
		case <-ctx.Done():
			w.drain()
			return
		case p := <-w.in:
			batch = append(batch, p)
		}
	more:
		for len(batch) < w.MaxBatch {
			select {
			case p := <-w.in:
				batch = append(batch, p)
			default:
				break more
			}
		}
		w.write(batch)
	}
}

func (w *Writer) write(batch []pending) {
	live := batch[:0:0]
	for _, p := range batch {
		if p.ctx.Err() != nil {
			p.done <- p.ctx.Err()
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	rs := make([]Record, len(live))
	for i, p := range live {
		rs[i] = p.r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	per, err := w.Store.InsertBatch(ctx, rs)
	for i, p := range live {
		switch {
		case err != nil:
			p.done <- err
		default:
			p.done <- per[i]
		}
	}
}

func (w *Writer) drain() {
	for {
		select {
		case p := <-w.in:
			p.done <- ErrWriterClosed
		default:
			return
		}
	}
}
