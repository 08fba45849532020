package mongostore

// The read model: records are listed in chains of immutable chunks, one
// chain per key ("t.<type>" and "a.<appId>.<type>"). Chunk n of a key has
// _id "<key>#<n>", holds the records of one write in time order, and knows
// its position in the chain (pos = records in chunks 1..n-1). A chunk is
// claimed by inserting it: the unique _id makes two writers (replicas)
// racing for n agree, and the loser moves on to n+1. Every query is then a
// lookup by _id, the only lookup every MongoDB-wire server serves from an
// index (FerretDB on SQLite filters and sorts everything else in memory).
//
// Exactly once: before its chunks, a write stores one batch document (the
// chunk numbers it means to list its records at) and claims the stream
// sequences of its records in slot documents (ids.go). A redelivered
// message finds its sequence claimed; the claim names the write that took
// it, so the store can tell whether that write reached the chunks before it
// stopped and list the record again only if it did not. That is two or
// three small documents per write instead of one per record: FerretDB's
// cost per document, not per byte, bounds ingestion.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/acme/platform/pkg/mongox"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Limits of one chunk.
const (
	chunkMaxRecords = 1000
	chunkMaxBytes   = 4 << 20
	// relistScan bounds how many chunks after its first intended place a
	// record's write is looked for (a write lands within the chunks the
	// other replicas claimed meanwhile).
	relistScan = 4096
	// relistWindow: a write lists its records within this time of its
	// first chunk claim, or not at all.
	relistWindow = 10 * time.Minute
	// hintEvery: the head hint document is rewritten every hintEvery
	// chunks (a process new to a chain probes forward from it, doubling
	// its steps: a few more reads, against one more write per chain and
	// every hintEvery writes).
	hintEvery = 64
)

func typeKey(typ string) string          { return "t." + typ }
func appKey(appID, typ string) string    { return "a." + appID + "." + typ }
func chunkID(key string, n int64) string { return key + "#" + strconv.FormatInt(n, 10) }

// chunkRec is one record in a chunk, in memory: the type is its chain's
// (in the key), and the app's name is resolved from its id when read.
type chunkRec struct {
	ID        bson.ObjectID
	AppID     string
	LogBody   string
	MetricsID string // "" when absent
	CreatedAt time.Time
}

// chunkDoc is a chunk; chunkdoc.go encodes and decodes its stored form.
// Every read is by _id, so the server never needs to look inside a chunk;
// its records are plain sub-documents for the people and tools that do.
//
// HiAt, Low and Bloom serve filtered reads (blocks.go).
type chunkDoc struct {
	ID      string
	Key     string
	N       int64
	Pos     int64
	Count   int64
	Batch   string
	MinAt   time.Time
	MaxAt   time.Time
	At      time.Time
	HiAt    time.Time
	Low     []time.Time
	Bloom   [][]byte
	Records []chunkRec
}

func (c *chunkDoc) end() int64 { return c.Pos + c.Count }

// ref says where a write meant to list a record in one chain.
type ref struct {
	N     int64
	Batch string
}

// headHintDoc is a chain's head hint (log_heads).
type headHintDoc struct {
	ID string `bson:"_id"`
	N  int64  `bson:"n"`
}

// heads caches the last chunk seen per key, without its records: where
// reads start looking for the newest (the chain is probed forward from it), and for this process's
// next write the chunk it follows (its place and running fields), so that
// write needs no read.
type heads struct {
	mu   sync.Mutex
	last map[string]*chunkDoc
	// claim serialises this process's writers per key, so they do not
	// race each other for the same chunk numbers.
	claim map[string]*sync.Mutex
}

// get is the number of the last chunk seen of key (0: none).
func (h *heads) get(key string) int64 {
	if c := h.newest(key); c != nil {
		return c.N
	}
	return 0
}

// newest is the last chunk seen of key (nil: none), without its records.
func (h *heads) newest(key string) *chunkDoc {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[key]
}

func (h *heads) saw(c *chunkDoc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.last[c.Key]; old == nil || c.N >= old.N {
		last := *c
		last.Records = nil // only its place and running fields are needed
		h.last[c.Key] = &last
	}
}

func (h *heads) lock(key string) func() {
	h.mu.Lock()
	m := h.claim[key]
	if m == nil {
		m = &sync.Mutex{}
		h.claim[key] = m
	}
	h.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// errCrash is what the test hook beforeAppend returns.
var errCrash = errors.New("simulated crash")

// newBatchID names a write: 7 random bytes in hex (they are part of the
// ids of the records it takes over HTTP).
func newBatchID() string {
	var b [7]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// chunk reads chunk n of key (nil when there is none).
func (s *Store) chunk(ctx context.Context, key string, n int64) (*chunkDoc, error) {
	if n < 1 {
		return nil, nil
	}
	id := chunkID(key, n)
	if c := s.cache.get(id); c != nil {
		return c, nil
	}
	s.chunkReads.Add(1)
	c, err := byID[chunkDoc](ctx, s.chunks, id)
	if c != nil {
		s.cache.put(c)
	}
	return c, err
}

// storedChunk reads chunk n of key from the server, never from the cache:
// for retention, which must see what is really there.
func (s *Store) storedChunk(ctx context.Context, key string, n int64) (*chunkDoc, error) {
	if n < 1 {
		return nil, nil
	}
	return byID[chunkDoc](ctx, s.chunks, chunkID(key, n))
}

// byID reads the document with _id id from coll (nil when there is none).
func byID[T any](ctx context.Context, coll *mongo.Collection, id string) (*T, error) {
	var d T
	err := coll.FindOne(ctx, bson.M{"_id": id}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// head finds the newest chunk of key (nil for an empty chain): from the
// cached or stored hint, probe forward by doubling steps, then bisect.
// Chunk numbers are dense from the oldest kept chunk to the newest, and
// retention never removes the newest, so "exists" is monotonic above the
// hint.
func (s *Store) head(ctx context.Context, key string) (*chunkDoc, error) {
	h := s.heads.get(key)
	if h == 0 {
		var d headHintDoc
		err := s.headHints.FindOne(ctx, bson.M{"_id": key}).Decode(&d)
		if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			return nil, err
		}
		h = d.N
	}
	var found *chunkDoc
	if h > 0 {
		c, err := s.chunk(ctx, key, h)
		if err != nil {
			return nil, err
		}
		if c == nil {
			// A stale hint below the oldest kept chunk (retention moved
			// on): walk up to the first chunk that exists.
			for i := int64(1); i <= relistScan && c == nil; i++ {
				if c, err = s.chunk(ctx, key, h+i); err != nil {
					return nil, err
				}
			}
			if c == nil {
				return nil, fmt.Errorf("chain %s: no chunk near hint %d", key, h)
			}
		}
		found = c
	} else {
		c, err := s.chunk(ctx, key, 1)
		if err != nil || c == nil {
			return nil, err
		}
		found = c
	}
	// Gallop: lo exists; find a missing hi.
	lo := found
	step := int64(1)
	var hi int64
	for {
		c, err := s.chunk(ctx, key, lo.N+step)
		if err != nil {
			return nil, err
		}
		if c == nil {
			hi = lo.N + step
			break
		}
		lo = c
		step *= 2
	}
	for hi-lo.N > 1 {
		mid := lo.N + (hi-lo.N)/2
		c, err := s.chunk(ctx, key, mid)
		if err != nil {
			return nil, err
		}
		if c == nil {
			hi = mid
		} else {
			lo = c
		}
	}
	s.heads.saw(lo)
	return lo, nil
}

// tail finds the oldest kept chunk number of key, given its head: chunks
// exist exactly from the tail to the head.
func (s *Store) tail(ctx context.Context, key string, head int64) (int64, error) {
	lo, hi := int64(0), head // chunk lo is missing (or 0), chunk hi exists
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		c, err := s.storedChunk(ctx, key, mid)
		if err != nil {
			return 0, err
		}
		if c == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

// chainWrite is one write's records (time order) for one chain, tagged
// with batch.
type chainWrite struct {
	key, batch string
	recs       []chunkRec
}

// appendAll lists each chainWrite's records in its chain as new chunks,
// claimed together in one ordered insert (one transaction on FerretDB, whose
// cost is per transaction more than per byte). An ordered insert stores a
// prefix of its documents when it stops, so a write cut short has listed
// whole chunks, in order; a redelivery lists the rest. When another replica
// has claimed a chunk number first, the chunks from there on are placed
// after its chunk and inserted again.
func (s *Store) appendAll(ctx context.Context, ws []chainWrite) error {
	var keys []string
	for _, w := range ws {
		if !slices.Contains(keys, w.key) {
			keys = append(keys, w.key)
		}
	}
	slices.Sort(keys) // locked in one order: writes never wait in a cycle
	for _, k := range keys {
		defer s.heads.lock(k)()
	}
	parts := s.split(ws)
	for len(parts) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		docs, stop, err := s.place(ctx, parts)
		if err != nil {
			return err
		}
		stored, dup, err := insertOrdered(ctx, s.chunks, docs, 0)
		if err != nil {
			return err
		}
		for _, d := range docs[:stored] {
			s.listed(ctx, d.(*chunkDoc))
		}
		if err := s.copyRecords(ctx, docs[:stored]); err != nil {
			return err
		}
		if !dup {
			return stop // nil: all listed
		}
		// Another replica claimed that number: learn its chunk, and place
		// the rest after it.
		c := docs[stored].(*chunkDoc)
		other, err := s.chunk(ctx, c.Key, c.N)
		if err != nil {
			return err
		}
		if other == nil {
			return fmt.Errorf("chunk %s: duplicate key but not found", c.ID)
		}
		s.heads.saw(other)
		parts = parts[stored:]
	}
	return nil
}

// split cuts each chainWrite into the records of one chunk each (at most
// chunkMax records and about chunkMaxBytes).
func (s *Store) split(ws []chainWrite) []chainWrite {
	var parts []chainWrite
	for _, w := range ws {
		for recs := w.recs; len(recs) > 0; {
			size, k := 0, 0
			for k < len(recs) && k < s.chunkMax {
				size += len(recs[k].LogBody) + 160
				if k > 0 && size > chunkMaxBytes {
					break
				}
				k++
			}
			parts = append(parts, chainWrite{w.key, w.batch, recs[:k]})
			recs = recs[k:]
		}
	}
	return parts
}

// place makes a chunk of each part, placed after its chain's head as this
// process knows it (or finds it by probing), the parts of one chain one
// after another. stop is the test hook's error when it stopped the write
// before a part (docs then has the chunks before it).
func (s *Store) place(ctx context.Context, parts []chainWrite) (docs []any, stop, err error) {
	prevs := map[string]*chunkDoc{}   // the chunk the next part of a chain follows
	pending := map[string]*chunkDoc{} // by _id: this round's chunks and those they follow
	docs = make([]any, 0, len(parts))
	for _, p := range parts {
		if s.beforeAppend != nil {
			if stop = s.beforeAppend(ctx, p.key); stop != nil {
				return docs, stop, nil
			}
		}
		prev, ok := prevs[p.key]
		if !ok {
			if prev = s.heads.newest(p.key); prev == nil {
				if prev, err = s.head(ctx, p.key); err != nil {
					return nil, nil, err
				}
			}
		}
		c := newChunk(p, prev)
		if prev != nil {
			pending[prev.ID] = prev
		}
		if err := s.setBlocks(ctx, c, pending); err != nil {
			return nil, nil, err
		}
		docs = append(docs, c)
		prevs[p.key] = c
		pending[c.ID] = c
	}
	return docs, nil, nil
}

// newChunk is the chunk of p's records following prev (nil: the first of
// its chain), without its blocks.
func newChunk(p chainWrite, prev *chunkDoc) *chunkDoc {
	c := &chunkDoc{Key: p.key, N: 1, Batch: p.batch, At: time.Now().UTC(),
		Records: p.recs, Count: int64(len(p.recs)), MinAt: p.recs[0].CreatedAt, MaxAt: p.recs[0].CreatedAt}
	for _, r := range p.recs {
		c.MinAt = minTime(c.MinAt, r.CreatedAt)
		c.MaxAt = maxTime(c.MaxAt, r.CreatedAt)
	}
	c.HiAt = c.MaxAt
	if prev != nil {
		c.N, c.Pos, c.HiAt = prev.N+1, prev.end(), maxTime(c.MaxAt, prev.HiAt)
	}
	c.ID = chunkID(p.key, c.N)
	return c
}

// listed notes a chunk this process stored: its chain's head, the cache,
// and every hintEvery chunks the chain's head hint.
func (s *Store) listed(ctx context.Context, c *chunkDoc) {
	s.heads.saw(c)
	s.cache.put(c)
	if c.N%hintEvery == 0 || c.N == 1 {
		s.storeHeadHint(ctx, c.Key, c.N)
	}
}

// insertOrdered inserts docs in one ordered insert. It returns how many
// were stored (a prefix) and whether the insert stopped at docs[stored]
// on a duplicate _id (a number another writer claimed first); only
// docs[from:] may be duplicates, any other failure is err.
func insertOrdered(ctx context.Context, coll *mongo.Collection, docs []any, from int) (stored int, dup bool, err error) {
	if len(docs) == 0 {
		return 0, false, nil
	}
	_, err = coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(true))
	if err == nil {
		return len(docs), false, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) != 1 {
		return 0, false, err
	}
	we := bwe.WriteErrors[0]
	if we.Index < from || we.Index >= len(docs) || !(isDuplicateCode(we.Code) || mongox.IsDuplicate(errors.New(we.Message))) {
		return 0, false, err
	}
	return we.Index, true, nil
}

// storeHeadHint stores the chunk number as the key's head hint, the
// starting point of processes that have not seen the chain yet (best effort: a lost or stale hint only
// costs a few more probes).
func (s *Store) storeHeadHint(ctx context.Context, key string, n int64) {
	_, _ = s.headHints.UpdateOne(ctx, bson.M{"_id": key}, bson.M{"$max": bson.M{"n": n}}, options.UpdateOne().SetUpsert(true))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
