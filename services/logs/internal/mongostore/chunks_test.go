package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/logs/storetest"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// copyingStore is a store that also writes log_records (the copy the
// tests check with checkRecordsDocuments).
func copyingStore(db *mongo.Database) *mongostore.Store {
	st := mongostore.New(db)
	st.SetRecordDocuments(true)
	return st
}

func newStore(t *testing.T) *mongostore.Store {
	t.Helper()
	s := testkit.Get(t)
	st := copyingStore(s.Mongo.Database(s.Database(t)))
	if err := st.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// testTag is the stream the test records come from.
const testTag = "0102030405"

// recs makes n records numbered from first, one millisecond apart, of
// type typ, alternating between two apps, as messages of the stream
// testTag (sequence k+1, plus a million per type).
func recs(first, n int, typ string) []logs.Record {
	out := make([]logs.Record, n)
	for i := range out {
		k := first + i
		app := []string{"A", "B"}[k%2]
		out[i] = logs.Record{AppID: "app" + app, App: app, Type: typ, LogBody: fmt.Sprint("body ", k), MsgID: fmt.Sprint("msg-", typ, "-", k),
			CreatedAt: t0.Add(time.Duration(k) * time.Millisecond), Stream: testTag, Seq: uint64(slices.Index(logs.Types, typ)*1e6 + k + 1)}
		if k%7 == 0 {
			out[i].MetricsID = "m7"
		}
	}
	return out
}

// id is the id of a stream record.
func id(r logs.Record) string { return logs.StreamRecordID(r.Stream, r.Seq) }

func insert(t *testing.T, st *mongostore.Store, rs []logs.Record) {
	t.Helper()
	per, err := st.InsertBatch(context.Background(), slices.Clone(rs))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range per {
		if e != nil && !errors.Is(e, logs.ErrDuplicate) {
			t.Fatalf("record %d: %v", i, e)
		}
	}
}

// bodies lists a query page by page (or by cursor) and returns the bodies.
func list(t *testing.T, st *mongostore.Store, q logs.Query) []string {
	t.Helper()
	page, err := st.List(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if page.ResumeBefore != "" {
		t.Fatalf("%+v: the page was cut short (resume before %s)", q, page.ResumeBefore)
	}
	out := make([]string, len(page.Records))
	for i, r := range page.Records {
		out[i] = r.LogBody
	}
	return out
}

// want returns the bodies of records [lo, hi) newest first that pass keep.
func want(lo, hi int, keep func(k int) bool) []string {
	var out []string
	for k := hi - 1; k >= lo; k-- {
		if keep == nil || keep(k) {
			out = append(out, fmt.Sprint("body ", k))
		}
	}
	return out
}

func checkOnce(t *testing.T, st *mongostore.Store, appID string, n int) {
	t.Helper()
	ids, err := storetest.All(context.Background(), st, appID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range ids {
		id := r.ID
		if seen[id] {
			t.Fatalf("chains of %q: record %s listed twice", appID, id)
		}
		seen[id] = true
	}
	if len(ids) != n {
		t.Fatalf("chains of %q: %d records listed, want %d", appID, len(ids), n)
	}
}

// Pages by number, by cursor, per app and with filters return exactly the
// records a newest-first listing of everything written has at those places,
// across chunk boundaries (batches of different sizes, one larger than a
// chunk).
func TestPagesAndCursors(t *testing.T) {
	st := newStore(t)
	mongostore.SetChunkMax(st, 64)
	all := recs(0, 600, "log")
	insert(t, st, all[:1])
	insert(t, st, all[1:100])
	insert(t, st, all[100:400]) // several chunks per chain
	insert(t, st, all[400:600])
	insert(t, st, recs(0, 40, "error"))
	checkOnce(t, st, "", 640)
	checkOnce(t, st, "appA", 320)

	ctx := context.Background()
	full := want(0, 600, nil)
	for _, c := range []struct{ page, limit int }{{1, 50}, {2, 50}, {7, 50}, {6, 100}, {7, 100}, {1, 500}, {2, 500}, {12, 50}, {13, 50}} {
		got := list(t, st, logs.Query{Type: "log", Skip: (c.page - 1) * c.limit, Limit: c.limit})
		lo := min((c.page-1)*c.limit, len(full))
		hi := min(lo+c.limit, len(full))
		if !slices.Equal(got, full[lo:hi]) {
			t.Fatalf("page %d of %d: got %d records %.3q…, want %d %.3q…", c.page, c.limit, len(got), got, hi-lo, full[lo:hi])
		}
	}
	appB := want(0, 600, func(k int) bool { return k%2 == 1 })
	if got := list(t, st, logs.Query{Type: "log", AppID: "appB", Skip: 150, Limit: 50}); !slices.Equal(got, appB[150:200]) {
		t.Fatalf("app page 4: %.3q, want %.3q", got, appB[150:200])
	}
	// A cursor 300 records deep, then the next page from the last record.
	cursor := all[299]
	got := list(t, st, logs.Query{Type: "log", BeforeID: id(cursor), Limit: 50})
	if !slices.Equal(got, want(249, 299, nil)) {
		t.Fatalf("before record 299: %.3q", got)
	}
	got = list(t, st, logs.Query{Type: "log", AppID: "appB", BeforeID: id(cursor), Limit: 3})
	if !slices.Equal(got, []string{"body 297", "body 295", "body 293"}) {
		t.Fatalf("app cursor: %q", got)
	}
	got = list(t, st, logs.Query{Type: "log", BeforeID: id(all[2]), Limit: 50})
	if !slices.Equal(got, []string{"body 1", "body 0"}) {
		t.Fatalf("cursor near the end: %q", got)
	}
	got = list(t, st, logs.Query{Type: "log", MetricsID: "m7", Skip: 10, Limit: 5})
	if !slices.Equal(got, want(0, 600, func(k int) bool { return k%7 == 0 })[10:15]) {
		t.Fatalf("metricsId filter: %q", got)
	}
	got = list(t, st, logs.Query{Type: "log", From: t0.Add(100 * time.Millisecond), To: t0.Add(110 * time.Millisecond), Limit: 50})
	if !slices.Equal(got, want(100, 110, nil)) {
		t.Fatalf("time range: %q", got)
	}
	if got := list(t, st, logs.Query{Type: "log", Skip: 600, Limit: 50}); len(got) != 0 {
		t.Fatalf("past the end: %q", got)
	}
	if got := list(t, st, logs.Query{Type: "db", Limit: 50}); len(got) != 0 {
		t.Fatalf("empty type: %q", got)
	}
	for _, c := range []struct {
		q    logs.Query
		want error
	}{
		{logs.Query{Type: "log", BeforeID: "0123456789abcdef01234567", Limit: 5}, logs.ErrNotFound},
		{logs.Query{Type: "log", BeforeID: logs.StreamRecordID(testTag, 999999), Limit: 5}, logs.ErrNotFound},
		{logs.Query{Type: "log", BeforeID: "0223456789abcdef01234567", Limit: 5}, logs.ErrNotFound},
		{logs.Query{Type: "log", BeforeID: "ff23456789abcdef01234567", Limit: 5}, logs.ErrNotFound},
		{logs.Query{Type: "error", BeforeID: id(cursor), Limit: 5}, logs.ErrCursorMismatch},
		{logs.Query{Type: "log", AppID: "appA", BeforeID: id(cursor), Limit: 5}, logs.ErrCursorMismatch},
	} {
		if _, err := st.List(ctx, c.q); !errors.Is(err, c.want) {
			t.Fatalf("%+v: %v, want %v", c.q, err, c.want)
		}
	}
}

// A read bounded by from stops at the first chunk with nothing that new
// in it or before it, not at the first chunk with nothing that new: records
// delivered late (a backlog after an outage, with old createdAt) make a
// chunk of old records between newer ones, and the newer records before it
// are still listed.
func TestFromBoundPassesLateChunks(t *testing.T) {
	st := newStore(t)
	mongostore.SetChunkMax(st, 4)
	all := recs(0, 30, "log")
	late := recs(100, 6, "log")
	for i := range late {
		late[i].CreatedAt = t0.Add(-time.Hour + time.Duration(i)*time.Millisecond)
	}
	insert(t, st, all[:10])
	insert(t, st, all[10:20])
	insert(t, st, late) // chunks of old records only
	insert(t, st, all[20:])

	from := t0.Add(5 * time.Millisecond)
	got := list(t, st, logs.Query{Type: "log", From: from, Limit: 100})
	if w := want(5, 30, nil); !slices.Equal(got, w) {
		t.Fatalf("from %v: %d records %q, want %d %q", from, len(got), got, len(w), w)
	}
	got = list(t, st, logs.Query{Type: "log", AppID: "appA", From: from, Limit: 100})
	if w := want(5, 30, func(k int) bool { return k%2 == 0 }); !slices.Equal(got, w) {
		t.Fatalf("app chain from %v: %q, want %q", from, got, w)
	}
	// The late records themselves, by a range around their createdAt.
	got = list(t, st, logs.Query{Type: "log", From: t0.Add(-2 * time.Hour), To: t0.Add(-time.Hour + 3*time.Millisecond), Limit: 100})
	if !slices.Equal(got, []string{"body 102", "body 101", "body 100"}) {
		t.Fatalf("the late records by time: %q", got)
	}
	// A from after every record ends at once, with nothing.
	if got := list(t, st, logs.Query{Type: "log", From: t0.Add(time.Hour), Limit: 100}); len(got) != 0 {
		t.Fatalf("from after everything: %q", got)
	}
}

// Filtered reads (to, from, metricsId, with and without a cursor or a
// page number) list exactly what filtering the whole newest-first listing
// gives, on a chain of small writes where some arrive late with old
// createdAt, so no time order holds between chunks, and metricsIds are
// rare, common or unique; this covers the blocks the reads skip.
func TestFilteredReadsWithLateWrites(t *testing.T) {
	st := newStore(t)
	mongostore.SetChunkMax(st, 3)
	rng := rand.New(rand.NewPCG(7, 11))
	metric := func(k int) string {
		switch {
		case k%50 == 0:
			return "rare"
		case k%3 == 0:
			return "common"
		case k%5 == 0:
			return fmt.Sprint("unique-", k)
		}
		return ""
	}
	var listing []logs.Record // newest first
	for k := 0; k < 400; {
		n := 1 + rng.IntN(7)
		w := recs(k, n, "log")
		for i := range w {
			w[i].MetricsID = metric(k + i)
		}
		if rng.IntN(6) == 0 { // a late write: its records are older than many listed before it
			back := time.Duration(1+rng.IntN(300)) * time.Millisecond
			for i := range w {
				w[i].CreatedAt = w[i].CreatedAt.Add(-back)
			}
		}
		insert(t, st, w)
		for i := range w {
			listing = append([]logs.Record{w[i]}, listing...)
		}
		k += n
	}
	if err := mongostore.CheckBlocks(context.Background(), st, mongostore.TypeKey("log")); err != nil {
		t.Fatal(err)
	}
	expect := func(q logs.Query) []string {
		var out []string
		from := 0
		if q.BeforeID != "" {
			from = slices.IndexFunc(listing, func(r logs.Record) bool { return id(r) == q.BeforeID }) + 1
		}
		skip := q.Skip
		for _, r := range listing[from:] {
			if (!q.From.IsZero() && r.CreatedAt.Before(q.From)) || (!q.To.IsZero() && !r.CreatedAt.Before(q.To)) ||
				(q.MetricsID != "" && r.MetricsID != q.MetricsID) {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			if len(out) == q.Limit {
				break
			}
			out = append(out, r.LogBody)
		}
		return out
	}
	for i := range 400 {
		q := logs.Query{Type: "log", Limit: 1 + rng.IntN(12)}
		if i%6 != 5 {
			q.To = t0.Add(time.Duration(rng.IntN(420)) * time.Millisecond)
		}
		if i%3 == 1 {
			q.From = q.To.Add(-time.Duration(1+rng.IntN(80)) * time.Millisecond)
			if q.To.IsZero() {
				q.From = t0.Add(time.Duration(rng.IntN(420)) * time.Millisecond)
			}
		}
		if i%2 == 0 {
			q.MetricsID = []string{"rare", "common", "absent", metric(5 * rng.IntN(80))}[rng.IntN(4)]
		}
		if i%4 == 2 {
			q.BeforeID = id(listing[rng.IntN(len(listing))])
		}
		if i%5 == 3 {
			q.Skip = rng.IntN(10)
		}
		got := list(t, st, q)
		if w := expect(q); !slices.Equal(got, w) {
			t.Fatalf("query %d %+v:\n got %q\nwant %q", i, q, got, w)
		}
	}
}

// Filtered reads deep in a long chain cost a logarithmic number of lookups,
// not one per newer chunk: 4,000 one-record chunks, each record with its
// own metricsId, read with no chunk cache.
func TestFilteredReadsDeepAreLogarithmic(t *testing.T) {
	st := newStore(t)
	st.SetChunkCache(0)
	mongostore.SetChunkMax(st, 1)
	const n = 4000
	rs := recs(0, n, "log")
	for i := range rs {
		rs[i].MetricsID = fmt.Sprint("req-", i)
	}
	for i := 0; i < n; i += 250 {
		insert(t, st, rs[i:i+250])
	}
	for _, c := range []struct {
		name string
		q    logs.Query
		want []string
		max  int64
	}{
		// Finding the head, about two lookups per level of 4,000 chunks
		// (12), then the 20 chunks of the page.
		{"to 100 ms", logs.Query{To: t0.Add(100 * time.Millisecond), Limit: 20}, want(80, 100, nil), 80},
		// Head, then skips over Bloom blocks of up to 256 chunks (above
		// that they are too full to keep) and their false positives.
		{"metricsId req-100", logs.Query{MetricsID: "req-100", Limit: 20}, want(100, 101, nil), 150},
		{"metricsId absent", logs.Query{MetricsID: "absent", Limit: 20}, nil, 150},
		{"metricsId and to", logs.Query{MetricsID: "req-7", To: t0.Add(time.Second), Limit: 20}, want(7, 8, nil), 150},
	} {
		reads := mongostore.ChunkReads(st)
		c.q.Type = "log"
		if got := list(t, st, c.q); !slices.Equal(got, c.want) {
			t.Fatalf("%s: %q, want %q", c.name, got, c.want)
		}
		used := mongostore.ChunkReads(st) - reads
		t.Logf("%s, 4,000 chunks: %d chunk lookups", c.name, used)
		if used > c.max {
			t.Fatalf("%s: %d chunk lookups, want at most %d (a scan reads up to 4,000)", c.name, used, c.max)
		}
	}
}

// A filtered read that reaches its bound of chunks returns what it found
// and a cursor; reading on from each cursor lists exactly what one
// unbounded read would, whatever the filter.
func TestFilterScanBoundResumes(t *testing.T) {
	st := newStore(t)
	mongostore.SetChunkMax(st, 1)
	rs := recs(0, 300, "log")
	for i := range rs {
		if i%17 == 0 {
			rs[i].MetricsID = "x"
		} else {
			rs[i].MetricsID = fmt.Sprint("other-", i)
		}
	}
	for i := 0; i < len(rs); i += 50 {
		insert(t, st, rs[i:i+50])
	}
	ctx := context.Background()
	for i, q := range []logs.Query{
		{Type: "log", MetricsID: "x", Limit: 100},
		{Type: "log", From: t0.Add(40 * time.Millisecond), To: t0.Add(90 * time.Millisecond), Limit: 100},
		{Type: "log", MetricsID: "x", To: t0.Add(250 * time.Millisecond), Limit: 100},
		{Type: "log", MetricsID: "x", Limit: 100},
	} {
		st.SetFilterScan(mongostore.DefaultFilterScan)
		whole := list(t, st, q)
		if len(whole) == 0 {
			t.Fatalf("%+v: nothing to list", q)
		}
		st.SetFilterScan(1 + 2*(i%2)) // 1 or 3 chunks past the first
		var got []string
		resumes := 0
		for {
			p, err := st.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Records {
				got = append(got, r.LogBody)
			}
			if p.ResumeBefore == "" {
				break
			}
			resumes++
			if resumes > len(rs) {
				t.Fatalf("%+v: does not end", q)
			}
			q.BeforeID = p.ResumeBefore
		}
		if resumes == 0 || !slices.Equal(got, whole) {
			t.Fatalf("%+v after %d resumes: %q, want %q", q, resumes, got, whole)
		}
	}
}

// A write that stops after its claims (before any chain, or between
// the type chain and the app chain) is completed by the retry of the same
// records, which lists each record once in every chain; records already
// complete are not listed again.
//
// Relist marks kept where older versions put them (log_heads) are found
// too: without them the second redelivery would list records again.
func TestRetryAfterCrashListsOnce(t *testing.T) {
	for _, crashAt := range []string{"before the chains", "between the chains", "between the chains, old relist marks", "before the records documents"} {
		t.Run(crashAt, func(t *testing.T) {
			st := newStore(t)
			insert(t, st, recs(0, 100, "log"))
			batch := recs(100, 200, "log")
			mongostore.FailBeforeAppend(st, func(key string) bool {
				return crashAt == "before the chains" || (strings.HasPrefix(crashAt, "between") && key != mongostore.TypeKey("log"))
			})
			mongostore.FailBeforeCopy(st, crashAt == "before the records documents")
			if _, err := st.InsertBatch(context.Background(), slices.Clone(batch)); err == nil {
				t.Fatal("the crash hook did not stop the write")
			}
			mongostore.FailBeforeAppend(st, nil)
			mongostore.FailBeforeCopy(st, false)
			// Other writes (another process) move the chains on meanwhile.
			other := copyingStore(st.Database())
			insert(t, other, recs(400, 30, "log"))
			insert(t, other, recs(430, 30, "log"))
			// The redelivery comes with other records, new and old.
			again := append(slices.Clone(batch), recs(300, 50, "log")...)
			again = append(again, recs(0, 10, "log")...)
			insert(t, st, again)
			if strings.HasSuffix(crashAt, "old relist marks") {
				if n, err := mongostore.MoveRelistMarksToHeads(context.Background(), st); err != nil || n == 0 {
					t.Fatalf("moved %d relist marks (%v)", n, err)
				}
			}
			insert(t, st, batch) // a second redelivery changes nothing
			// nor does one to a replica that has seen none of it
			insert(t, copyingStore(st.Database()), batch)
			checkOnce(t, st, "", 410)
			checkOnce(t, st, "appA", 205)
			checkOnce(t, st, "appB", 205)
			checkRecordsDocuments(t, st)
			for _, key := range []string{mongostore.TypeKey("log"), mongostore.AppKey("appA", "log"), mongostore.AppKey("appB", "log")} {
				if err := mongostore.CheckBlocks(context.Background(), st, key); err != nil {
					t.Fatal(err)
				}
			}
			got := list(t, st, logs.Query{Type: "log", Limit: 500})
			if len(got) != 410 {
				t.Fatalf("%d records listed, want 410", len(got))
			}
			// A relisted record works as a cursor in both chains: the page
			// after it is what follows it in the full listing.
			cur := batch[50]
			for _, q := range []logs.Query{{Type: "log"}, {Type: "log", AppID: cur.AppID}} {
				q.Limit = 500
				full := list(t, st, q)
				at := slices.Index(full, cur.LogBody)
				q.BeforeID, q.Limit = id(cur), 5
				if after := list(t, st, q); at < 0 || !slices.Equal(after, full[at+1:min(at+6, len(full))]) {
					t.Fatalf("%+v: after %q got %q, want %q", q, cur.LogBody, after, full[at+1:min(at+6, len(full))])
				}
			}
		})
	}
}

// Replicas writing the same chains at once each claim their own chunks:
// every record is listed once and the pages still add up.
func TestConcurrentWriters(t *testing.T) {
	s := testkit.Get(t)
	db := s.Mongo.Database(s.Database(t))
	const writers, batches, per = 3, 8, 40
	var wg sync.WaitGroup
	for w := range writers {
		st := copyingStore(db)
		mongostore.SetChunkMax(st, 16)
		wg.Go(func() {
			for b := range batches {
				rs := recs((w*batches+b)*per, per, "log")
				if b%2 == 1 { // writers' clocks apart: some chunks older than the one before
					for i := range rs {
						rs[i].CreatedAt = rs[i].CreatedAt.Add(-time.Duration(w+1) * time.Second)
					}
				}
				if per, err := st.InsertBatch(context.Background(), rs); err != nil || slices.ContainsFunc(per, func(e error) bool { return e != nil }) {
					t.Errorf("writer %d: %v %v", w, err, per)
					return
				}
			}
		})
	}
	wg.Wait()
	st := copyingStore(db)
	total := writers * batches * per
	checkOnce(t, st, "", total)
	checkRecordsDocuments(t, st)
	checkOnce(t, st, "appA", total/2)
	for _, key := range []string{mongostore.TypeKey("log"), mongostore.AppKey("appA", "log"), mongostore.AppKey("appB", "log")} {
		if err := mongostore.CheckBlocks(context.Background(), st, key); err != nil {
			t.Fatal(err)
		}
	}
	full := list(t, st, logs.Query{Type: "log", Limit: total})
	if len(full) != total {
		t.Fatalf("one page of everything: %d records", len(full))
	}
	for p := range total / 50 {
		if got := list(t, st, logs.Query{Type: "log", Skip: p * 50, Limit: 50}); !slices.Equal(got, full[p*50:p*50+50]) {
			t.Fatalf("page %d differs from the full listing", p+1)
		}
	}
}

// Retention removes whole chunks older than the cutoff, keeps the newest
// chunk of every chain, and pages after it still line up.
func TestRetention(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	if _, err := st.EnsureApps(ctx, nil); err != nil {
		t.Fatal(err)
	}
	insert(t, st, recs(0, 100, "log"))
	insert(t, st, recs(100, 100, "log"))
	insert(t, st, recs(200, 100, "log"))
	n, err := st.DeleteBefore(ctx, t0.Add(150*time.Millisecond))
	if err != nil || n != 100 {
		t.Fatalf("deleted %d (%v), want the first chunk's 100", n, err)
	}
	checkOnce(t, st, "", 200)
	if got := list(t, st, logs.Query{Type: "log", Skip: 150, Limit: 100}); !slices.Equal(got, want(100, 150, nil)) {
		t.Fatalf("last page after retention: %q", got)
	}
	if n, err := st.DeleteBefore(ctx, t0.Add(time.Hour)); err != nil || n != 100 {
		t.Fatalf("second sweep deleted %d (%v), want 100 (the newest chunk stays)", n, err)
	}
	if got := list(t, st, logs.Query{Type: "log", Limit: 2}); !slices.Equal(got, want(298, 300, nil)) {
		t.Fatalf("newest after retention: %q", got)
	}
	insert(t, st, recs(300, 10, "log"))
	checkOnce(t, st, "", 110)
	checkRecordsDocuments(t, st)
}

// Retention visits every chain in the database: the records of an app
// removed from the configuration (LOGS_APPS) age out like the others,
// although the process deleting them never ensured that app.
func TestRetentionOfAnAppNoLongerConfigured(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	apps, err := st.EnsureApps(ctx, []string{"KEPT", "DROPPED"})
	if err != nil {
		t.Fatal(err)
	}
	batch := func(first int) []logs.Record {
		rs := recs(first, 100, "log")
		for i := range rs {
			a := apps[(first+i)%2]
			rs[i].AppID, rs[i].App = a.ID, a.Name
		}
		return rs
	}
	for _, first := range []int{0, 100, 200} {
		insert(t, st, batch(first))
	}
	// A process configured with KEPT only.
	later := copyingStore(st.Database())
	if _, err := later.EnsureApps(ctx, []string{"KEPT"}); err != nil {
		t.Fatal(err)
	}
	if _, err := later.DeleteBefore(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Every chain keeps only its newest chunk: the last batch's 50 records
	// of each app.
	for _, a := range apps {
		got, err := storetest.All(ctx, later, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 50 {
			t.Errorf("app %s: %d records after retention, want the newest chunk's 50", a.Name, len(got))
		}
		for _, r := range got {
			if r.CreatedAt.Before(t0.Add(200 * time.Millisecond)) {
				t.Errorf("app %s: record of %s kept", a.Name, r.CreatedAt)
			}
		}
	}
}

// TestRecordFieldsRoundTrip: chunks keep no field their chain already says
// (type, app), so every field must come back whole from both listings, on
// a replica that never saw the apps being created too.
func TestRecordFieldsRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	apps, err := st.EnsureApps(ctx, []string{"SERVER-APP-X", "SERVER-APP-Y"})
	if err != nil {
		t.Fatal(err)
	}
	var in []logs.Record
	for i := range 12 {
		a := apps[i%2]
		r := logs.Record{AppID: a.ID, App: a.Name, Type: logs.Types[i%len(logs.Types)], LogBody: fmt.Sprint("round trip ", i),
			MsgID: fmt.Sprint("rt-", i), CreatedAt: t0.Add(time.Duration(i) * time.Second)}
		if i%3 == 0 {
			r.MetricsID = fmt.Sprint("metric-", i)
		}
		if i < 6 { // the others as if written over HTTP
			r.Stream, r.Seq = testTag, uint64(100+i)
		}
		in = append(in, r)
	}
	if per, err := st.InsertBatch(ctx, in); err != nil || slices.ContainsFunc(per, func(e error) bool { return e != nil }) {
		t.Fatal(err, per)
	}
	for i, r := range in {
		if i < 6 && r.ID != id(r) || len(r.ID) != 24 || slices.ContainsFunc(in[:i], func(o logs.Record) bool { return o.ID == r.ID }) {
			t.Fatalf("record %d: id %q", i, r.ID)
		}
	}
	other := copyingStore(st.Database())
	for _, reader := range []*mongostore.Store{st, other} {
		for _, appID := range []string{"", apps[0].ID, apps[1].ID} {
			got, err := storetest.All(ctx, reader, appID)
			if err != nil {
				t.Fatal(err)
			}
			var want []logs.Record
			for _, r := range in {
				if appID == "" || r.AppID == appID {
					r.MsgID, r.Stream, r.Seq = "", "", 0
					want = append(want, r)
				}
			}
			key := func(a, b logs.Record) int { return strings.Compare(a.ID, b.ID) }
			slices.SortFunc(got, key)
			slices.SortFunc(want, key)
			if !slices.EqualFunc(got, want, func(a, b logs.Record) bool {
				same := a.CreatedAt.Equal(b.CreatedAt)
				a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
				return same && a == b
			}) {
				t.Fatalf("listing %q:\n got %+v\nwant %+v", appID, got, want)
			}
		}
	}
}

// Records written over HTTP (no stream) are never taken for redeliveries
// and get ids of their write, which work as cursors in both listings; the
// stream sequence, not the message id, is a stream record's idempotency
// key, and it is scoped by the stream tag (a stream made again starts its
// sequences over).
func TestHTTPWritesAndStreamTags(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	var web []logs.Record
	for i := range 30 {
		r := recs(i, 1, "log")[0]
		r.Stream, r.Seq = "", 0
		web = append(web, r)
	}
	insert(t, st, web[:10])
	insert(t, st, web[10:30])
	insert(t, st, web[10:20]) // the same requests again: new records
	checkOnce(t, st, "", 40)
	full := list(t, st, logs.Query{Type: "log", Limit: 100})
	if want := append(want(10, 20, nil), want(0, 30, nil)...); !slices.Equal(full, want) {
		t.Fatalf("listing: %q, want %q", full, want)
	}
	// Cursors: the ids InsertBatch set.
	rs := slices.Clone(web[:5])
	if _, err := st.InsertBatch(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if got := list(t, st, logs.Query{Type: "log", BeforeID: rs[3].ID, Limit: 3}); !slices.Equal(got, []string{"body 2", "body 1", "body 0"}) {
		t.Fatalf("HTTP cursor: %q", got)
	}
	if got := list(t, st, logs.Query{Type: "log", AppID: "appA", BeforeID: rs[4].ID, Limit: 3}); !slices.Equal(got, []string{"body 2", "body 0", "body 18"}) {
		t.Fatalf("HTTP cursor in the app chain: %q", got)
	}
	if _, err := st.List(ctx, logs.Query{Type: "log", AppID: "appB", BeforeID: rs[4].ID, Limit: 3}); !errors.Is(err, logs.ErrCursorMismatch) {
		t.Fatalf("HTTP cursor of another app: %v", err)
	}

	// The same sequence in two streams: two records; again in one: one.
	a := recs(100, 1, "error")[0]
	b := a
	b.Stream, b.LogBody = "0a0b0c0d0e", "other stream"
	again := a
	again.LogBody = "redelivered with another body" // cannot happen; shows the key
	per, err := st.InsertBatch(ctx, []logs.Record{a, b})
	if err != nil || per[0] != nil || per[1] != nil {
		t.Fatal(err, per)
	}
	if per, err = st.InsertBatch(ctx, []logs.Record{again}); err != nil || !errors.Is(per[0], logs.ErrDuplicate) {
		t.Fatalf("same stream and sequence: %v %v, want a duplicate", err, per)
	}
	if got := list(t, st, logs.Query{Type: "error", Limit: 10}); !slices.Equal(got, []string{"body 100", "other stream"}) && !slices.Equal(got, []string{"other stream", "body 100"}) {
		t.Fatalf("error listing: %q", got)
	}
	// One message twice in one write: listed once, the second a duplicate.
	twice := recs(300, 2, "error")
	twice = append(twice, twice[0])
	if per, err = st.InsertBatch(ctx, twice); err != nil || per[0] != nil || per[1] != nil || !errors.Is(per[2], logs.ErrDuplicate) {
		t.Fatalf("a message twice in a write: %v %v", err, per)
	}
	if got := list(t, st, logs.Query{Type: "error", Limit: 10}); len(got) != 4 {
		t.Fatalf("error listing after a message twice in a write: %q", got)
	}
	// A record whose stream sequence cannot make an id is refused alone.
	bad := recs(200, 2, "error")
	bad[0].Seq = logs.MaxStreamSeq + 1
	if per, err = st.InsertBatch(ctx, bad); err != nil || per[0] == nil || per[1] != nil {
		t.Fatalf("bad sequence: %v %v", err, per)
	}
}

// A redelivery, or a cursor, of a sequence far behind the newest (older than
// the slots a process keeps in memory) is still recognised, by reading its
// block's slots again.
func TestOldSequencesBeyondTheSlotCache(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	old := recs(0, 10, "log")
	insert(t, st, old)
	far := recs(10, 10, "log")
	for i := range far {
		far[i].Seq += 200 * 1024 // 200 blocks of sequences later
	}
	insert(t, st, far)
	per, err := st.InsertBatch(ctx, slices.Clone(old))
	if err != nil || slices.ContainsFunc(per, func(e error) bool { return !errors.Is(e, logs.ErrDuplicate) }) {
		t.Fatalf("old redelivery: %v %v, want duplicates", err, per)
	}
	checkOnce(t, st, "", 20)
	if got := list(t, st, logs.Query{Type: "log", BeforeID: id(old[3]), Limit: 5}); !slices.Equal(got, want(0, 3, nil)) {
		t.Fatalf("old cursor: %q", got)
	}
}
