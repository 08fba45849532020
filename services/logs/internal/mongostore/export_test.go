package mongostore

import (
	"context"
	"fmt"
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

// CheckHiAt reads key's chain from the server and reports the first chunk
// whose HiAt is not the newest createdAt of it and every chunk before it.
func CheckHiAt(ctx context.Context, s *Store, key string) error {
	head, err := s.head(ctx, key)
	if err != nil || head == nil {
		return err
	}
	var hi time.Time
	for n := int64(1); n <= head.N; n++ {
		c, err := s.storedChunk(ctx, key, n)
		if err != nil {
			return err
		}
		for _, r := range c.Records {
			hi = maxTime(hi, r.CreatedAt)
		}
		if !c.HiAt.Equal(hi) {
			return fmt.Errorf("chunk %s: HiAt %v, the newest createdAt up to it is %v", c.ID, c.HiAt, hi)
		}
	}
	return nil
}
