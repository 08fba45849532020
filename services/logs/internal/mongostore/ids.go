package mongostore

// Writes, record ids and exactly once (the collection log_ids).
//
// A write (one InsertBatch) stores, before any chunk:
//
//   - a batch document "b|<batch>": the chains it lists records in, the
//     chunk number it means to start at in each, and for each of its
//     records which of those chains are the record's (a cursor finds the
//     record from there);
//   - for the records that came from the stream, slot documents
//     "s|<stream tag>|<block>|<k>": slot k of a block of 64 stream
//     sequences lists the sequences this write took in the block. Slots of
//     a block are numbered densely from 1 and claimed by inserting them
//     (the unique _id decides between replicas), and a sequence belongs to
//     the lowest slot that lists it.
//
// A writer knows every slot below the one it claims (it read them, or
// claimed them, in order), so it never claims a sequence a lower slot holds:
// that message is a redelivery, and its slot names the write that took it
// and the record's index there. The chunks of that write say whether it got
// to list the record (chunks.go); if not, it is listed again.
//
// Record ids (logs.StreamRecordID and batchRecordID) say where to look: a
// stream record's id holds its stream tag and sequence (then its slot, then
// its write); an HTTP record's id holds its write and index.

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/logs/internal/logs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// slotBlock is how many stream sequences one block of slots covers: a
// block holds at most that many slots (one record per write when records
// trickle in), and finding a cold sequence reads its block's slots up to
// the one holding it. A write of 500 records claims about 8 slots, in the
// same insert as its batch document.
const slotBlock = 64

// slotCacheMax bounds the blocks whose slots a process keeps; the least
// recently used quarter goes when it is reached.
const slotCacheMax = 1024

// probeParallel: slots of a cold block are read this many at a time.
const probeParallel = 16

// batchDoc is a write's intent.
type batchDoc struct {
	ID string `bson:"_id"` // "b|" + batch
	// Chains: chunkID(key, n) for each chain the write lists records in,
	// n the chunk number it meant to start at.
	Chains []string `bson:"k"`
	// Recs: for each record of the write, in order, the indexes in Chains
	// of its type chain and its app chain (uvarints).
	Recs []byte    `bson:"r"`
	At   time.Time `bson:"at"`
}

func batchDocID(batch string) string { return "b|" + batch }

// rec returns the type chain and app chain refs of record i of the write.
func (d *batchDoc) rec(i uint32) (typ, app chainRef, ok bool) {
	b := d.Recs
	for j := uint32(0); ; j++ {
		t, n1 := binary.Uvarint(b)
		if n1 <= 0 {
			return chainRef{}, chainRef{}, false
		}
		a, n2 := binary.Uvarint(b[n1:])
		if n2 <= 0 {
			return chainRef{}, chainRef{}, false
		}
		b = b[n1+n2:]
		if j < i {
			continue
		}
		tr, ok1 := d.chain(t)
		ar, ok2 := d.chain(a)
		return tr, ar, ok1 && ok2
	}
}

func (d *batchDoc) chain(i uint64) (chainRef, bool) {
	if i >= uint64(len(d.Chains)) {
		return chainRef{}, false
	}
	c := d.Chains[i]
	h := strings.LastIndexByte(c, '#')
	if h < 0 {
		return chainRef{}, false
	}
	n, err := strconv.ParseInt(c[h+1:], 10, 64)
	if err != nil {
		return chainRef{}, false
	}
	return chainRef{key: c[:h], ref: ref{N: n, Batch: strings.TrimPrefix(d.ID, "b|")}}, true
}

// chainRef: a chain and where a write meant to list a record in it.
type chainRef struct {
	key string
	ref ref
}

// batchRecordID is the id of record i of an HTTP write.
func batchRecordID(batch string, i int) (bson.ObjectID, error) {
	var id bson.ObjectID
	b, err := hex.DecodeString(batch)
	if err != nil || len(b) != 7 || i < 0 || int64(i) > 1<<32-1 {
		return id, fmt.Errorf("no record id for write %q index %d", batch, i)
	}
	id[0] = logs.IDKindBatch
	copy(id[1:8], b)
	binary.BigEndian.PutUint32(id[8:], uint32(i))
	return id, nil
}

// slotDoc claims stream sequences for a write.
type slotDoc struct {
	ID    string    `bson:"_id"` // "s|<tag>|<block>|<k>"
	Batch string    `bson:"b"`
	Q     []byte    `bson:"q"` // uvarint pairs: sequence - block start, index in the write
	At    time.Time `bson:"at"`

	seqs map[uint64]uint32 // decoded Q
}

func slotID(block string, k int) string { return "s|" + block + "|" + strconv.Itoa(k) }

// blockOf names the block of seq in the stream tagged tag.
func blockOf(tag string, seq uint64) string {
	return tag + "|" + strconv.FormatUint(seq/slotBlock, 10)
}

func (d *slotDoc) decode() error {
	d.seqs = map[uint64]uint32{}
	parts := strings.Split(d.ID, "|")
	if len(parts) != 4 {
		return fmt.Errorf("slot %q: malformed id", d.ID)
	}
	block, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return fmt.Errorf("slot %q: %w", d.ID, err)
	}
	for b := d.Q; len(b) > 0; {
		off, n1 := binary.Uvarint(b)
		if n1 <= 0 {
			return fmt.Errorf("slot %q: malformed sequences", d.ID)
		}
		i, n2 := binary.Uvarint(b[n1:])
		if n2 <= 0 || off >= slotBlock || i > 1<<32-1 {
			return fmt.Errorf("slot %q: malformed sequences", d.ID)
		}
		d.seqs[block*slotBlock+off] = uint32(i)
		b = b[n1+n2:]
	}
	return nil
}

// slots caches the slots of recently used blocks (they never change once
// claimed), densely from slot 1.
type slots struct {
	mu     sync.Mutex
	blocks map[string]*cachedBlock
	tick   uint64
	lock   map[string]*sync.Mutex
}

type cachedBlock struct {
	slots []*slotDoc
	used  uint64
}

func (c *slots) get(block string) []*slotDoc {
	c.mu.Lock()
	defer c.mu.Unlock()
	cb := c.blocks[block]
	if cb == nil {
		return nil
	}
	c.tick++
	cb.used = c.tick
	return cb.slots
}

// add records slot k of block (ignored unless it is the next one).
func (c *slots) add(block string, k int, d *slotDoc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cb := c.blocks[block]
	if cb == nil {
		if k != 1 {
			return
		}
		if len(c.blocks) >= slotCacheMax {
			c.evict()
		}
		cb = &cachedBlock{}
		c.blocks[block] = cb
	}
	if len(cb.slots) != k-1 {
		return
	}
	cb.slots = append(cb.slots, d)
	c.tick++
	cb.used = c.tick
}

// evict drops the least recently used quarter of the blocks.
func (c *slots) evict() {
	type use struct {
		key  string
		used uint64
	}
	all := make([]use, 0, len(c.blocks))
	for k, cb := range c.blocks {
		all = append(all, use{k, cb.used})
	}
	slices.SortFunc(all, func(a, b use) int { return cmp.Compare(a.used, b.used) })
	for _, u := range all[:len(all)/4+1] {
		delete(c.blocks, u.key)
		delete(c.lock, u.key)
	}
}

// lockBlocks serialises this process's claims in the given blocks (sorted,
// so two writes never wait for each other in opposite orders).
func (c *slots) lockBlocks(blocks []string) func() {
	var ms []*sync.Mutex
	c.mu.Lock()
	for _, b := range blocks {
		m := c.lock[b]
		if m == nil {
			m = &sync.Mutex{}
			c.lock[b] = m
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

// readSlot reads slot k of block (nil when there is none).
func (s *Store) readSlot(ctx context.Context, block string, k int) (*slotDoc, error) {
	d, err := byID[slotDoc](ctx, s.ids, slotID(block, k))
	if err != nil || d == nil {
		return nil, err
	}
	if err := d.decode(); err != nil {
		return nil, err
	}
	return d, nil
}

// ownerOf finds the write that took seq in block (ok false: none did):
// in the cached slots of the block, then in the next ones, read
// probeParallel at a time until one is missing. A sequence is in one slot at
// most (a writer leaves out those a lower slot holds), so the search stops
// there.
func (s *Store) ownerOf(ctx context.Context, block string, seq uint64) (owner, bool, error) {
	have := s.slots.get(block)
	if o, ok := ownerIn(have, seq); ok {
		return o, true, nil
	}
	for {
		base := len(have)
		got := make([]*slotDoc, probeParallel)
		errs := make([]error, probeParallel)
		var wg sync.WaitGroup
		for i := range probeParallel {
			wg.Go(func() { got[i], errs[i] = s.readSlot(ctx, block, base+1+i) })
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
			s.slots.add(block, len(have), d)
			if o, ok := ownerIn(have[len(have)-1:], seq); ok {
				return o, true, nil
			}
		}
	}
}

// streamSeq is a record from the stream: its index in the write, and its
// sequence.
type streamSeq struct {
	i   int
	seq uint64
}

// claim stores the write's batch document and claims its records' stream
// sequences. It returns, for each record whose sequence a lower slot holds
// (a redelivery), the write that took it.
func (s *Store) claim(ctx context.Context, bd batchDoc, byBlock map[string][]streamSeq) (map[int]owner, error) {
	blocks := make([]string, 0, len(byBlock))
	for b := range byBlock {
		blocks = append(blocks, b)
	}
	slices.Sort(blocks)
	defer s.slots.lockBlocks(blocks)()

	batch := strings.TrimPrefix(bd.ID, "b|")
	olds := map[int]owner{}
	pending := blocks
	// known: the slots of each block from 1 on, as far as this write has
	// seen them (the cache's, then what it claims or finds claimed); the
	// cache may drop a block meanwhile, this may not.
	known := map[string][]*slotDoc{}
	for _, b := range blocks {
		known[b] = s.slots.get(b)
	}
	learn := func(b string, d *slotDoc) {
		known[b] = append(known[b][:len(known[b]):len(known[b])], d)
		s.slots.add(b, len(known[b]), d)
	}
	withBatch := true // the batch document is still to insert (docs[0])
	type claimed struct {
		block string
		k     int
		d     *slotDoc
	}
	for {
		// Claim the next slot of each pending block, with the sequences no
		// known slot holds.
		var docs []any
		var claims []claimed
		if withBatch {
			docs = append(docs, bd)
		}
		for _, b := range pending {
			have := known[b]
			d := &slotDoc{Batch: batch, At: bd.At, seqs: map[uint64]uint32{}}
			for _, x := range byBlock[b] {
				if o, ok := ownerIn(have, x.seq); ok {
					olds[x.i] = o
					continue
				}
				d.Q = binary.AppendUvarint(d.Q, x.seq%slotBlock)
				d.Q = binary.AppendUvarint(d.Q, uint64(x.i))
				d.seqs[x.seq] = uint32(x.i)
			}
			if len(d.seqs) == 0 {
				continue
			}
			d.ID = slotID(b, len(have)+1)
			claims = append(claims, claimed{b, len(have) + 1, d})
			docs = append(docs, d)
		}
		if len(docs) == 0 {
			return olds, nil
		}
		off := len(docs) - len(claims) // 1 while the batch document is in docs
		done := len(docs)              // docs[:done] are stored
		var lost *claimed
		if _, err := s.ids.InsertMany(ctx, docs, options.InsertMany().SetOrdered(true)); err != nil {
			var bwe mongo.BulkWriteException
			if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) != 1 {
				return nil, err
			}
			we := bwe.WriteErrors[0]
			if we.Index < off || we.Index >= len(docs) || !(isDuplicateCode(we.Code) || mongox.IsDuplicate(errors.New(we.Message))) {
				return nil, err
			}
			done, lost = we.Index, &claims[we.Index-off]
		}
		withBatch = false
		pending = pending[:0:0]
		for j, c := range claims {
			if j+off < done {
				learn(c.block, c.d)
			} else {
				pending = append(pending, c.block)
			}
		}
		if lost != nil {
			// Another write claimed that slot first: learn it, and try the
			// next one.
			d, err := s.readSlot(ctx, lost.block, lost.k)
			if err != nil {
				return nil, err
			}
			if d == nil {
				return nil, fmt.Errorf("slot %s: duplicate key but not found", lost.d.ID)
			}
			learn(lost.block, d)
		}
	}
}

// readBatch reads a write's batch document (nil when there is none).
func (s *Store) readBatch(ctx context.Context, batch string) (*batchDoc, error) {
	return byID[batchDoc](ctx, s.ids, batchDocID(batch))
}

// whereIs finds the write that took record id and the chains it meant to
// list it in (ok false: no such record).
func (s *Store) whereIs(ctx context.Context, id bson.ObjectID) (typ, app chainRef, ok bool, err error) {
	var o owner
	switch id[0] {
	case logs.IDKindStream:
		var sb [8]byte
		copy(sb[2:], id[6:])
		seq := binary.BigEndian.Uint64(sb[:])
		var err error
		if o, ok, err = s.ownerOf(ctx, blockOf(hex.EncodeToString(id[1:6]), seq), seq); err != nil || !ok {
			return typ, app, false, err
		}
	case logs.IDKindBatch:
		o = owner{batch: hex.EncodeToString(id[1:8]), index: binary.BigEndian.Uint32(id[8:])}
	default:
		return typ, app, false, nil
	}
	bd, err := s.readBatch(ctx, o.batch)
	if err != nil || bd == nil {
		return typ, app, false, err
	}
	typ, app, ok = bd.rec(o.index)
	return typ, app, ok, nil
}

// InsertBatch implements logs.Store. The batch document and the slot claims
// go first (one ordered insert), then the records are listed in their
// chains. A redelivered record is listed again only in a chain where the
// write that first took it did not list it.
func (s *Store) InsertBatch(ctx context.Context, rs []logs.Record) ([]error, error) {
	per := make([]error, len(rs))
	if len(rs) == 0 {
		return per, nil
	}
	batch := newBatchID()
	// Warm the head cache of each chain first, so that the intended chunk
	// numbers are close to where the records land.
	chainIdx := map[string]int{}
	bd := batchDoc{ID: batchDocID(batch), At: time.Now().UTC()}
	for _, r := range rs {
		for _, key := range []string{typeKey(r.Type), appKey(r.AppID, r.Type)} {
			if _, ok := chainIdx[key]; ok {
				continue
			}
			if s.heads.get(key) == 0 {
				if _, err := s.head(ctx, key); err != nil {
					return nil, err
				}
			}
			chainIdx[key] = len(bd.Chains)
			bd.Chains = append(bd.Chains, chunkID(key, s.heads.get(key)+1))
		}
	}
	ids := make([]bson.ObjectID, len(rs))
	byBlock := map[string][]streamSeq{}
	seen := map[bson.ObjectID]bool{} // one message twice in a write: the second is a duplicate
	for i, r := range rs {
		bd.Recs = binary.AppendUvarint(bd.Recs, uint64(chainIdx[typeKey(r.Type)]))
		bd.Recs = binary.AppendUvarint(bd.Recs, uint64(chainIdx[appKey(r.AppID, r.Type)]))
		var err error
		if r.Stream == "" {
			ids[i], err = batchRecordID(batch, i)
		} else {
			ids[i], err = bson.ObjectIDFromHex(logs.StreamRecordID(r.Stream, r.Seq))
		}
		if err != nil {
			per[i] = fmt.Errorf("record %d: stream %q sequence %d: no record id", i, r.Stream, r.Seq)
			continue
		}
		rs[i].ID = ids[i].Hex()
		if seen[ids[i]] {
			per[i] = logs.ErrDuplicate
			continue
		}
		seen[ids[i]] = true
		if r.Stream != "" {
			byBlock[blockOf(r.Stream, r.Seq)] = append(byBlock[blockOf(r.Stream, r.Seq)], streamSeq{i, r.Seq})
		}
	}
	olds, err := s.claim(ctx, bd, byBlock)
	if err != nil {
		return nil, err
	}

	type chainBatch struct{ key, batch string }
	writes := map[chainBatch][]chunkRec{}
	var order []chainBatch
	add := func(w chainBatch, c chunkRec) {
		if _, ok := writes[w]; !ok {
			order = append(order, w)
		}
		writes[w] = append(writes[w], c)
	}
	states := map[chainBatch]*chainState{} // by chain and first write
	firstWrites := map[string]*batchDoc{}
	for i, r := range rs {
		if per[i] != nil {
			continue
		}
		c := toChunkRec(ids[i], r)
		inApp := c
		inApp.AppID = ""
		o, dup := olds[i]
		if !dup {
			add(chainBatch{typeKey(r.Type), batch}, c)
			add(chainBatch{appKey(r.AppID, r.Type), batch}, inApp)
			continue
		}
		// A redelivery (the same message: the same record): each chain is
		// checked for the first write.
		per[i] = logs.ErrDuplicate
		first, ok := firstWrites[o.batch]
		if !ok {
			if first, err = s.readBatch(ctx, o.batch); err != nil {
				return nil, err
			}
			firstWrites[o.batch] = first
		}
		if first == nil {
			continue // gone with the retention: so is the record
		}
		tr, ar, ok := first.rec(o.index)
		if !ok {
			return nil, fmt.Errorf("write %s: no record %d", o.batch, o.index)
		}
		for _, x := range []struct {
			at chainRef
			c  chunkRec
		}{{tr, c}, {ar, inApp}} {
			w := chainBatch{x.at.key, x.at.ref.Batch}
			st := states[w]
			if st == nil {
				if st, err = s.chainState(ctx, x.at.key, x.at.ref); err != nil {
					return nil, err
				}
				states[w] = st
			}
			if !st.listed[ids[i]] {
				st.records = append(st.records, x.c)
			}
		}
	}
	// Relistings first: mark each, then list it under the first write's
	// batch + "r".
	for w, st := range states {
		if len(st.records) == 0 {
			continue
		}
		if st.relist == nil {
			h, err := s.head(ctx, w.key)
			if err != nil {
				return nil, err
			}
			d := relistDoc{ID: relistID(w.key, w.batch), From: 1, At: time.Now().UTC()}
			if h != nil {
				d.From = h.N + 1
			}
			if _, err := s.hints.InsertOne(ctx, d); err != nil && !mongox.IsDuplicate(err) {
				return nil, err
			}
		}
		for _, c := range st.records {
			add(chainBatch{w.key, w.batch + "r"}, c)
		}
	}
	slices.SortFunc(order, func(a, b chainBatch) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.batch, b.batch)) })
	ws := make([]chainWrite, len(order))
	for i, w := range order {
		recs := writes[w]
		slices.SortStableFunc(recs, func(a, b chunkRec) int { return a.CreatedAt.Compare(b.CreatedAt) })
		ws[i] = chainWrite{w.key, w.batch, recs}
	}
	if err := s.appendAll(ctx, ws); err != nil {
		return nil, err
	}
	return per, nil
}

func toChunkRec(id bson.ObjectID, r logs.Record) chunkRec {
	// Milliseconds, as BSON stores them: a chunk in the cache then holds
	// what the server holds.
	c := chunkRec{ID: id, AppID: r.AppID, LogBody: r.LogBody, CreatedAt: r.CreatedAt.UTC().Truncate(time.Millisecond)}
	if r.MetricsID != "" {
		m := r.MetricsID
		c.MetricsID = &m
	}
	return c
}
