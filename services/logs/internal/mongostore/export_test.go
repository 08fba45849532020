package mongostore

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// FailBeforeAppend makes InsertBatch fail before listing in a chain for
// which fail returns true (a crash between the id documents and the
// chunks, or between two chains).
func FailBeforeAppend(s *Store, fail func(key string) bool) {
	s.beforeAppend = func(_ context.Context, key string) error {
		if fail != nil && fail(key) {
			return errCrash
		}
		return nil
	}
}

// TypeKey and AppKey name the chains.
func TypeKey(typ string) string       { return typeKey(typ) }
func AppKey(appID, typ string) string { return appKey(appID, typ) }

// SetChunkMax sets the records per chunk (small in tests, so that a few
// hundred records span many chunks).
func SetChunkMax(s *Store, n int) { s.chunkMax = n }

// CheckTimeFields reads key's chain from the server and reports the first
// chunk whose HiAt is not the newest createdAt of it and every chunk before
// it, or whose Low is not the oldest createdAt of each block ending at it.
func CheckTimeFields(ctx context.Context, s *Store, key string) error {
	head, err := s.head(ctx, key)
	if err != nil || head == nil {
		return err
	}
	var hi time.Time
	var mins []time.Time // by chunk number - 1
	for n := int64(1); n <= head.N; n++ {
		c, err := s.storedChunk(ctx, key, n)
		if err != nil {
			return err
		}
		lo := c.Records[0].CreatedAt
		for _, r := range c.Records {
			hi, lo = maxTime(hi, r.CreatedAt), minTime(lo, r.CreatedAt)
		}
		mins = append(mins, lo)
		if !c.HiAt.Equal(hi) {
			return fmt.Errorf("chunk %s: HiAt %v, the newest createdAt up to it is %v", c.ID, c.HiAt, hi)
		}
		levels := 0
		for n%(1<<levels) == 0 {
			levels++
		}
		if len(c.Low) != levels {
			return fmt.Errorf("chunk %s: %d levels of Low, want %d", c.ID, len(c.Low), levels)
		}
		for l, got := range c.Low {
			w := slices.MinFunc(mins[n-1<<l:], func(a, b time.Time) int { return a.Compare(b) })
			if !got.Equal(w) {
				return fmt.Errorf("chunk %s: Low[%d] %v, the oldest createdAt of chunks %d..%d is %v", c.ID, l, got, n-1<<l+1, n, w)
			}
		}
	}
	return nil
}

// ChunkReads is how many chunks the store has read from the server (not
// from its cache).
func ChunkReads(s *Store) int64 { return s.chunkReads.Load() }
