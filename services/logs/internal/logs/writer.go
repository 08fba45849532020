package logs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"time"
)

// Record ids are 12 bytes shown as 24 hex digits (an ObjectID's shape).
// The first byte says what the rest is:
//
//	0x01 | stream tag (5 bytes) | stream sequence (6 bytes): from the stream
//	0x02 | write batch (7 bytes) | index in the batch (4 bytes): from HTTP
//
// A stream record's id follows from its message alone, so a redelivery has
// the id of the first delivery and the live tail shows the id that will be
// stored.
const (
	IDKindStream = 0x01
	IDKindBatch  = 0x02
)

// StreamTag names one incarnation of a stream (10 hex digits): its name and
// creation time, so that a stream deleted and created again, whose sequences
// start over, never shares record ids or idempotency keys with the old one.
func StreamTag(name string, created time.Time) string {
	sum := sha256.Sum256([]byte(name + "|" + strconv.FormatInt(created.UnixNano(), 10)))
	return hex.EncodeToString(sum[:5])
}

// MaxStreamSeq is the largest sequence a record id holds (48 bits).
const MaxStreamSeq = 1<<48 - 1

// StreamRecordID is the id of the record stored from message seq of the
// stream tagged tag ("" when tag or seq cannot be one).
func StreamRecordID(tag string, seq uint64) string {
	t, err := hex.DecodeString(tag)
	if err != nil || len(t) != 5 || seq == 0 || seq > MaxStreamSeq {
		return ""
	}
	var b [12]byte
	b[0] = IDKindStream
	copy(b[1:6], t)
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	copy(b[6:], s[2:])
	return hex.EncodeToString(b[:])
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
	done chan result
}

type result struct {
	id  string
	err error
}

// ErrWriterClosed is returned by Write after Run has ended.
var ErrWriterClosed = errors.New("log writer stopped")

// NewWriter returns a writer; call Run.
func NewWriter(s Store, maxBatch int) *Writer {
	return &Writer{Store: s, MaxBatch: max(maxBatch, 1), in: make(chan pending, max(maxBatch, 1))}
}

// Write stores r and returns its id when it is stored.
func (w *Writer) Write(ctx context.Context, r Record) (string, error) {
	p := pending{ctx: ctx, r: r, done: make(chan result, 1)}
	select {
	case w.in <- p:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	select {
	case res := <-p.done:
		return res.id, res.err
	case <-ctx.Done():
		// The record may still be stored; the caller reports a failure
		// it cannot be sure of, as any timed-out write would.
		return "", ctx.Err()
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
			p.done <- result{err: p.ctx.Err()}
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
			p.done <- result{err: err}
		default:
			p.done <- result{id: rs[i].ID, err: per[i]}
		}
	}
}

func (w *Writer) drain() {
	for {
		select {
		case p := <-w.in:
			p.done <- result{err: ErrWriterClosed}
		default:
			return
		}
	}
}
