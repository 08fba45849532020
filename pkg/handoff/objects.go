package handoff

import (
	"bytes"
	"container/list"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/acme/platform/pkg/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// The object cache: the Fetcher keeps the bytes of small objects it has
// fetched whole, so that a file downloaded again is sent from memory
// instead of being fetched from the object store again. It changes where
// the bytes come from, never who gets them: a cached object is only sent
// in answer to a handoff, that is after the files service has authorized
// that very request and named that object and range, exactly as without
// the cache.
//
// It is correct because the files service never writes an object twice
// under one key (the key holds the record's id and creation time; an
// image variant's, its image's and its canonical parameters, written only
// when absent): the bytes fetched once for a key are the key's bytes for
// as long as it exists. The objects of one record (an image and its
// variants) are forgotten together. A deleted file is never sent from the cache (the files service
// no longer hands it off); its bytes also leave the cache as soon as the
// deletion message arrives (Forget, fed from DeletedSubject by the
// gateway), and at the latest TTL after they were cached.
//
// What is cached: whole objects of at most MaxObject bytes, all of them
// together at most Bytes, the least recently sent dropped first. An object
// is cached on its second whole fetch within TTL (its first only marks it
// seen), so that objects fetched once never push out the ones asked for
// again. Ranges of a cached object are sent from it too.
//
// Objects are cached as stored, and counted by their stored bytes: a
// gzip-stored file is kept compressed whichever representation its
// fetches were for, sent as it is to clients that accept gzip and inflated
// on the way out for those that do not (an Answer with Encoding, inflate),
// so both are served from one entry.

// CacheConfig sizes a Fetcher's object cache; Bytes 0 turns it off.
type CacheConfig struct {
	Bytes     int64         // all cached objects together
	MaxObject int64         // larger objects are never cached
	TTL       time.Duration // an object is fetched again this long after it was cached
}

// DeletedSubject is the subject on which the files service announces the
// records it deleted and the owners whose records changed (Deleted), for a
// NATS subject prefix: its replicas' caches and the gateways' object
// caches drop them.
func DeletedSubject(prefix string) string { return prefix + ".files.deleted" }

// Deleted is the message published on DeletedSubject.
type Deleted struct {
	// Files are the ids of deleted records.
	Files []string `json:"files,omitempty"`
	// Owners are users whose set of records changed (a record inserted or
	// deleted): the files replicas drop their cached listings and usage
	// (services/files/internal/filecache). "*" means every owner. The
	// gateways' object caches ignore it: an insert publishes Owners alone.
	Owners []string `json:"owners,omitempty"`
	// Origin names the files process that published the message, which
	// applied it to its own caches before publishing and skips it when it
	// comes back. The gateways ignore it.
	Origin string `json:"origin,omitempty"`
}

const seenMax = 4096 // objects remembered as fetched once (doorkeeper)

type objectCache struct {
	cfg                  CacheConfig
	hits, misses, stored prometheus.Counter
	held                 prometheus.Gauge

	mu       sync.Mutex
	size     int64                      // bytes cached
	inflight int64                      // bytes being read into the cache (filling), at most cfg.Bytes
	lru      list.List                  // of *cachedObject, most recently sent first
	byKey    map[string]*list.Element   // by object (Answer.URL's path)
	byFile   map[string]map[string]bool // record id → its objects' keys (an image and its variants)
	seen     map[string]time.Time       // objects fetched whole once, by when they expire
}

type cachedObject struct {
	key, file string
	data      []byte
	expires   time.Time
}

func newObjectCache(cfg CacheConfig, reg prometheus.Registerer) *objectCache {
	if cfg.Bytes <= 0 || cfg.MaxObject <= 0 || cfg.TTL <= 0 {
		return nil
	}
	cfg.MaxObject = min(cfg.MaxObject, cfg.Bytes)
	results := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: "gateway",
		Name: "object_cache_total", Help: "Handed-off objects sent by the gateway, by where their bytes came from: hit (its object cache), miss (the object store); and stored (objects put into the cache)."},
		[]string{"result"})
	held := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace, Subsystem: "gateway",
		Name: "object_cache_bytes", Help: "Bytes of objects held in the gateway's object cache."})
	if reg != nil {
		reg.MustRegister(results, held)
	}
	return &objectCache{cfg: cfg, hits: results.WithLabelValues("hit"), misses: results.WithLabelValues("miss"),
		stored: results.WithLabelValues("stored"), held: held,
		byKey: map[string]*list.Element{}, byFile: map[string]map[string]bool{}, seen: map[string]time.Time{}}
}

// get returns the bytes a hands off from the cached object key: all of it
// (a whole-object answer of its exact length) or a range within it.
func (c *objectCache) get(key string, a Answer, now time.Time) (io.ReadCloser, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, start, end, ok := c.find(key, a, now)
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(c.byKey[key])
	return io.NopCloser(bytes.NewReader(o.data[start : end+1])), true
}

// has reports whether get would return a's bytes.
func (c *objectCache) has(key string, a Answer, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _, _, ok := c.find(key, a, now)
	return ok
}

func (c *objectCache) find(key string, a Answer, now time.Time) (o *cachedObject, start, end int64, ok bool) {
	e, ok := c.byKey[key]
	if !ok {
		return nil, 0, 0, false
	}
	o = e.Value.(*cachedObject)
	if !now.Before(o.expires) {
		c.remove(e)
		return nil, 0, 0, false
	}
	size := int64(len(o.data))
	start, end = a.Start, a.End
	if end < 0 && (start != 0 || a.Length != size) || end >= size || start < 0 || end >= 0 && end-start+1 != a.Length {
		return nil, 0, 0, false // not this object's bytes: fetched, and refused there
	}
	if end < 0 {
		end = size - 1
	}
	return o, start, end, true
}

// count counts a handoff sent from the cache (hit) or the store (miss).
func (c *objectCache) count(hit bool) {
	switch {
	case c == nil:
	case hit:
		c.hits.Inc()
	default:
		c.misses.Inc()
	}
}

// admit reports whether a whole object of n bytes just being fetched is to
// be cached: it fits, it was fetched whole before within TTL, and the
// objects being read into the cache at the same time leave room for it (so
// that many first fetches at once never hold more than the cache's size in
// buffers). An admitted object's n bytes count as in flight until done.
func (c *objectCache) admit(key string, n int64, now time.Time) bool {
	if n <= 0 || n > c.cfg.MaxObject {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if until, ok := c.seen[key]; ok && now.Before(until) {
		if c.inflight+n > c.cfg.Bytes {
			return false // seen stays: a later fetch may be admitted
		}
		delete(c.seen, key)
		c.inflight += n
		return true
	}
	if len(c.seen) >= seenMax {
		clear(c.seen)
	}
	c.seen[key] = now.Add(c.cfg.TTL)
	return false
}

// done ends an admitted object's fill: its bytes are no longer in flight,
// and data (nil: the fill was given up) is cached.
func (c *objectCache) done(n int64, key, file string, data []byte, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight -= n
	if data != nil {
		c.put(key, file, data, now)
	}
}

// put caches data; c.mu is held.
func (c *objectCache) put(key, file string, data []byte, now time.Time) {
	if e, ok := c.byKey[key]; ok {
		c.remove(e)
	}
	for c.size+int64(len(data)) > c.cfg.Bytes && c.lru.Len() > 0 {
		c.remove(c.lru.Back())
	}
	o := &cachedObject{key: key, file: file, data: data, expires: now.Add(c.cfg.TTL)}
	c.byKey[key] = c.lru.PushFront(o)
	if file != "" {
		if c.byFile[file] == nil {
			c.byFile[file] = map[string]bool{}
		}
		c.byFile[file][key] = true
	}
	c.size += int64(len(data))
	c.held.Set(float64(c.size))
	c.stored.Inc()
}

// forget drops the objects of the records named.
func (c *objectCache) forget(files ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range files {
		for key := range c.byFile[f] {
			if e, ok := c.byKey[key]; ok {
				c.remove(e)
			}
		}
	}
}

// clear drops every object, and what was seen once.
func (c *objectCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.lru.Len() > 0 {
		c.remove(c.lru.Back())
	}
	clear(c.seen)
}

func (c *objectCache) remove(e *list.Element) {
	o := c.lru.Remove(e).(*cachedObject)
	delete(c.byKey, o.key)
	if keys := c.byFile[o.file]; keys != nil {
		delete(keys, o.key)
		if len(keys) == 0 {
			delete(c.byFile, o.file)
		}
	}
	c.size -= int64(len(o.data))
	c.held.Set(float64(c.size))
}

// Forget drops the cached objects of the files (record ids) named, and
// ForgetAll every cached object: the gateway applies every Deleted message
// with them (ApplyDeleted). Both do nothing when the cache is off.
func (f *Fetcher) Forget(files ...string) {
	if f.cache != nil {
		f.cache.forget(files...)
	}
}

func (f *Fetcher) ForgetAll() {
	if f.cache != nil {
		f.cache.clear()
	}
}

// ApplyDeleted returns the function that applies a Deleted message: forget
// gets the record ids it names; a message that cannot be read is logged
// and clear drops everything (a deletion may have been missed).
func ApplyDeleted(forget func(ids ...string), clear func(), log *slog.Logger) func([]byte) {
	return func(data []byte) {
		var d Deleted
		if err := json.Unmarshal(data, &d); err != nil {
			log.Warn("bad file deletion message", "err", err)
			clear()
			return
		}
		forget(d.Files...)
	}
}

// filling passes an admitted object's bytes through to its reader and
// caches them once all n of them were read; a fill given up (closed early,
// more bytes than announced) caches nothing.
type filling struct {
	io.ReadCloser
	c         *objectCache
	key, file string
	buf       []byte
	n         int64
	ended     bool
}

func (r *filling) Read(p []byte) (int, error) {
	k, err := r.ReadCloser.Read(p)
	if !r.ended {
		if int64(len(r.buf)+k) > r.n {
			r.end(nil) // more than announced: never cached
		} else {
			r.buf = append(r.buf, p[:k]...)
			if err == io.EOF && int64(len(r.buf)) == r.n {
				r.end(r.buf)
			}
		}
	}
	return k, err
}

func (r *filling) Close() error {
	r.end(nil)
	return r.ReadCloser.Close()
}

func (r *filling) end(data []byte) {
	if !r.ended {
		r.ended = true
		r.c.done(r.n, r.key, r.file, data, time.Now())
		r.buf = nil
	}
}
