package mongostore

import (
	"container/list"
	"sync"
	"time"
)

// DefaultChunkCacheBytes is the default size of a store's chunk cache.
const DefaultChunkCacheBytes = 32 << 20

// chunkCache keeps recently written or read chunks, least recently used
// first out, up to a size in bytes. Chunks never change once claimed, so a
// cached chunk is the stored one; only retention removes chunks, and
// DeleteBefore drops what it removes here too (every replica runs it). The
// newest chunks of each chain are the hot ones: a first page, or the next
// pages of a reader, then costs no lookup but the probe for a newer chunk,
// however small the chunks (records that trickle in make a chunk each).
type chunkCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	ll    *list.List // front: most recently used; values *cacheEntry
	items map[string]*list.Element
}

type cacheEntry struct {
	c    *chunkDoc
	size int64
}

func newChunkCache(max int64) *chunkCache {
	return &chunkCache{max: max, ll: list.New(), items: map[string]*list.Element{}}
}

// chunkSize estimates a cached chunk's memory: its strings plus the Go
// structures around them (about 1 KiB a chunk and 300 bytes a record beyond
// the body; the soak's growth with a 1 MiB cache showed an estimate of a
// third of that was too low).
func chunkSize(c *chunkDoc) int64 {
	n := int64(1024)
	for _, r := range c.Records {
		n += int64(len(r.LogBody)) + 300
		n += int64(len(r.MetricsID))
	}
	return n
}

func (cc *chunkCache) get(id string) *chunkDoc {
	if cc == nil || cc.max <= 0 {
		return nil
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	e := cc.items[id]
	if e == nil {
		return nil
	}
	cc.ll.MoveToFront(e)
	return e.Value.(*cacheEntry).c
}

func (cc *chunkCache) put(c *chunkDoc) {
	if cc == nil || cc.max <= 0 {
		return
	}
	size := chunkSize(c)
	if size > cc.max/4 {
		return // one huge chunk would push out everything else
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if e := cc.items[c.ID]; e != nil {
		cc.ll.MoveToFront(e)
		return
	}
	cc.items[c.ID] = cc.ll.PushFront(&cacheEntry{c: c, size: size})
	cc.size += size
	for cc.size > cc.max {
		cc.remove(cc.ll.Back())
	}
}

func (cc *chunkCache) remove(e *list.Element) {
	ce := e.Value.(*cacheEntry)
	cc.ll.Remove(e)
	delete(cc.items, ce.c.ID)
	cc.size -= ce.size
}

// dropBefore removes the chunks whose newest record is older than t (what
// retention deletes).
func (cc *chunkCache) dropBefore(t time.Time) {
	if cc == nil {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for e := cc.ll.Front(); e != nil; {
		next := e.Next()
		if e.Value.(*cacheEntry).c.MaxAt.Before(t) {
			cc.remove(e)
		}
		e = next
	}
}
