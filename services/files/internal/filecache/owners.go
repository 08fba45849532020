package filecache

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acme/platform/services/files/internal/files"
	"github.com/prometheus/client_golang/prometheus"
)

// AllOwners in a message's owners means every owner: the writer could not
// tell whose records it changed.
const AllOwners = "*"

// maxPagesPerOwner bounds the listing pages kept for one owner; past it an
// arbitrary page of theirs makes room.
const maxPagesPerOwner = 16

// stripes of the invalidation sequence: a load is stored only when no
// invalidation of an owner in its stripe (or Clear) happened while it ran,
// so writes of other owners rarely keep a load from being stored.
const stripes = 64

// OwnerCache keeps, per owner, the listing pages (ListByOwner answers by
// skip and limit) and the account (bytes, count, own quota) read from the
// database or left by this process's last reservation (PutAccount),
// under the same rules as pkg/fencedcache: an entry is served only after
// the fence succeeded for this request, a load that raced an invalidation
// of its owner is not stored, and every write that changes an owner's
// records or account invalidates the owner here and on every replica
// (Store).
//
// Its size is counted in records: every record of a cached page, plus one
// per page and per usage. The zero ttl disables it; a nil *OwnerCache does
// the same.
type OwnerCache struct {
	ttl   time.Duration
	max   int
	fence func(context.Context) error
	// Now is the clock (time.Now); tests replace it.
	Now func() time.Time

	mu   sync.Mutex
	m    map[string]*ownerEntry
	held int             // the size of what m holds
	seq  [stripes]uint64 // invalidations of owners' accounts and pages
	// pageSeq counts the invalidations of listing pages alone (an insert
	// of a reserved record), putSeq the accounts kept from reservations:
	// a load of pages stored only when neither seq nor pageSeq moved, of
	// an account when neither seq nor putSeq did.
	pageSeq [stripes]uint64
	putSeq  [stripes]uint64
	seed    maphash.Seed

	hits, misses, bypassed atomic.Uint64
}

type pageKey struct{ skip, limit int }

type cachedPage struct {
	recs    []files.File
	expires time.Time
}

type cachedUsage struct {
	acct    files.Account
	expires time.Time
}

type ownerEntry struct {
	pages map[pageKey]cachedPage
	usage *cachedUsage
	held  int
}

// NewOwnerCache returns an owner cache holding at most max records (see
// OwnerCache) for ttl each (ttl 0: off). Set its fence
// (natsfence.Fence.Sync) before serving.
func NewOwnerCache(ttl time.Duration, max int) *OwnerCache {
	if max < 1 {
		max = 1
	}
	return &OwnerCache{ttl: ttl, max: max, Now: time.Now, m: map[string]*ownerEntry{}, seed: maphash.MakeSeed()}
}

// SetFence sets the fence. Call it before serving.
func (c *OwnerCache) SetFence(fence func(context.Context) error) { c.fence = fence }

// Enabled reports whether the cache serves anything.
func (c *OwnerCache) Enabled() bool { return c != nil && c.ttl > 0 }

func (c *OwnerCache) stripe(owner string) int {
	return int(maphash.String(c.seed, owner) % stripes)
}

// fenced reports whether cached entries may be served to this request.
func (c *OwnerCache) fenced(ctx context.Context) bool {
	if c.fence != nil && c.fence(ctx) != nil {
		c.bypassed.Add(1)
		return false
	}
	return true
}

// List returns owner's page (skip, limit): from the cache when the fence
// allows it, else from load, whose answer is then stored when that is
// safe. The records returned are the caller's to change.
func (c *OwnerCache) List(ctx context.Context, owner string, skip, limit int, load func(context.Context) ([]*files.File, error)) ([]*files.File, error) {
	if !c.Enabled() || !c.fenced(ctx) {
		return load(ctx)
	}
	key := pageKey{skip, limit}
	s := c.stripe(owner)
	c.mu.Lock()
	seq, pseq := c.seq[s], c.pageSeq[s]
	if e := c.m[owner]; e != nil {
		if p, ok := e.pages[key]; ok && c.Now().Before(p.expires) {
			c.mu.Unlock()
			c.hits.Add(1)
			out := make([]*files.File, len(p.recs))
			for i := range p.recs {
				f := p.recs[i]
				out[i] = &f
			}
			return out, nil
		}
	}
	c.mu.Unlock()
	c.misses.Add(1)
	out, err := load(ctx)
	if err != nil {
		return out, err
	}
	weight := len(out) + 1
	if weight > c.max {
		return out, nil
	}
	recs := make([]files.File, len(out))
	for i, f := range out {
		recs[i] = *f
	}
	c.mu.Lock()
	if c.seq[s] == seq && c.pageSeq[s] == pseq { // no invalidation of the owner while we read
		e := c.entryLocked(owner, weight)
		if old, ok := e.pages[key]; ok {
			c.dropLocked(e, len(old.recs)+1)
			delete(e.pages, key)
		} else if len(e.pages) >= maxPagesPerOwner {
			for k, p := range e.pages {
				c.dropLocked(e, len(p.recs)+1)
				delete(e.pages, k)
				break
			}
		}
		e.pages[key] = cachedPage{recs: recs, expires: c.Now().Add(c.ttl)}
		c.addLocked(e, weight)
	}
	c.mu.Unlock()
	return out, nil
}

// Account returns owner's account, like List.
func (c *OwnerCache) Account(ctx context.Context, owner string, load func(context.Context) (files.Account, error)) (files.Account, error) {
	if !c.Enabled() || !c.fenced(ctx) {
		return load(ctx)
	}
	s := c.stripe(owner)
	c.mu.Lock()
	seq, put := c.seq[s], c.putSeq[s]
	if e := c.m[owner]; e != nil && e.usage != nil && c.Now().Before(e.usage.expires) {
		u := *e.usage
		c.mu.Unlock()
		c.hits.Add(1)
		return u.acct, nil
	}
	c.mu.Unlock()
	c.misses.Add(1)
	a, err := load(ctx)
	if err != nil {
		return a, err
	}
	c.mu.Lock()
	if c.seq[s] == seq && c.putSeq[s] == put {
		c.putAccountLocked(owner, a)
	}
	c.mu.Unlock()
	return a, nil
}

// Token returns what PutAccount needs to tell whether owner was
// invalidated since: take it before the write whose result is put.
func (c *OwnerCache) Token(owner string) uint64 {
	if !c.Enabled() {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq[c.stripe(owner)]
}

// PutAccount keeps a the account that a write of this process left
// (a reservation's answer), unless owner was invalidated (or anything
// else that token's stripe holds) since token was taken: then another
// write may have followed it, and owner's account is dropped instead.
// Either way loads in flight for the owner are not stored.
//
// Reservations running at once for one owner do not invalidate each
// other: with no invalidation since token, every change of the account
// seen here since was a reservation, which only adds, so of a and the
// account kept the one with more bytes (then records) is the later and is
// kept. Dropping it instead made the owner's next upload read the account
// again whenever two of their uploads overlapped.
func (c *OwnerCache) PutAccount(owner string, token uint64, a files.Account) {
	if !c.Enabled() {
		return
	}
	s := c.stripe(owner)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[owner]
	switch {
	case c.seq[s] != token:
		if e != nil && e.usage != nil {
			c.dropLocked(e, 1)
			e.usage = nil
			if e.held == 0 {
				delete(c.m, owner)
			}
		}
		c.seq[s]++
	case e != nil && e.usage != nil && c.Now().Before(e.usage.expires) && later(e.usage.acct, a):
		// a is older than the account kept (and still served): keep that one
	default:
		c.putAccountLocked(owner, a)
	}
	c.putSeq[s]++
}

// later reports whether account a is a later state than b of the same
// owner's account between two invalidations (only reservations between):
// more bytes, or as many and more records.
func later(a, b files.Account) bool {
	return a.Bytes > b.Bytes || a.Bytes == b.Bytes && a.Count > b.Count
}

func (c *OwnerCache) putAccountLocked(owner string, a files.Account) {
	e := c.entryLocked(owner, 1)
	if e.usage == nil {
		c.addLocked(e, 1)
	}
	e.usage = &cachedUsage{acct: a, expires: c.Now().Add(c.ttl)}
}

// InvalidatePages drops owner's listing pages and keeps their account: an
// insert of a record whose bytes were reserved changes the listing, not
// the account.
func (c *OwnerCache) InvalidatePages(owner string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pageSeq[c.stripe(owner)]++
	e := c.m[owner]
	if e == nil {
		return
	}
	for k, p := range e.pages {
		c.dropLocked(e, len(p.recs)+1)
		delete(e.pages, k)
	}
	if e.held == 0 {
		delete(c.m, owner)
	}
}

// entryLocked returns owner's entry, made (and room made for weight more)
// when there is none.
func (c *OwnerCache) entryLocked(owner string, weight int) *ownerEntry {
	if c.held+weight > c.max {
		c.makeRoomLocked(weight, owner)
	}
	e := c.m[owner]
	if e == nil {
		e = &ownerEntry{pages: map[pageKey]cachedPage{}}
		c.m[owner] = e
	}
	return e
}

func (c *OwnerCache) addLocked(e *ownerEntry, n int) {
	e.held += n
	c.held += n
}

func (c *OwnerCache) dropLocked(e *ownerEntry, n int) {
	e.held -= n
	c.held -= n
}

// makeRoomLocked drops expired pages and usages, then, while that is not
// enough, whole owners other than keep (arbitrary ones).
func (c *OwnerCache) makeRoomLocked(weight int, keep string) {
	t := c.Now()
	for owner, e := range c.m {
		for k, p := range e.pages {
			if !t.Before(p.expires) {
				c.dropLocked(e, len(p.recs)+1)
				delete(e.pages, k)
			}
		}
		if e.usage != nil && !t.Before(e.usage.expires) {
			c.dropLocked(e, 1)
			e.usage = nil
		}
		if e.held == 0 {
			delete(c.m, owner)
		}
	}
	for owner, e := range c.m {
		if c.held+weight <= c.max {
			return
		}
		if owner != keep {
			c.held -= e.held
			delete(c.m, owner)
		}
	}
	if e := c.m[keep]; e != nil && c.held+weight > c.max {
		c.held -= e.held
		delete(c.m, keep)
	}
}

// Invalidate drops the owners' pages and usage; AllOwners drops everything.
func (c *OwnerCache) Invalidate(owners ...string) {
	if c == nil || len(owners) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, owner := range owners {
		if owner == AllOwners {
			c.clearLocked()
			return
		}
		c.seq[c.stripe(owner)]++
		if e := c.m[owner]; e != nil {
			c.held -= e.held
			delete(c.m, owner)
		}
	}
}

// Clear drops everything (invalidations may have been missed).
func (c *OwnerCache) Clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.clearLocked()
	c.mu.Unlock()
}

func (c *OwnerCache) clearLocked() {
	for i := range c.seq {
		c.seq[i]++
	}
	c.m = map[string]*ownerEntry{}
	c.held = 0
}

// Held returns the size of what the cache holds (see OwnerCache), expired
// entries included.
func (c *OwnerCache) Held() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// Stats returns the counts so far (as fencedcache.Stats).
func (c *OwnerCache) Stats() (hits, misses, bypassed uint64) {
	if c == nil {
		return 0, 0, 0
	}
	return c.hits.Load(), c.misses.Load(), c.bypassed.Load()
}

// Collectors returns counters of the cache's hits, misses and bypasses
// (fence failed), named <namespace>_<subsystem>_cache_{hits,misses,bypassed}_total,
// and a gauge of its size, <namespace>_<subsystem>_cache_held.
func (c *OwnerCache) Collectors(namespace, subsystem, what string) []prometheus.Collector {
	counter := func(name, help string, v func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "cache_" + name + "_total",
			Help: help + " (" + what + ").",
		}, func() float64 { return float64(v()) })
	}
	return []prometheus.Collector{
		counter("hits", "Reads answered by the cache", func() uint64 { h, _, _ := c.Stats(); return h }),
		counter("misses", "Reads that loaded the value (not cached or expired)", func() uint64 { _, m, _ := c.Stats(); return m }),
		counter("bypassed", "Reads that skipped the cache because its NATS fence failed", func() uint64 { _, _, b := c.Stats(); return b }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "cache_held",
			Help: "Records, pages and usages held (" + what + ").",
		}, func() float64 { return float64(c.Held()) }),
	}
}
