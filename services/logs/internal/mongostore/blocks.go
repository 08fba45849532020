package mongostore

import (
	"context"
	"errors"
	"hash/fnv"
	"math/bits"
	"time"

	"github.com/acme/platform/services/logs/internal/logs"
)

// Filtered reads (from, to, metricsId) walk a chain backwards. Three
// fields of each chunk let them skip what cannot match, exactly, even where
// records delivered late (an outage's backlog, with old createdAt) sit in
// chunks after newer ones:
//
//   - HiAt is the newest createdAt in chunks 1..n (a running maximum, so it
//     only grows with n): a read bounded by from stops at the first chunk
//     whose HiAt is older than from.
//   - Low[l] is the oldest createdAt in the block of 2^l chunks ending at n,
//     and Bloom[l] a Bloom filter of the metricsIds in it, for the l with
//     2^l dividing n: the blocks of a Fenwick tree. From any chunk a read
//     skips back over the largest block ending there that holds nothing
//     older than to or no record with the metricsId, so it reaches the next
//     chunk that may match in O(log n) lookups however deep that is.
//
// Chunk n's blocks are made from its own records and the blocks of chunks
// n-1, n-2, n-4, ... (each ends the half block before), which the previous
// chunk, the write's own chunks and the chunk cache usually hold. A Bloom
// level more than half full would skip little and is not stored, nor any
// above it; a chunk without a level (or without Low, written before it
// existed) just skips less.

// A Bloom filter of bloomBits bits with bloomHashes hash functions: a block
// of 256 records with distinct metricsIds fills about 31% of it and answers
// "maybe" for an absent id about 1% of the time.
const (
	bloomBits   = 2048
	bloomBytes  = bloomBits / 8
	bloomHashes = 3
)

// bloomPositions are the bits metricsID sets (double hashing of FNV-1a).
func bloomPositions(metricsID string) [bloomHashes]uint32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(metricsID))
	sum := h.Sum64()
	a, b := uint32(sum), uint32(sum>>32)|1
	var out [bloomHashes]uint32
	for i := range out {
		out[i] = (a + uint32(i)*b) % bloomBits
	}
	return out
}

func bloomHas(f []byte, pos [bloomHashes]uint32) bool {
	if len(f) == 0 {
		return false // an empty level: no record in the block has a metricsId
	}
	for _, p := range pos {
		if f[p/8]&(1<<(p%8)) == 0 {
			return false
		}
	}
	return true
}

// encodeBlooms packs the levels: per level a byte 0 (empty filter) or 1
// followed by the bloomBytes of the filter.
func encodeBlooms(levels [][]byte) []byte {
	var out []byte
	for _, f := range levels {
		if len(f) == 0 {
			out = append(out, 0)
			continue
		}
		out = append(out, 1)
		out = append(out, f...)
	}
	return out
}

func decodeBlooms(b []byte) ([][]byte, error) {
	b = append([]byte(nil), b...) // not the decoder's buffer
	var levels [][]byte
	for len(b) > 0 {
		switch {
		case b[0] == 0:
			levels = append(levels, nil)
			b = b[1:]
		case b[0] == 1 && len(b) > bloomBytes:
			levels = append(levels, b[1:1+bloomBytes:1+bloomBytes])
			b = b[1+bloomBytes:]
		default:
			return nil, errors.New("bloom: malformed levels")
		}
	}
	return levels, nil
}

// orBloom returns a | b (nil for two empty filters).
func orBloom(a, b []byte) []byte {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]byte, bloomBytes)
	for i := range out {
		out[i] = a[i] | b[i]
	}
	return out
}

func bloomFull(f []byte) bool {
	n := 0
	for _, x := range f {
		n += bits.OnesCount8(x)
	}
	return n > bloomBits/2
}

// setBlocks sets c.Low and c.Bloom from c's records and the chunks before
// it: pending (this write's chunks by _id, not stored yet), else the cache
// or the server. A chunk gone with the retention held nothing still
// listed.
func (s *Store) setBlocks(ctx context.Context, c *chunkDoc, pending map[string]*chunkDoc) error {
	c.Low = []time.Time{c.MinAt}
	var own []byte
	for _, r := range c.Records {
		if r.MetricsID == "" {
			continue
		}
		if own == nil {
			own = make([]byte, bloomBytes)
		}
		for _, p := range bloomPositions(r.MetricsID) {
			own[p/8] |= 1 << (p % 8)
		}
	}
	c.Bloom = nil
	if !bloomFull(own) {
		c.Bloom = [][]byte{own}
	}
	for l := 1; c.N%(1<<l) == 0; l++ {
		n := c.N - 1<<(l-1) // its block of 2^(l-1) chunks is the first half of this one
		o := pending[chunkID(c.Key, n)]
		if o == nil {
			var err error
			if o, err = s.chunk(ctx, c.Key, n); err != nil {
				return err
			}
		}
		low, bloom, bloomOK := c.Low[l-1], []byte(nil), len(c.Bloom) == l
		if bloomOK {
			bloom = c.Bloom[l-1]
		}
		if o != nil {
			if len(o.Low) < l {
				return nil // written before Low existed: no higher levels
			}
			low = minTime(low, o.Low[l-1])
			if bloomOK = bloomOK && len(o.Bloom) >= l; bloomOK {
				bloom = orBloom(bloom, o.Bloom[l-1])
			}
		}
		c.Low = append(c.Low, low)
		if bloomOK && !bloomFull(bloom) {
			c.Bloom = append(c.Bloom, bloom)
		}
	}
	return nil
}

// skipper says how far back a filtered read may skip from a chunk.
type skipper struct {
	to     time.Time
	metric bool
	pos    [bloomHashes]uint32
}

func newSkipper(q logs.Query) skipper {
	sk := skipper{to: q.To, metric: q.MetricsID != ""}
	if sk.metric {
		sk.pos = bloomPositions(q.MetricsID)
	}
	return sk
}

// skip returns 2^l for the largest block of 2^l chunks ending at c in which
// no record can match, or 0 when c itself may hold one.
func (sk skipper) skip(c *chunkDoc) int64 {
	l := -1
	if !sk.to.IsZero() {
		// The blocks' minima only fall as blocks grow: the largest block
		// with nothing older than to is the first one found from the top.
		for i := len(c.Low) - 1; i >= 0; i-- {
			if !c.Low[i].Before(sk.to) {
				l = max(l, i)
				break
			}
		}
	}
	if sk.metric {
		for i := len(c.Bloom) - 1; i >= 0; i-- {
			if !bloomHas(c.Bloom[i], sk.pos) {
				l = max(l, i)
				break
			}
		}
	}
	if l < 0 {
		return 0
	}
	return 1 << l
}
