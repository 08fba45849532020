// After a failed or redelivered write: which records a write listed in a
// chain, and the marks of records listed again (chunks.go, ids.go).

package mongostore

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// listedIn reports which records a write (batch) listed in key's chain,
// looking from chunk from up to the head, and in which chunks.
func (s *Store) listedIn(ctx context.Context, key string, from int64, batch string) (map[bson.ObjectID]bool, []any, error) {
	out := map[bson.ObjectID]bool{}
	var chunks []any
	var first time.Time
	for n := max(from, 1); n < from+relistScan; n++ {
		c, err := s.chunk(ctx, key, n)
		if err != nil {
			return nil, nil, err
		}
		if c == nil {
			if n == max(from, 1) {
				// from may sit below the oldest kept chunk (records
				// older than the retention): nothing to find there.
				h, err := s.head(ctx, key)
				if err != nil || h == nil || h.N <= n {
					return out, nil, err
				}
				continue
			}
			break
		}
		if first.IsZero() {
			first = c.At
		}
		if c.At.Sub(first) > relistWindow {
			// Chunks claimed this long after the write began cannot be
			// its own: a write gives up long before (see natsingest).
			break
		}
		if c.Batch != batch {
			continue
		}
		chunks = append(chunks, c)
		for _, r := range c.Records {
			out[r.ID] = true
		}
	}
	return out, chunks, nil
}

// relistDoc (a relist mark, in log_ids) marks that the records of a write
// (batch) missing from a chain are being listed again, as batch+"r", from
// chunk From on. It is written before those chunks, so a crash during the
// relisting is found the same way next time.
type relistDoc struct {
	ID   string    `bson:"_id"`
	From int64     `bson:"from"`
	At   time.Time `bson:"at"`
}

func relistID(key, batch string) string { return "r|" + key + "|" + batch }

// relistMark reads the relist mark of batch in key's chain (nil: none):
// from log_ids, else from log_heads, where versions before it moved kept
// them (retention removes those with the writes they belong to).
func (s *Store) relistMark(ctx context.Context, key, batch string) (*relistDoc, error) {
	for _, coll := range []*mongo.Collection{s.ids, s.headHints} {
		if d, err := byID[relistDoc](ctx, coll, relistID(key, batch)); d != nil || err != nil {
			return d, err
		}
	}
	return nil, nil
}

// chainState is what a redelivery needs to know about one write in one
// chain: which records it (or its relisting) listed there.
type chainState struct {
	listed  map[bson.ObjectID]bool
	relist  *relistDoc
	records []chunkRec // to list again, as batch+"r"
}

// chainState reads the state of the write r in key's chain. In a type
// chain it also writes the records documents of the chunks it found,
// which the write may have stopped before.
func (s *Store) chainState(ctx context.Context, key string, r ref) (*chainState, error) {
	listed, chunks, err := s.listedIn(ctx, key, r.N, r.Batch)
	if err != nil {
		return nil, err
	}
	st := &chainState{listed: listed}
	d, err := s.relistMark(ctx, key, r.Batch)
	if err != nil {
		return nil, err
	}
	if d != nil {
		st.relist = d
		again, more, err := s.listedIn(ctx, key, d.From, r.Batch+"r")
		if err != nil {
			return nil, err
		}
		for id := range again {
			st.listed[id] = true
		}
		chunks = append(chunks, more...)
	}
	if err := s.copyRecords(ctx, chunks); err != nil {
		return nil, err
	}
	return st, nil
}
