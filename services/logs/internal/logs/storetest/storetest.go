// Package storetest is the contract every logs.Store implementation keeps:
// an implementation's tests call Run with a function that makes an empty
// store on a real server, and the suite checks through the interface alone
// what the service relies on (exactly-once ids, pages, cursors, filters,
// search, stats, exports, retention, dead letters). All lists a store's
// records for tests that count them.
//
// The records of the suite are written in createdAt order, so "newest
// first" means the same for a store that lists by write order (the chunk
// store) and for one that sorts by createdAt (a per-record indexed store).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/logs/internal/logs"
)

// All returns every record of st listed in the chains of every type (of
// one app when appID is set), page after page, once per listing: a
// record listed twice comes twice, so tests count lost and duplicated
// records with it.
func All(ctx context.Context, st logs.Store, appID string) ([]logs.Record, error) {
	const page = 1000
	var out []logs.Record
	for _, typ := range logs.Types {
		for skip := 0; ; skip += page {
			p, err := st.List(ctx, logs.Query{Type: typ, AppID: appID, Skip: skip, Limit: page})
			if err != nil {
				return nil, fmt.Errorf("%s records %d on: %w", typ, skip, err)
			}
			out = append(out, p.Records...)
			if len(p.Records) < page {
				break
			}
		}
	}
	return out, nil
}

// t0 is the createdAt of the suite's first record.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// tag is the stream the suite's records come from.
const tag = "0a1b2c3d4e"

// fixture is a store with two apps and a model of what it holds.
type fixture struct {
	t    *testing.T
	st   logs.Store
	apps []logs.App
	// written: every stored record, in createdAt (and write) order.
	written []logs.Record
}

func newFixture(t *testing.T, newStore func(t *testing.T) logs.Store) *fixture {
	t.Helper()
	st := newStore(t)
	apps, err := st.EnsureApps(context.Background(), []string{"SERVER-APP-A", "SERVER-APP-B"})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, st: st, apps: apps}
}

// rec is record k of the suite: of type typ, app k%2, createdAt t0+k ms,
// a metricsId on every seventh, from the stream with sequence k+1 plus a
// million per type.
func (f *fixture) rec(k int, typ string) logs.Record {
	a := f.apps[k%2]
	r := logs.Record{AppID: a.ID, App: a.Name, Type: typ, LogBody: fmt.Sprintf("record %d of %s", k, typ),
		MsgID: fmt.Sprint("msg-", typ, "-", k), CreatedAt: t0.Add(time.Duration(k) * time.Millisecond),
		Stream: tag, Seq: uint64(slices.Index(logs.Types, typ)*1_000_000 + k + 1)}
	if k%7 == 0 {
		r.MetricsID = fmt.Sprint("m", k%3)
	}
	return r
}

func (f *fixture) recs(first, n int, typ string) []logs.Record {
	out := make([]logs.Record, n)
	for i := range out {
		out[i] = f.rec(first+i, typ)
	}
	return out
}

// insert stores rs, expecting each to be new.
func (f *fixture) insert(rs []logs.Record) []logs.Record {
	f.t.Helper()
	rs = slices.Clone(rs)
	per, err := f.st.InsertBatch(context.Background(), rs)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(per) != len(rs) {
		f.t.Fatalf("%d results for %d records", len(per), len(rs))
	}
	for i, e := range per {
		if e != nil {
			f.t.Fatalf("record %d: %v", i, e)
		}
	}
	f.written = append(f.written, rs...)
	return rs
}

// expect is the model's answer to q (no cursor, no skip beyond q.Skip).
func (f *fixture) expect(q logs.Query, before string) []logs.Record {
	var out []logs.Record
	skip := q.Skip
	started := before == ""
	for i := len(f.written) - 1; i >= 0 && len(out) < q.Limit; i-- {
		r := f.written[i]
		if !started {
			started = r.ID == before
			continue
		}
		if r.Type != q.Type || (q.AppID != "" && r.AppID != q.AppID) || (q.MetricsID != "" && r.MetricsID != q.MetricsID) ||
			(!q.From.IsZero() && r.CreatedAt.Before(q.From)) || (!q.To.IsZero() && !r.CreatedAt.Before(q.To)) ||
			(q.Search != nil && !q.Search.Match(r.LogBody, r.MetricsID)) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		out = append(out, r)
	}
	return out
}

// list runs q and fails unless it answers exactly what the model says,
// field by field.
func (f *fixture) list(q logs.Query) logs.Page {
	f.t.Helper()
	p, err := f.st.List(context.Background(), q)
	if err != nil {
		f.t.Fatalf("%+v: %v", q, err)
	}
	if p.ResumeBefore != "" {
		f.t.Fatalf("%+v: a partial page (resume before %s)", q, p.ResumeBefore)
	}
	sameRecords(f.t, fmt.Sprintf("%+v", q), p.Records, f.expect(q, q.BeforeID))
	return p
}

// sameRecords compares listings field by field (createdAt to the
// millisecond, what every store keeps; MsgID, Stream and Seq are not
// listed).
func sameRecords(t *testing.T, what string, got, want []logs.Record) {
	t.Helper()
	norm := func(rs []logs.Record) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = fmt.Sprintf("%s|%s|%s|%s|%s|%q|%s", r.ID, r.AppID, r.App, r.Type, r.MetricsID, r.LogBody,
				r.CreatedAt.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano))
		}
		return out
	}
	g, w := norm(got), norm(want)
	if !slices.Equal(g, w) {
		t.Fatalf("%s:\n got %d %q\nwant %d %q", what, len(g), g, len(w), w)
	}
}

// Run runs the contract suite; newStore returns an empty store (its own
// database) on a real server.
func Run(t *testing.T, newStore func(t *testing.T) logs.Store) {
	t.Run("EnsureApps", func(t *testing.T) { testEnsureApps(t, newStore) })
	t.Run("IDs", func(t *testing.T) { testIDs(t, newStore) })
	t.Run("ExactlyOnce", func(t *testing.T) { testExactlyOnce(t, newStore) })
	t.Run("Pages", func(t *testing.T) { testPages(t, newStore) })
	t.Run("Cursors", func(t *testing.T) { testCursors(t, newStore) })
	t.Run("Filters", func(t *testing.T) { testFilters(t, newStore) })
	t.Run("Export", func(t *testing.T) { testExport(t, newStore) })
	t.Run("Stats", func(t *testing.T) { testStats(t, newStore) })
	t.Run("StatsBounds", func(t *testing.T) { testStatsBounds(t, newStore) })
	t.Run("DeleteBefore", func(t *testing.T) { testDeleteBefore(t, newStore) })
	t.Run("DeadLetters", func(t *testing.T) { testDeadLetters(t, newStore) })
}

// EnsureApps is idempotent, keeps the order of the names, and several
// callers at once agree on the ids.
func testEnsureApps(t *testing.T, newStore func(t *testing.T) logs.Store) {
	ctx := context.Background()
	st := newStore(t)
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	names := logs.DefaultAppNames("ACME")
	results := make([][]logs.App, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			apps, err := st.EnsureApps(ctx, names)
			if err != nil {
				t.Error(err)
			}
			results[i] = apps
		})
	}
	wg.Wait()
	backward := slices.Clone(names)
	slices.Reverse(backward)
	again, err := st.EnsureApps(ctx, backward)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for j, name := range names {
		a := results[0][j]
		if a.Name != name || a.ID == "" || ids[a.ID] {
			t.Fatalf("app %d: %+v", j, a)
		}
		ids[a.ID] = true
		for i := range results {
			if results[i][j] != a {
				t.Fatalf("caller %d app %d: %+v, another got %+v", i, j, results[i][j], a)
			}
		}
		if b := again[len(names)-1-j]; b != a {
			t.Fatalf("again, app %q: %+v, first %+v", name, b, a)
		}
	}
}

// A stream record's id follows from its stream and sequence; a record
// without a stream gets a fresh id of the same shape each time, even for
// the same content; a record whose sequence cannot make an id is refused
// alone. Every field comes back.
func testIDs(t *testing.T, newStore func(t *testing.T) logs.Store) {
	f := newFixture(t, newStore)
	ctx := context.Background()
	rs := f.recs(0, 12, logs.TypeLog)
	for i := 6; i < 12; i++ {
		rs[i].Stream, rs[i].Seq = "", 0 // as if written with POST /log
	}
	rs[11].LogBody, rs[11].MetricsID = rs[10].LogBody, rs[10].MetricsID
	rs = f.insert(rs)
	seen := map[string]bool{}
	for i, r := range rs {
		if len(r.ID) != 24 || seen[r.ID] || strings.Trim(r.ID, "0123456789abcdef") != "" {
			t.Fatalf("record %d: id %q", i, r.ID)
		}
		seen[r.ID] = true
		if i < 6 && r.ID != logs.StreamRecordID(r.Stream, r.Seq) {
			t.Fatalf("stream record %d: id %s, want %s", i, r.ID, logs.StreamRecordID(r.Stream, r.Seq))
		}
	}
	f.list(logs.Query{Type: logs.TypeLog, Limit: 50})
	for _, a := range f.apps {
		f.list(logs.Query{Type: logs.TypeLog, AppID: a.ID, Limit: 50})
	}

	bad := f.recs(100, 2, logs.TypeLog)
	bad[0].Seq = logs.MaxStreamSeq + 1
	per, err := f.st.InsertBatch(ctx, bad)
	if err != nil || per[0] == nil || per[1] != nil {
		t.Fatalf("a bad sequence: %v %v, want the first refused alone", err, per)
	}
	f.written = append(f.written, bad[1])
	f.list(logs.Query{Type: logs.TypeLog, Limit: 50})
}

// A redelivered stream record (the same stream and sequence, in a later
// write or twice in one) is reported ErrDuplicate and listed once; the same
// sequence in another stream is another record.
func testExactlyOnce(t *testing.T, newStore func(t *testing.T) logs.Store) {
	f := newFixture(t, newStore)
	ctx := context.Background()
	first := f.insert(f.recs(0, 40, logs.TypeError))
	again := append(f.recs(0, 40, logs.TypeError)[10:30], f.recs(40, 10, logs.TypeError)...)
	again = append(again, f.rec(45, logs.TypeError)) // twice in one write
	per, err := f.st.InsertBatch(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range per {
		dup := i < 20 || i == len(again)-1
		if dup != errors.Is(e, logs.ErrDuplicate) || (!dup && e != nil) {
			t.Fatalf("record %d (%s): %v", i, again[i].LogBody, e)
		}
		if dup && again[i].ID != logs.StreamRecordID(again[i].Stream, again[i].Seq) {
			t.Fatalf("duplicate %d: id %q", i, again[i].ID)
		}
	}
	f.written = append(f.written, again[20:30]...)
	other := f.rec(50, logs.TypeError)
	other.Stream, other.Seq = "0f0e0d0c0b", first[0].Seq
	f.insert([]logs.Record{other})
	f.list(logs.Query{Type: logs.TypeError, Limit: 100})
	all, err := All(ctx, f.st, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(f.written) {
		t.Fatalf("All: %d records, want %d", len(all), len(f.written))
	}
}

// Pages by number (skip and limit) are the model's, newest first, per type
// and per app, across writes of every size; past the end they are empty.
func testPages(t *testing.T, newStore func(t *testing.T) logs.Store) {
	f := newFixture(t, newStore)
	for _, w := range [][2]int{{0, 1}, {1, 99}, {100, 700}, {800, 200}} {
		f.insert(f.recs(w[0], w[1], logs.TypeLog))
	}
	f.insert(f.recs(0, 30, logs.TypeDB))
	for _, c := range []struct{ skip, limit int }{{0, 50}, {50, 50}, {300, 50}, {500, 100}, {0, 1000}, {950, 100}, {1000, 10}, {5000, 10}} {
		f.list(logs.Query{Type: logs.TypeLog, Skip: c.skip, Limit: c.limit})
		f.list(logs.Query{Type: logs.TypeLog, AppID: f.apps[1].ID, Skip: c.skip / 2, Limit: c.limit})
	}
	f.list(logs.Query{Type: logs.TypeDB, AppID: f.apps[0].ID, Limit: 50})
	f.list(logs.Query{Type: logs.TypeError, Limit: 50})
}

// A cursor page lists what follows the cursor record in its listing; a
// cursor that names no record is ErrNotFound, one of another type or app
// ErrCursorMismatch.
func testCursors(t *testing.T, newStore func(t *testing.T) logs.Store) {
	f := newFixture(t, newStore)
	var web []logs.Record
	for _, w := range [][2]int{{0, 150}, {150, 1}, {151, 250}} {
		f.insert(f.recs(w[0], w[1], logs.TypeLog))
	}
	for k := 401; k < 420; k++ { // records without a stream: ids of their write
		r := f.rec(k, logs.TypeLog)
		r.Stream, r.Seq = "", 0
		web = append(web, f.insert([]logs.Record{r})...)
	}
	f.insert(f.recs(0, 10, logs.TypeError))
	for _, k := range []int{0, 1, 2, 149, 150, 151, 300, 400} {
		cur := f.written[k]
		f.list(logs.Query{Type: logs.TypeLog, BeforeID: cur.ID, Limit: 40})
		f.list(logs.Query{Type: logs.TypeLog, AppID: cur.AppID, BeforeID: cur.ID, Limit: 40})
		f.list(logs.Query{Type: logs.TypeLog, BeforeID: cur.ID, MetricsID: "m1", Limit: 5})
	}
	f.list(logs.Query{Type: logs.TypeLog, BeforeID: web[10].ID, Limit: 15})
	f.list(logs.Query{Type: logs.TypeLog, AppID: web[10].AppID, BeforeID: web[10].ID, Limit: 15})
	other := f.apps[0].ID
	if web[10].AppID == other {
		other = f.apps[1].ID
	}
	for _, c := range []struct {
		q    logs.Query
		want error
	}{
		{logs.Query{Type: logs.TypeLog, BeforeID: "not-an-id", Limit: 5}, logs.ErrNotFound},
		{logs.Query{Type: logs.TypeLog, BeforeID: logs.StreamRecordID(tag, 999_999), Limit: 5}, logs.ErrNotFound},
		{logs.Query{Type: logs.TypeLog, BeforeID: logs.StreamRecordID("ffffffffff", 1), Limit: 5}, logs.ErrNotFound},
		{logs.Query{Type: logs.TypeLog, BeforeID: "0200000000000000ffffffff", Limit: 5}, logs.ErrNotFound},
		{logs.Query{Type: logs.TypeError, BeforeID: f.written[5].ID, Limit: 5}, logs.ErrCursorMismatch},
		{logs.Query{Type: logs.TypeLog, AppID: other, BeforeID: web[10].ID, Limit: 5}, logs.ErrCursorMismatch},
	} {
		if _, err := f.st.List(context.Background(), c.q); !errors.Is(err, c.want) {
			t.Fatalf("%+v: %v, want %v", c.q, err, c.want)
		}
	}
}

// from, to, metricsId and q select exactly the model's records, alone and
// together, with page numbers and per app.
func testFilters(t *testing.T, newStore func(t *testing.T) logs.Store) {
	f := newFixture(t, newStore)
	for k := 0; k < 600; k += 60 {
		rs := f.recs(k, 60, logs.TypeLog)
		for i := range rs {
			if (k+i)%37 == 0 {
				rs[i].LogBody += " Upstream TIMEOUT"
			}
		}
		f.insert(rs)
	}
	search := func(s string) *logs.Search {
		x, err := logs.ParseSearch(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	at := func(k int) time.Time { return t0.Add(time.Duration(k) * time.Millisecond) }
	for _, q := range []logs.Query{
		{From: at(100), To: at(110)},
		{From: at(590)},
		{To: at(5)},
		{From: at(1000)},
		{To: t0},
		{MetricsID: "m1"},
		{MetricsID: "m1", Skip: 10},
		{MetricsID: "absent"},
		{MetricsID: "m2", From: at(100), To: at(400)},
		{Search: search(`"upstream timeout"`)},
		{Search: search(`timeout record`), From: at(200)},
		{Search: search(`m0 "record 4"`)},
		{Search: search(`nothing-like-this`)},
	} {
		q.Type, q.Limit = logs.TypeLog, 30
		f.list(q)
		q.AppID = f.apps[1].ID
		f.list(q)
	}
}

// An export reads page after page by cursor (the last record of a full
// page, or ResumeBefore of a partial one) and gets every matching record
// once, in order, however small the pages.
func testExport(t *testing.T, newStore func(t *testing.T) logs.Store) {
	f := newFixture(t, newStore)
	for k := 0; k < 500; k += 100 {
		f.insert(f.recs(k, 100, logs.TypeDB))
	}
	for _, q := range []logs.Query{
		{Type: logs.TypeDB, Limit: 7},
		{Type: logs.TypeDB, AppID: f.apps[0].ID, Limit: 30},
		{Type: logs.TypeDB, MetricsID: "m0", Limit: 4},
		{Type: logs.TypeDB, From: t0.Add(120 * time.Millisecond), To: t0.Add(430 * time.Millisecond), Limit: 50},
	} {
		all := q
		all.Limit = 1000
		want := f.expect(all, "")
		var got []logs.Record
		for pages := 0; ; pages++ {
			if pages > 1000 {
				t.Fatalf("%+v: does not end", q)
			}
			p, err := f.st.List(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, p.Records...)
			if q.BeforeID = p.Next(q.Limit); q.BeforeID == "" {
				break
			}
		}
		sameRecords(t, fmt.Sprintf("export %+v", all), got, want)
	}
}

// Stats counts each record once, in the bucket of its createdAt, per type,
// of every app or one.
func testStats(t *testing.T, newStore func(t *testing.T) logs.Store) {
	f := newFixture(t, newStore)
	for k := 0; k < 1000; k += 250 {
		f.insert(f.recs(k, 250, logs.TypeLog))
	}
	f.insert(f.recs(0, 300, logs.TypeDB))
	from, to := t0.Add(50*time.Millisecond), t0.Add(950*time.Millisecond)
	for _, step := range []time.Duration{7 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		for _, app := range []string{"", f.apps[1].ID} {
			s, err := f.st.Stats(context.Background(), logs.StatsQuery{AppID: app, From: from, To: to, Step: step})
			if err != nil {
				t.Fatal(err)
			}
			n := int((to.Sub(from) + step - 1) / step)
			want := make([]map[string]int64, n)
			for i := range want {
				want[i] = map[string]int64{}
				for _, typ := range logs.Types {
					want[i][typ] = 0
				}
			}
			for _, r := range f.written {
				if (app == "" || r.AppID == app) && !r.CreatedAt.Before(from) && r.CreatedAt.Before(to) {
					want[int(r.CreatedAt.Sub(from)/step)][r.Type]++
				}
			}
			if s.Partial || len(s.Counts) != n {
				t.Fatalf("step %v: %d buckets (partial %v), want %d", step, len(s.Counts), s.Partial, n)
			}
			for i := range want {
				if fmt.Sprint(s.Counts[i]) != fmt.Sprint(want[i]) {
					t.Fatalf("app %q step %v bucket %d: %v, want %v", app, step, i, s.Counts[i], want[i])
				}
			}
		}
	}
}

// Stats refuses, with an *logs.InvalidError and before allocating
// anything, a query whose buckets cannot be counted (issue 34 row 1: from
// year 1 to 9999 by 2562047h overflowed the bucket count and the store
// indexed past its buckets, a panic), whoever calls it; a query at the
// bounds is still answered.
func testStatsBounds(t *testing.T, newStore func(t *testing.T) logs.Store) {
	f := newFixture(t, newStore)
	f.insert(f.recs(0, 50, logs.TypeLog))
	f.insert(f.recs(0, 10, logs.TypeError))
	year := func(y int) time.Time { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC) }
	for _, q := range []logs.StatsQuery{
		{From: year(1), To: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), Step: 2562047 * time.Hour},
		{From: year(1970), To: year(9999), Step: time.Duration(1<<63 - 1)},
		{From: year(2000), To: year(2600), Step: time.Hour},
		{From: t0.Add(-time.Hour), To: t0.Add(time.Hour), Step: time.Second}, // 7,200 buckets
		{From: t0, To: t0, Step: time.Second},
		{From: t0.Add(time.Hour), To: t0, Step: time.Second},
		{From: t0, To: t0.Add(time.Hour), Step: 0},
		{From: t0, To: t0.Add(time.Hour), Step: -time.Second},
	} {
		s, err := f.st.Stats(context.Background(), q)
		var ie *logs.InvalidError
		if !errors.As(err, &ie) || s.Counts != nil {
			t.Fatalf("Stats(%v..%v by %v) = %d buckets, %v; want an *logs.InvalidError", q.From, q.To, q.Step, len(s.Counts), err)
		}
	}
	// The most buckets allowed, and a step longer than the range.
	for _, q := range []logs.StatsQuery{
		{From: t0.Add(-500 * time.Millisecond), To: t0.Add(500 * time.Millisecond), Step: time.Millisecond},
		{From: year(1970), To: t0.Add(time.Hour), Step: time.Duration(1<<63 - 1)},
	} {
		s, err := f.st.Stats(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := q.Buckets()
		var total int64
		for _, c := range s.Counts {
			total += c[logs.TypeLog] + c[logs.TypeError]
		}
		if len(s.Counts) != n || total != 60 {
			t.Fatalf("Stats(%v..%v by %v): %d buckets counting %d records, want %d and 60", q.From, q.To, q.Step, len(s.Counts), total, n)
		}
	}
}

// DeleteBefore removes records written well before the cutoff, never a
// newer one, and says how many it removed; listings then line up.
func testDeleteBefore(t *testing.T, newStore func(t *testing.T) logs.Store) {
	f := newFixture(t, newStore)
	ctx := context.Background()
	for _, typ := range logs.Types {
		for k := 0; k < 300; k += 100 {
			f.insert(f.recs(k, 100, typ))
		}
		f.insert(f.recs(1000, 50, typ)) // a second after the rest
	}
	cut := t0.Add(500 * time.Millisecond)
	n, err := f.st.DeleteBefore(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(3 * 300); n != want {
		t.Fatalf("deleted %d, want %d", n, want)
	}
	f.written = slices.DeleteFunc(f.written, func(r logs.Record) bool { return r.CreatedAt.Before(cut) })
	for _, typ := range logs.Types {
		f.list(logs.Query{Type: typ, Limit: 100})
		f.list(logs.Query{Type: typ, AppID: f.apps[0].ID, Skip: 10, Limit: 100})
	}
	if n, err := f.st.DeleteBefore(ctx, cut); err != nil || n != 0 {
		t.Fatalf("again: deleted %d (%v), want 0", n, err)
	}
	f.insert(f.recs(2000, 10, logs.TypeLog))
	f.list(logs.Query{Type: logs.TypeLog, Limit: 100})
}

// Dead letters are kept once per key (a redelivery adds nothing) and
// listed newest first, page by page.
func testDeadLetters(t *testing.T, newStore func(t *testing.T) logs.Store) {
	ctx := context.Background()
	st := newStore(t)
	var ds []logs.DeadLetter
	for i := range 12 {
		ds = append(ds, logs.DeadLetter{Key: fmt.Sprint(tag, ":", i+1), Stream: tag, Sequence: uint64(i + 1), Subject: "logs.x.log",
			MsgID: fmt.Sprint("m", i), Data: strings.Repeat("x", i), Reason: "invalid", Deliveries: uint64(1 + i%3),
			ReceivedAt: t0.Add(time.Duration(i) * time.Second)})
	}
	if err := st.AddDeadLetters(ctx, ds[:8]); err != nil {
		t.Fatal(err)
	}
	if err := st.AddDeadLetters(ctx, ds[5:]); err != nil { // 5..7 again
		t.Fatal(err)
	}
	if err := st.AddDeadLetters(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var got []logs.DeadLetter
	for skip := 0; ; skip += 5 {
		page, err := st.ListDeadLetters(ctx, skip, 5)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if len(page) < 5 {
			break
		}
	}
	want := slices.Clone(ds)
	slices.Reverse(want)
	if len(got) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(got), len(want))
	}
	for i := range want {
		g := got[i]
		if !g.ReceivedAt.Equal(want[i].ReceivedAt) {
			t.Fatalf("dead letter %d: received %v, want %v", i, g.ReceivedAt, want[i].ReceivedAt)
		}
		g.ReceivedAt = want[i].ReceivedAt
		if g != want[i] {
			t.Fatalf("dead letter %d: %+v, want %+v", i, g, want[i])
		}
	}
}
