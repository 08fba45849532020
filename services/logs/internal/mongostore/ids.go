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
//     "s|<stream tag>|<range>|<k>": slot k of a range of 64 stream
//     sequences lists the sequences this write took in the range. Slots of
//     a range are numbered densely from 1 and claimed by inserting them
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
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/logs/internal/logs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// rangeSeqs is how many stream sequences one range of slots covers: a
// range holds at most that many slots (one record per write when records
// trickle in), and finding a cold sequence reads its range's slots up to
// the one holding it. A write of 500 records claims about 8 slots, in the
// same insert as its batch document.
const rangeSeqs = 64

// slotCacheMax bounds the ranges whose slots a process keeps; the least
// recently used quarter goes when it is reached.
const slotCacheMax = 1024

// probeParallel: slots of a cold range are read this many at a time.
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

// streamSeq is a record from the stream: its index in the write, and its
// sequence.
type streamSeq struct {
	i   int
	seq uint64
}

// claim stores the write's batch document and claims its records' stream
// sequences. It returns, for each record whose sequence a lower slot holds
// (a redelivery), the write that took it.
func (s *Store) claim(ctx context.Context, bd batchDoc, byRange map[string][]streamSeq) (map[int]owner, error) {
	ranges := make([]string, 0, len(byRange))
	for r := range byRange {
		ranges = append(ranges, r)
	}
	slices.Sort(ranges)
	defer s.slots.lockRanges(ranges)()

	batch := strings.TrimPrefix(bd.ID, "b|")
	olds := map[int]owner{}
	pending := ranges
	// known: the slots of each range from 1 on, as far as this write has
	// seen them (the cache's, then what it claims or finds claimed); the
	// cache may drop a range meanwhile, this may not.
	known := map[string][]*slotDoc{}
	for _, b := range ranges {
		known[b] = s.slots.get(b)
	}
	learn := func(b string, d *slotDoc) {
		known[b] = append(known[b][:len(known[b]):len(known[b])], d)
		s.slots.add(b, len(known[b]), d)
	}
	withBatch := true // the batch document is still to insert (docs[0])
	type claimed struct {
		rng string
		k   int
		d   *slotDoc
	}
	for {
		// Claim the next slot of each pending range, with the sequences no
		// known slot holds.
		var docs []any
		var claims []claimed
		if withBatch {
			docs = append(docs, bd)
		}
		for _, b := range pending {
			have := known[b]
			d := &slotDoc{Batch: batch, At: bd.At, seqs: map[uint64]uint32{}}
			for _, x := range byRange[b] {
				if o, ok := ownerIn(have, x.seq); ok {
					olds[x.i] = o
					continue
				}
				d.Q = binary.AppendUvarint(d.Q, x.seq%rangeSeqs)
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
		off := len(docs) - len(claims)                         // 1 while the batch document is in docs
		done, dup, err := insertOrdered(ctx, s.ids, docs, off) // docs[:done] are stored
		if err != nil {
			return nil, err
		}
		var lost *claimed
		if dup {
			lost = &claims[done-off]
		}
		withBatch = false
		pending = pending[:0:0]
		for j, c := range claims {
			if j+off < done {
				learn(c.rng, c.d)
			} else {
				pending = append(pending, c.rng)
			}
		}
		if lost != nil {
			// Another write claimed that slot first: learn it, and try the
			// next one.
			d, err := s.readSlot(ctx, lost.rng, lost.k)
			if err != nil {
				return nil, err
			}
			if d == nil {
				return nil, fmt.Errorf("slot %s: duplicate key but not found", lost.d.ID)
			}
			learn(lost.rng, d)
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
		if o, ok, err = s.ownerOf(ctx, rangeOf(hex.EncodeToString(id[1:6]), seq), seq); err != nil || !ok {
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
	bd, err := s.newBatchDoc(ctx, batch, rs)
	if err != nil {
		return nil, err
	}
	ids, byRange := recordIDs(batch, rs, per)
	olds, err := s.claim(ctx, bd, byRange)
	if err != nil {
		return nil, err
	}
	var ws chainWrites
	again := redeliveries{s: s, states: map[chainBatch]*chainState{}, firstWrites: map[string]*batchDoc{}}
	for i, r := range rs {
		if per[i] != nil {
			continue
		}
		c := toChunkRec(ids[i], r)
		o, dup := olds[i]
		if !dup {
			ws.add(chainBatch{typeKey(r.Type), batch}, c)
			ws.add(chainBatch{appKey(r.AppID, r.Type), batch}, c)
			continue
		}
		per[i] = logs.ErrDuplicate
		if err := again.add(ctx, o, c); err != nil {
			return nil, err
		}
	}
	if err := again.mark(ctx, &ws); err != nil {
		return nil, err
	}
	if err := s.appendAll(ctx, ws.sorted()); err != nil {
		return nil, err
	}
	return per, nil
}

// newBatchDoc is the batch document of a write of rs: the chains it lists
// records in, each at the chunk after the head this process knows (warmed
// first, so that the intended chunk numbers are close to where the records
// land), and each record's two chains.
func (s *Store) newBatchDoc(ctx context.Context, batch string, rs []logs.Record) (batchDoc, error) {
	chainIdx := map[string]int{}
	bd := batchDoc{ID: batchDocID(batch), At: time.Now().UTC()}
	for _, r := range rs {
		for _, key := range []string{typeKey(r.Type), appKey(r.AppID, r.Type)} {
			if _, ok := chainIdx[key]; !ok {
				if s.heads.get(key) == 0 {
					if _, err := s.head(ctx, key); err != nil {
						return bd, err
					}
				}
				chainIdx[key] = len(bd.Chains)
				bd.Chains = append(bd.Chains, chunkID(key, s.heads.get(key)+1))
			}
		}
		bd.Recs = binary.AppendUvarint(bd.Recs, uint64(chainIdx[typeKey(r.Type)]))
		bd.Recs = binary.AppendUvarint(bd.Recs, uint64(chainIdx[appKey(r.AppID, r.Type)]))
	}
	return bd, nil
}

// recordIDs sets the id of each record of a write (in rs too) and groups
// the stream records by range of sequences. A record with no possible id
// gets an error in per, one that came twice in the write ErrDuplicate the
// second time.
func recordIDs(batch string, rs []logs.Record, per []error) ([]bson.ObjectID, map[string][]streamSeq) {
	ids := make([]bson.ObjectID, len(rs))
	byRange := map[string][]streamSeq{}
	seen := map[bson.ObjectID]bool{}
	for i, r := range rs {
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
			rng := rangeOf(r.Stream, r.Seq)
			byRange[rng] = append(byRange[rng], streamSeq{i, r.Seq})
		}
	}
	return ids, byRange
}

// chainBatch names the records a write lists in one chain, under its batch
// (or batch+"r" for a relisting).
type chainBatch struct{ key, batch string }

// chainWrites gathers a write's records per chain and batch.
type chainWrites struct {
	recs  map[chainBatch][]chunkRec
	order []chainBatch
}

func (w *chainWrites) add(k chainBatch, c chunkRec) {
	if w.recs == nil {
		w.recs = map[chainBatch][]chunkRec{}
	}
	if _, ok := w.recs[k]; !ok {
		w.order = append(w.order, k)
	}
	w.recs[k] = append(w.recs[k], c)
}

// sorted returns the writes by chain and batch, each's records in time
// order.
func (w *chainWrites) sorted() []chainWrite {
	slices.SortFunc(w.order, func(a, b chainBatch) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.batch, b.batch)) })
	out := make([]chainWrite, len(w.order))
	for i, k := range w.order {
		recs := w.recs[k]
		slices.SortStableFunc(recs, func(a, b chunkRec) int { return a.CreatedAt.Compare(b.CreatedAt) })
		out[i] = chainWrite{k.key, k.batch, recs}
	}
	return out
}

// redeliveries finds, for the records of a write that earlier writes took
// (the same messages), the chains where those writes did not list them.
type redeliveries struct {
	s           *Store
	states      map[chainBatch]*chainState // by chain and first write
	firstWrites map[string]*batchDoc
}

// add checks both chains of record c, which the write o took first.
func (r *redeliveries) add(ctx context.Context, o owner, c chunkRec) error {
	first, ok := r.firstWrites[o.batch]
	if !ok {
		var err error
		if first, err = r.s.readBatch(ctx, o.batch); err != nil {
			return err
		}
		r.firstWrites[o.batch] = first
	}
	if first == nil {
		return nil // gone with the retention: so is the record
	}
	tr, ar, ok := first.rec(o.index)
	if !ok {
		return fmt.Errorf("write %s: no record %d", o.batch, o.index)
	}
	for _, at := range []chainRef{tr, ar} {
		w := chainBatch{at.key, at.ref.Batch}
		st := r.states[w]
		if st == nil {
			var err error
			if st, err = r.s.chainState(ctx, at.key, at.ref); err != nil {
				return err
			}
			r.states[w] = st
		}
		if !st.listed[c.ID] {
			st.records = append(st.records, c)
		}
	}
	return nil
}

// mark writes the relist mark of each chain where records are missing
// (unless one is there) and adds those records to ws, under the first
// write's batch + "r".
func (r *redeliveries) mark(ctx context.Context, ws *chainWrites) error {
	for w, st := range r.states {
		if len(st.records) == 0 {
			continue
		}
		if st.relist == nil {
			h, err := r.s.head(ctx, w.key)
			if err != nil {
				return err
			}
			d := relistDoc{ID: relistID(w.key, w.batch), From: 1, At: time.Now().UTC()}
			if h != nil {
				d.From = h.N + 1
			}
			if _, err := r.s.ids.InsertOne(ctx, d); err != nil && !mongox.IsDuplicate(err) {
				return err
			}
		}
		for _, c := range st.records {
			ws.add(chainBatch{w.key, w.batch + "r"}, c)
		}
	}
	return nil
}

func toChunkRec(id bson.ObjectID, r logs.Record) chunkRec {
	// Milliseconds, as BSON stores them: a chunk in the cache then holds
	// what the server holds.
	return chunkRec{ID: id, AppID: r.AppID, LogBody: r.LogBody, MetricsID: r.MetricsID, CreatedAt: r.CreatedAt.UTC().Truncate(time.Millisecond)}
}
