package mongostore

import (
	"bytes"
	"context"
	"fmt"
	"math/bits"
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

// CheckBlocks reads key's chain from the server and reports the first
// chunk whose HiAt is not the newest createdAt of it and every chunk before
// it, or whose Low or Bloom levels are not those of the blocks ending at it
// recomputed from the records (a Bloom level is kept while not more than
// half full).
func CheckBlocks(ctx context.Context, s *Store, key string) error {
	head, err := s.head(ctx, key)
	if err != nil || head == nil {
		return err
	}
	var hi time.Time
	var mins []time.Time // by chunk number - 1
	var own [][]byte     // each chunk's own Bloom filter
	for n := int64(1); n <= head.N; n++ {
		c, err := s.storedChunk(ctx, key, n)
		if err != nil {
			return err
		}
		lo := c.Records[0].CreatedAt
		f := make([]byte, bloomBytes)
		for _, r := range c.Records {
			hi, lo = maxTime(hi, r.CreatedAt), minTime(lo, r.CreatedAt)
			if r.MetricsID != nil {
				for _, p := range bloomPositions(*r.MetricsID) {
					f[p/8] |= 1 << (p % 8)
				}
			}
		}
		mins, own = append(mins, lo), append(own, f)
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
		blooms := 0
		for l := range levels {
			block := mins[n-1<<l:]
			if w := slices.MinFunc(block, func(a, b time.Time) int { return a.Compare(b) }); !c.Low[l].Equal(w) {
				return fmt.Errorf("chunk %s: Low[%d] %v, the oldest createdAt of chunks %d..%d is %v", c.ID, l, c.Low[l], n-1<<l+1, n, w)
			}
			want := make([]byte, bloomBytes)
			for _, g := range own[n-1<<l:] {
				for i := range want {
					want[i] |= g[i]
				}
			}
			if bloomFull(want) || blooms < l {
				continue
			}
			blooms++
			if l >= len(c.Bloom) {
				return fmt.Errorf("chunk %s: no Bloom level %d, though it is %d%% full", c.ID, l, fill(want))
			}
			got := c.Bloom[l]
			if len(got) == 0 {
				got = make([]byte, bloomBytes)
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("chunk %s: Bloom level %d differs from the blocks' metricsIds", c.ID, l)
			}
		}
		if len(c.Bloom) != blooms {
			return fmt.Errorf("chunk %s: %d Bloom levels, want %d", c.ID, len(c.Bloom), blooms)
		}
	}
	return nil
}

func fill(f []byte) int {
	n := 0
	for _, x := range f {
		n += bits.OnesCount8(x)
	}
	return n * 100 / bloomBits
}

// ChunkReads is how many chunks the store has read from the server (not
// from its cache).
func ChunkReads(s *Store) int64 { return s.chunkReads.Load() }
