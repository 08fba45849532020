// Package fencedcache keeps values read by id in memory without ever
// serving one that a write (on any replica) had changed or removed before
// the request arrived. Auth's user cache and the files service's record
// cache are built on it.
//
// Correctness across replicas rests on two things:
//
//   - Every write that changes a value invalidates it here and publishes
//     the invalidation on NATS, flushed, before it answers; every replica
//     applies those messages (Invalidate, fed by pkg/natsfence).
//   - An entry is served only after the fence (natsfence.Fence.Sync)
//     succeeded for this request: a NATS round trip begun after the request
//     arrived, after which every invalidation published before has been
//     applied. When the fence fails (NATS away) the value is loaded and
//     nothing is stored.
//
// A load that raced an invalidation is not stored: every invalidation (and
// Clear) bumps a sequence number, and a loaded value is stored only if the
// sequence did not move while it was being read.
package fencedcache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Cache holds at most max values of type V for ttl each. The zero ttl
// disables it (every Get loads); a nil *Cache does the same.
type Cache[V any] struct {
	ttl   time.Duration
	max   int
	fence func(context.Context) error
	// Now is the clock (time.Now); tests replace it.
	Now func() time.Time

	mu  sync.Mutex
	m   map[string]entry[V]
	seq uint64 // bumped by every invalidation and Clear

	hits, misses, bypassed atomic.Uint64
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// New returns a cache keeping at most max values for ttl each. fence must
// succeed before an entry is served or stored (natsfence.Fence.Sync); nil
// means no fence (one process, tests).
func New[V any](ttl time.Duration, max int, fence func(context.Context) error) *Cache[V] {
	if max < 1 {
		max = 1
	}
	return &Cache[V]{ttl: ttl, max: max, fence: fence, Now: time.Now, m: map[string]entry[V]{}}
}

// SetFence sets the fence (see New). Call it before serving.
func (c *Cache[V]) SetFence(fence func(context.Context) error) { c.fence = fence }

// Enabled reports whether the cache serves anything.
func (c *Cache[V]) Enabled() bool { return c != nil && c.ttl > 0 }

// Get returns the value of id: from the cache when the fence allows it,
// else from load, whose answer is then stored when that is safe. Errors of
// load are returned as they are and never stored.
func (c *Cache[V]) Get(ctx context.Context, id string, load func(context.Context, string) (V, error)) (V, error) {
	if !c.Enabled() {
		return load(ctx, id)
	}
	// The fence first: invalidations published before this request are
	// applied before the cache and the sequence are read.
	if c.fence != nil && c.fence(ctx) != nil {
		c.bypassed.Add(1)
		return load(ctx, id)
	}
	c.mu.Lock()
	e, ok := c.m[id]
	seq := c.seq
	c.mu.Unlock()
	if ok && c.Now().Before(e.expires) {
		c.hits.Add(1)
		return e.v, nil
	}
	c.misses.Add(1)
	v, err := load(ctx, id)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if c.seq == seq { // no invalidation while we read: v is not older than one
		if _, had := c.m[id]; !had && len(c.m) >= c.max {
			c.makeRoomLocked()
		}
		c.m[id] = entry[V]{v: v, expires: c.Now().Add(c.ttl)}
	}
	c.mu.Unlock()
	return v, nil
}

// makeRoomLocked drops expired entries, or, when none is, arbitrary ones.
func (c *Cache[V]) makeRoomLocked() {
	t := c.Now()
	for id, e := range c.m {
		if !t.Before(e.expires) {
			delete(c.m, id)
		}
	}
	for id := range c.m {
		if len(c.m) < c.max {
			return
		}
		delete(c.m, id)
	}
}

// Invalidate drops these ids.
func (c *Cache[V]) Invalidate(ids ...string) {
	if c == nil || len(ids) == 0 {
		return
	}
	c.mu.Lock()
	c.seq++
	for _, id := range ids {
		delete(c.m, id)
	}
	c.mu.Unlock()
}

// Clear drops everything (invalidations may have been missed).
func (c *Cache[V]) Clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.seq++
	c.m = map[string]entry[V]{}
	c.mu.Unlock()
}

// Len returns the number of entries (expired ones included).
func (c *Cache[V]) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Stats are counts since the start.
type Stats struct {
	Hits, Misses, Bypassed uint64 // bypassed: the fence failed, the value was loaded
}

// Stats returns the counts so far.
func (c *Cache[V]) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Bypassed: c.bypassed.Load()}
}

// Collectors returns counters of the cache's hits, misses and bypasses
// (fence failed) for a Prometheus registry, named
// <namespace>_<subsystem>_cache_{hits,misses,bypassed}_total.
func (c *Cache[V]) Collectors(namespace, subsystem, what string) []prometheus.Collector {
	counter := func(name, help string, v func(Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "cache_" + name + "_total",
			Help: help + " (" + what + ").",
		}, func() float64 { return float64(v(c.Stats())) })
	}
	return []prometheus.Collector{
		counter("hits", "Reads answered by the cache", func(s Stats) uint64 { return s.Hits }),
		counter("misses", "Reads that loaded the value (not cached or expired)", func(s Stats) uint64 { return s.Misses }),
		counter("bypassed", "Reads that skipped the cache because its NATS fence failed", func(s Stats) uint64 { return s.Bypassed }),
	}
}
