package mongostore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acme/platform/services/logs/internal/logs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// statsReadAhead is how many chunk headers Stats reads at once.
const statsReadAhead = 8

// Stats implements logs.Store. Each type's chain (or the app's) is walked
// back from its head to the first chunk whose HiAt is older than q.From,
// skipping blocks with nothing older than q.To (blocks.go). It reads the
// chunks' headers only (count, time range, blocks; not the records), several
// at a time: a chunk whose records all fall in one bucket (its MinAt and
// MaxAt say so) adds its Count; only a chunk that straddles a bucket
// boundary or an end of the range is read whole and counted record by
// record.
func (s *Store) Stats(ctx context.Context, q logs.StatsQuery) (logs.Stats, error) {
	// The HTTP layer checks the query first; checked again here, before
	// anything is allocated, so that no caller can size the buckets or
	// index past them.
	n, err := q.Buckets()
	if err != nil {
		return logs.Stats{}, err
	}
	out := logs.Stats{Counts: make([]map[string]int64, n)}
	for i := range out.Counts {
		out.Counts[i] = make(map[string]int64, len(logs.Types))
		for _, t := range logs.Types {
			out.Counts[i][t] = 0
		}
	}
	bucket := func(t time.Time) int { return q.Bucket(t, n) }
	sk := newSkipper(logs.Query{To: q.To})
	for _, typ := range logs.Types {
		key := typeKey(typ)
		if q.AppID != "" {
			key = appKey(q.AppID, typ)
		}
		head, err := s.head(ctx, key)
		if err != nil {
			return out, err
		}
		hs := headReader{s: s, key: key, got: map[int64]*chunkDoc{}}
		c := head
		for looked := 0; c != nil; looked++ {
			if c.HiAt.Before(q.From) {
				break // nothing here or before is as new as from
			}
			if looked >= s.filterScan {
				out.Partial = true
				break
			}
			if back := sk.skip(c); back > 0 {
				if c, err = hs.get(ctx, c.N-back); err != nil {
					return out, err
				}
				continue
			}
			if b := bucket(c.MinAt); b >= 0 && b == bucket(c.MaxAt) {
				out.Counts[b][typ] += c.Count
			} else {
				full := c
				if full.Records == nil {
					if full, err = s.chunk(ctx, key, c.N); err != nil {
						return out, err
					}
					if full == nil {
						return out, fmt.Errorf("chunk %s: gone while counted", chunkID(key, c.N))
					}
				}
				for _, r := range full.Records {
					if b := bucket(r.CreatedAt); b >= 0 {
						out.Counts[b][typ]++
					}
				}
			}
			if c, err = hs.get(ctx, c.N-1); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// headReader reads the headers of one chain's chunks for Stats, the next
// statsReadAhead below the one asked for at once; a chunk in the cache is
// used whole.
type headReader struct {
	s   *Store
	key string
	got map[int64]*chunkDoc // read ahead, by number (nil: none)
}

func (h *headReader) get(ctx context.Context, n int64) (*chunkDoc, error) {
	if n < 1 {
		return nil, nil
	}
	if c, ok := h.got[n]; ok {
		delete(h.got, n)
		return c, nil
	}
	clear(h.got)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var first error
	for i := n; i > n-statsReadAhead && i >= 1; i-- {
		wg.Go(func() {
			c, err := h.s.chunkHead(ctx, h.key, i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			h.got[i] = c
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	c := h.got[n]
	delete(h.got, n)
	return c, nil
}

// chunkHead reads chunk n of key without its records (Records nil) and
// Bloom filters, unless the cache has it whole; nil when there is none.
func (s *Store) chunkHead(ctx context.Context, key string, n int64) (*chunkDoc, error) {
	id := chunkID(key, n)
	if c := s.cache.get(id); c != nil {
		return c, nil
	}
	raw, err := s.chunks.FindOne(ctx, bson.M{"_id": id}, options.FindOne().SetProjection(bson.M{"r": 0, "bloom": 0})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c := &chunkDoc{}
	if err := decodeChunk(raw, c, false); err != nil {
		return nil, err
	}
	return c, nil
}
