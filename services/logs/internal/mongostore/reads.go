package mongostore

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/services/logs/internal/logs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DefaultFilterScan bounds the chunks a filtered query (metricsId, from,
// to) looks at for one page, skipped ones included; a page cut short by it
// ends with the records found and a cursor to read on from (logs.Page).
const DefaultFilterScan = 20000

// record rebuilds a record listed in key's chain: the type (and in an app
// chain the app) come from the key, the app's name from its id.
func (s *Store) record(ctx context.Context, key string, c chunkRec) (logs.Record, error) {
	typ, appID := splitKey(key)
	if c.AppID != "" {
		appID = c.AppID
	}
	name, err := s.appName(ctx, appID)
	if err != nil {
		return logs.Record{}, err
	}
	return logs.Record{ID: c.ID.Hex(), AppID: appID, App: name, Type: typ, LogBody: c.LogBody, MetricsID: c.MetricsID,
		CreatedAt: c.CreatedAt.UTC()}, nil
}

func isAppKey(key string) bool { return strings.HasPrefix(key, "a.") }

// splitKey is the inverse of typeKey and appKey.
func splitKey(key string) (typ, appID string) {
	if rest, ok := strings.CutPrefix(key, "a."); ok {
		if i := strings.LastIndexByte(rest, '.'); i >= 0 {
			return rest[i+1:], rest[:i]
		}
	}
	return strings.TrimPrefix(key, "t."), ""
}

// appName is the name of the App record id: from the apps EnsureApps saw,
// else read once (an app another replica added); "" when there is none.
func (s *Store) appName(ctx context.Context, id string) (string, error) {
	s.appsMu.Lock()
	name, ok := s.appNames[id]
	s.appsMu.Unlock()
	if ok {
		return name, nil
	}
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return "", nil // not an App record id (tests list made-up ids)
	}
	var d appDoc
	err = s.apps.FindOne(ctx, bson.M{"_id": oid}).Decode(&d)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return "", err
	}
	s.appsMu.Lock()
	s.appNames[id] = d.Name
	s.appsMu.Unlock()
	return d.Name, nil
}

func queryKey(q logs.Query) string {
	if q.AppID != "" {
		return appKey(q.AppID, q.Type)
	}
	return typeKey(q.Type)
}

// List implements logs.Store: newest first in the chain of the query's key.
// Without filters, page p is found by position (a bisection over chunk
// numbers); a cursor is found through its id document; filters walk the
// chain from there.
func (s *Store) List(ctx context.Context, q logs.Query) (logs.Page, error) {
	recs, resume, err := s.list(ctx, q)
	return logs.Page{Records: recs, ResumeBefore: resume}, err
}

func (s *Store) list(ctx context.Context, q logs.Query) ([]logs.Record, string, error) {
	l := listing{s: s, q: q, key: queryKey(q), sk: newSkipper(q), out: make([]logs.Record, 0, q.Limit),
		filtered: q.MetricsID != "" || !q.From.IsZero() || !q.To.IsZero() || q.Search != nil}
	c, idx, err := l.start(ctx)
	if err != nil || c == nil {
		return l.out, "", err
	}
	// Filtered reads count the chunks they move to past the first, skipped
	// ones too: a read resumed from a cursor always gets further.
	for looked := 0; c != nil; looked++ {
		if l.filtered {
			// No record of c or of any chunk before it is as new as from.
			if !q.From.IsZero() && c.HiAt.Before(q.From) {
				break
			}
			if back := l.sk.skip(c); back > 0 {
				if l.stop(looked) {
					return l.out, c.Records[0].ID.Hex(), nil // nothing in c matches
				}
				if c, err = s.chunk(ctx, l.key, c.N-back); err != nil {
					return nil, "", err
				}
				idx = math.MaxInt
				continue
			}
		}
		if err := l.take(ctx, c, idx); err != nil {
			return nil, "", err
		}
		if len(l.out) >= q.Limit {
			break
		}
		if l.filtered && l.stop(looked) {
			return l.out, c.Records[0].ID.Hex(), nil // c is read to its oldest record
		}
		if q.Search != nil && looked >= 1 {
			// A search reads chunk after chunk: from its third chunk on,
			// the next ones are read several at a time.
			s.readAhead(ctx, l.key, c.N-1)
		}
		if c, err = s.chunk(ctx, l.key, c.N-1); err != nil {
			return nil, "", err
		}
		idx = math.MaxInt
	}
	return l.out, "", nil
}

// listing is one List call under way.
type listing struct {
	s        *Store
	q        logs.Query
	key      string // the chain read
	filtered bool   // from, to, metricsId or q: the read walks the chain
	sk       skipper
	out      []logs.Record
}

// start finds the chunk and the index in it of the newest record to look
// at (nil: none). Without filters, page p is found by position (a
// bisection over chunk numbers), and q.Skip is then spent; a cursor is
// found through its id documents; a filtered read starts at the head.
func (l *listing) start(ctx context.Context) (*chunkDoc, int, error) {
	if l.q.BeforeID != "" {
		// A cursor page needs no head: it starts at the cursor's chunk.
		c, i, err := l.s.locate(ctx, l.q, l.key)
		return c, i - 1, err
	}
	head, err := l.s.head(ctx, l.key)
	if err != nil || head == nil {
		return nil, 0, err
	}
	if l.filtered {
		return head, len(head.Records) - 1, nil
	}
	top := head.end() - int64(l.q.Skip) // records [0, top) remain
	if top <= 0 {
		return nil, 0, nil
	}
	c, err := l.s.findPos(ctx, l.key, head, top-1)
	if err != nil || c == nil {
		return nil, 0, err
	}
	l.q.Skip = 0
	return c, int(top - 1 - c.Pos), nil
}

// stop says the read has looked at as much as it may for one page. The
// time budget never stops it in its first chunk: a page resumed from a
// cursor at the start of a chunk finds nothing there, and must reach at
// least the chunk before to move on.
func (l *listing) stop(looked int) bool {
	return looked >= l.s.filterScan || (looked > 0 && !l.q.Deadline.IsZero() && !time.Now().Before(l.q.Deadline))
}

// take adds the matching records of c from index idx down, skipping the
// first q.Skip of them, until the page is full.
func (l *listing) take(ctx context.Context, c *chunkDoc, idx int) error {
	for i := min(idx, len(c.Records)-1); i >= 0 && len(l.out) < l.q.Limit; i-- {
		r := c.Records[i]
		if !matches(l.q, r) {
			continue
		}
		if l.q.Skip > 0 {
			l.q.Skip--
			continue
		}
		rec, err := l.s.record(ctx, l.key, r)
		if err != nil {
			return err
		}
		l.out = append(l.out, rec)
	}
	return nil
}

func matches(q logs.Query, r chunkRec) bool {
	if q.MetricsID != "" && r.MetricsID != q.MetricsID {
		return false
	}
	if !q.From.IsZero() && r.CreatedAt.Before(q.From) {
		return false
	}
	if !q.To.IsZero() && !r.CreatedAt.Before(q.To) {
		return false
	}
	if q.Search != nil {
		return q.Search.Match(r.LogBody, r.MetricsID)
	}
	return true
}

// findPos returns the chunk holding position p (0 = the oldest record ever
// listed in the chain), or nil when p is older than the oldest kept chunk.
func (s *Store) findPos(ctx context.Context, key string, head *chunkDoc, p int64) (*chunkDoc, error) {
	if p >= head.Pos {
		return head, nil
	}
	// Chunk numbers below lo hold positions <= p or are gone; hi's chunk
	// starts after p. Positions grow with chunk numbers.
	lo, hi := int64(0), head.N
	var best *chunkDoc
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		c, err := s.chunk(ctx, key, mid)
		if err != nil {
			return nil, err
		}
		switch {
		case c == nil: // below the oldest kept chunk
			lo = mid
		case c.Pos > p:
			hi = mid
		default:
			lo, best = mid, c
		}
	}
	if best != nil && best.N == lo {
		return best, nil
	}
	return s.chunk(ctx, key, lo)
}

// locate finds the cursor record in key's chain: its chunk and index.
func (s *Store) locate(ctx context.Context, q logs.Query, key string) (*chunkDoc, int, error) {
	oid, err := bson.ObjectIDFromHex(q.BeforeID)
	if err != nil {
		return nil, 0, logs.ErrNotFound
	}
	tr, ar, ok, err := s.whereIs(ctx, oid)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return nil, 0, logs.ErrNotFound
	}
	typ, _ := splitKey(tr.key)
	_, appID := splitKey(ar.key)
	if typ != q.Type || (q.AppID != "" && appID != q.AppID) {
		return nil, 0, logs.ErrCursorMismatch
	}
	r := tr.ref
	if q.AppID != "" {
		r = ar.ref
	}
	c, i, err := s.findIn(ctx, key, r.N, r.Batch, oid)
	if c != nil || err != nil {
		return c, i, err
	}
	// Listed again by a later delivery?
	rd, err := s.relistMark(ctx, key, r.Batch)
	if err != nil {
		return nil, 0, err
	}
	if rd == nil {
		return nil, 0, logs.ErrNotFound
	}
	if c, i, err = s.findIn(ctx, key, rd.From, r.Batch+"r", oid); c != nil || err != nil {
		return c, i, err
	}
	return nil, 0, logs.ErrNotFound
}

// findIn looks for record id among the chunks a write (batch) claimed in
// key's chain from chunk from on (nil when it is not there).
func (s *Store) findIn(ctx context.Context, key string, from int64, batch string, id bson.ObjectID) (*chunkDoc, int, error) {
	var first time.Time
	for n := max(from, 1); n < from+relistScan; n++ {
		c, err := s.chunk(ctx, key, n)
		if err != nil || c == nil {
			return nil, 0, err
		}
		if first.IsZero() {
			first = c.At
		}
		if c.At.Sub(first) > relistWindow {
			return nil, 0, nil
		}
		if c.Batch != batch {
			continue
		}
		for i, rec := range c.Records {
			if rec.ID == id {
				return c, i, nil
			}
		}
	}
	return nil, 0, nil
}

// DeleteBefore implements logs.Store: whole chunks whose newest record is
// older than t go, oldest first, in every chain (the newest chunk of a
// chain stays: it anchors the positions); then the batch and slot
// documents of writes that old.
func (s *Store) DeleteBefore(ctx context.Context, t time.Time) (int64, error) {
	var deleted int64
	keys, err := s.chainKeys(ctx)
	if err != nil {
		return 0, err
	}
	for _, key := range keys {
		head, err := s.head(ctx, key)
		if err != nil {
			return deleted, err
		}
		if head == nil {
			continue
		}
		n, err := s.tail(ctx, key, head.N)
		if err != nil {
			return deleted, err
		}
		for ; n < head.N; n++ {
			c, err := s.storedChunk(ctx, key, n)
			if err != nil {
				return deleted, err
			}
			if c == nil {
				continue
			}
			if !c.MaxAt.Before(t) {
				break
			}
			// The records document first: a pass stopped between the two
			// deletes leaves the chunk, which the next pass deletes.
			if !isAppKey(key) {
				if _, err := s.records.DeleteOne(ctx, bson.M{"_id": c.ID}); err != nil {
					return deleted, err
				}
			}
			if _, err := s.chunks.DeleteOne(ctx, bson.M{"_id": c.ID}); err != nil {
				return deleted, err
			}
			if key[0] == 't' {
				deleted += c.Count
			}
		}
	}
	s.cache.dropBefore(t)
	if _, err := s.ids.DeleteMany(ctx, bson.M{"at": bson.M{"$lt": t.UTC()}}); err != nil {
		return deleted, err
	}
	// Relist marks written by earlier versions, in log_heads (head hints
	// have no "at": they stay).
	if _, err := s.headHints.DeleteMany(ctx, bson.M{"at": bson.M{"$lt": t.UTC()}}); err != nil {
		return deleted, err
	}
	return deleted, nil
}

// chainKeys lists every chain in the database: one per type, and one per
// (app, type) for every App record ever stored (log_apps keeps them all),
// not only the apps this process is configured with: the records of an app
// removed from LOGS_APPS age out like the others.
func (s *Store) chainKeys(ctx context.Context) ([]string, error) {
	s.appsMu.Lock()
	apps := slices.Clone(s.appIDs)
	s.appsMu.Unlock()
	cur, err := s.apps.Find(ctx, bson.M{}, options.Find().SetProjection(bson.M{"_id": 1}))
	if err != nil {
		return nil, err
	}
	var docs []struct {
		ID bson.ObjectID `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	for _, d := range docs {
		if id := d.ID.Hex(); !slices.Contains(apps, id) {
			apps = append(apps, id)
		}
	}
	var keys []string
	for _, typ := range logs.Types {
		keys = append(keys, typeKey(typ))
		for _, a := range apps {
			keys = append(keys, appKey(a, typ))
		}
	}
	return keys, nil
}

// searchReadAhead is how many chunks a search reads at once.
const searchReadAhead = 16

// readAhead puts chunks n, n-1, ... (searchReadAhead of them) in the cache,
// reading those not there concurrently: a search spends most of its time
// waiting for chunk after chunk, and the server and the decoding of one
// chunk overlap with the others. Errors are left for the read that follows.
func (s *Store) readAhead(ctx context.Context, key string, n int64) {
	if s.cache == nil || s.cache.max <= 0 {
		return // nowhere to keep them (LOGS_CHUNK_CACHE_MB=0)
	}
	if s.cache.get(chunkID(key, n)) != nil {
		return // read ahead already, or recently
	}
	var wg sync.WaitGroup
	for i := n; i > n-searchReadAhead && i >= 1; i-- {
		if s.cache.get(chunkID(key, i)) != nil {
			continue
		}
		wg.Go(func() { _, _ = s.chunk(ctx, key, i) })
	}
	wg.Wait()
}
