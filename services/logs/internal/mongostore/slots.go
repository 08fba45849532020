// Slots: which write took which stream sequences (ids.go describes the
// scheme), and the cache of the slots of recently used ranges.

package mongostore

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// slotDoc claims stream sequences for a write.
type slotDoc struct {
	ID    string    `bson:"_id"` // "s|<tag>|<range>|<k>"
	Batch string    `bson:"b"`
	Q     []byte    `bson:"q"` // uvarint pairs: sequence - range start, index in the write
	At    time.Time `bson:"at"`

	seqs map[uint64]uint32 // decoded Q
}

func slotID(rng string, k int) string { return "s|" + rng + "|" + strconv.Itoa(k) }

// rangeOf names the range of seq in the stream tagged tag.
func rangeOf(tag string, seq uint64) string {
	return tag + "|" + strconv.FormatUint(seq/rangeSeqs, 10)
}

func (d *slotDoc) decode() error {
	d.seqs = map[uint64]uint32{}
	parts := strings.Split(d.ID, "|")
	if len(parts) != 4 {
		return fmt.Errorf("slot %q: malformed id", d.ID)
	}
	first, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return fmt.Errorf("slot %q: %w", d.ID, err)
	}
	for b := d.Q; len(b) > 0; {
		off, n1 := binary.Uvarint(b)
		if n1 <= 0 {
			return fmt.Errorf("slot %q: malformed sequences", d.ID)
		}
		i, n2 := binary.Uvarint(b[n1:])
		if n2 <= 0 || off >= rangeSeqs || i > 1<<32-1 {
			return fmt.Errorf("slot %q: malformed sequences", d.ID)
		}
		d.seqs[first*rangeSeqs+off] = uint32(i)
		b = b[n1+n2:]
	}
	return nil
}

// slots caches the slots of recently used ranges (they never change once
// claimed), densely from slot 1.
type slots struct {
	mu     sync.Mutex
	ranges map[string]*cachedRange
	tick   uint64
	lock   map[string]*sync.Mutex
}

type cachedRange struct {
	slots []*slotDoc
	used  uint64
}

func (c *slots) get(rng string) []*slotDoc {
	c.mu.Lock()
	defer c.mu.Unlock()
	cb := c.ranges[rng]
	if cb == nil {
		return nil
	}
	c.tick++
	cb.used = c.tick
	return cb.slots
}

// add records slot k of rng (ignored unless it is the next one).
func (c *slots) add(rng string, k int, d *slotDoc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cb := c.ranges[rng]
	if cb == nil {
		if k != 1 {
			return
		}
		if len(c.ranges) >= slotCacheMax {
			c.evict()
		}
		cb = &cachedRange{}
		c.ranges[rng] = cb
	}
	if len(cb.slots) != k-1 {
		return
	}
	cb.slots = append(cb.slots, d)
	c.tick++
	cb.used = c.tick
}

// evict drops the least recently used quarter of the ranges.
func (c *slots) evict() {
	type use struct {
		key  string
		used uint64
	}
	all := make([]use, 0, len(c.ranges))
	for k, cb := range c.ranges {
		all = append(all, use{k, cb.used})
	}
	slices.SortFunc(all, func(a, b use) int { return cmp.Compare(a.used, b.used) })
	for _, u := range all[:len(all)/4+1] {
		delete(c.ranges, u.key)
		delete(c.lock, u.key)
	}
}

// lockRanges serialises this process's claims in the given ranges (sorted,
// so two writes never wait for each other in opposite orders).
func (c *slots) lockRanges(ranges []string) func() {
	var ms []*sync.Mutex
	c.mu.Lock()
	for _, r := range ranges {
		m := c.lock[r]
		if m == nil {
			m = &sync.Mutex{}
			c.lock[r] = m
		}
		ms = append(ms, m)
	}
	c.mu.Unlock()
	for _, m := range ms {
		m.Lock()
	}
	return func() {
		for _, m := range ms {
			m.Unlock()
		}
	}
}

// owner is the write that took a stream sequence, and the record's index
// there.
type owner struct {
	batch string
	index uint32
}

func ownerIn(ss []*slotDoc, seq uint64) (owner, bool) {
	for _, d := range ss {
		if i, ok := d.seqs[seq]; ok {
			return owner{d.Batch, i}, true
		}
	}
	return owner{}, false
}

// readSlot reads slot k of rng (nil when there is none).
func (s *Store) readSlot(ctx context.Context, rng string, k int) (*slotDoc, error) {
	d, err := byID[slotDoc](ctx, s.ids, slotID(rng, k))
	if err != nil || d == nil {
		return nil, err
	}
	if err := d.decode(); err != nil {
		return nil, err
	}
	return d, nil
}

// ownerOf finds the write that took seq in rng (ok false: none did):
// in the cached slots of the range, then in the next ones, read
// probeParallel at a time until one is missing. A sequence is in one slot at
// most (a writer leaves out those a lower slot holds), so the search stops
// there.
func (s *Store) ownerOf(ctx context.Context, rng string, seq uint64) (owner, bool, error) {
	have := s.slots.get(rng)
	if o, ok := ownerIn(have, seq); ok {
		return o, true, nil
	}
	for {
		base := len(have)
		got := make([]*slotDoc, probeParallel)
		errs := make([]error, probeParallel)
		var wg sync.WaitGroup
		for i := range probeParallel {
			wg.Go(func() { got[i], errs[i] = s.readSlot(ctx, rng, base+1+i) })
		}
		wg.Wait()
		for i, d := range got {
			if errs[i] != nil {
				return owner{}, false, errs[i]
			}
			if d == nil {
				return owner{}, false, nil
			}
			have = append(have[:len(have):len(have)], d)
			s.slots.add(rng, len(have), d)
			if o, ok := ownerIn(have[len(have)-1:], seq); ok {
				return o, true, nil
			}
		}
	}
}
