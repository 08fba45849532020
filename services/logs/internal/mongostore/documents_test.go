package mongostore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/logs/storetest"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// recordDoc is a record in a chunk, as MongoDB's tools see it.
type recordDoc struct {
	ID        string    `bson:"id"`
	AppID     string    `bson:"appId"`
	Type      string    `bson:"type"`
	LogBody   string    `bson:"logBody"`
	MetricsID *string   `bson:"metricsId"`
	CreatedAt time.Time `bson:"createdAt"`
}

// aggregate runs an aggregation pipeline given in (relaxed) Extended JSON,
// with %s verbs filled in from args, on log_records.
func aggregate[T any](t *testing.T, st *mongostore.Store, pipeline string, args ...any) []T {
	t.Helper()
	var stages []bson.D
	if err := bson.UnmarshalExtJSON([]byte(`{"p": `+fmt.Sprintf(pipeline, args...)+`}`), false, &struct {
		P *[]bson.D `bson:"p"`
	}{&stages}); err != nil {
		t.Fatalf("pipeline %s: %v", pipeline, err)
	}
	ctx := context.Background()
	// An operator's query, not the store's: it may read the collection.
	testkit.AllowScan(st.Database().Name(), mongostore.RecordsCollection, "*")
	cur, err := st.Database().Collection(mongostore.RecordsCollection).Aggregate(ctx, stages)
	if err != nil {
		t.Fatalf("aggregate: %v", err)
	}
	var out []T
	if err := cur.All(ctx, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The records in log_records are plain documents: the three queries of
// docs/logs.md ("The records in MongoDB's own tools"), run as written there
// on the test server (FerretDB), find, count and export what the service
// lists.
func TestRecordsAreDocuments(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	mongostore.SetChunkMax(st, 20)
	apps, err := st.EnsureApps(ctx, []string{"SERVER-APP-A", "SERVER-APP-B", "LOGGING"})
	if err != nil {
		t.Fatal(err)
	}
	for w := range 6 {
		var rs []logs.Record
		for _, typ := range logs.Types {
			for i, r := range recs(w*50, 50, typ) {
				a := apps[(w+i)%3]
				r.AppID, r.App = a.ID, a.Name
				rs = append(rs, r)
			}
		}
		insert(t, st, rs)
	}
	all, err := storetest.All(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}

	// 1. The error records of one app in a time range, newest first.
	from, to := t0.Add(40*time.Millisecond), t0.Add(170*time.Millisecond)
	got := aggregate[struct {
		R recordDoc `bson:"r"`
	}](t, st, `[
		{"$match": {"key": "t.error", "maxAt": {"$gte": {"$date": %q}}, "minAt": {"$lt": {"$date": %q}}}},
		{"$unwind": "$r"},
		{"$match": {"r.appId": %q, "r.createdAt": {"$gte": {"$date": %q}, "$lt": {"$date": %q}}}},
		{"$sort": {"r.createdAt": -1}},
		{"$project": {"_id": 0, "r": 1}}
	]`, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), apps[1].ID, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	page, err := st.List(ctx, logs.Query{Type: logs.TypeError, AppID: apps[1].ID, From: from, To: to, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) == 0 || len(got) != len(page.Records) {
		t.Fatalf("query 1: %d records, the service lists %d", len(got), len(page.Records))
	}
	for i, d := range got {
		r, want := d.R, page.Records[i]
		m := ""
		if r.MetricsID != nil {
			m = *r.MetricsID
			if m == "" {
				t.Fatalf("query 1, record %d: an empty metricsId", i)
			}
		}
		if r.ID != want.ID || r.AppID != want.AppID || r.Type != want.Type || r.LogBody != want.LogBody || m != want.MetricsID ||
			!r.CreatedAt.Equal(want.CreatedAt) {
			t.Fatalf("query 1, record %d: %+v, the service lists %+v", i, r, want)
		}
	}

	// 2. Records per app.
	counts := aggregate[struct {
		AppID   string `bson:"_id"`
		Records int64  `bson:"records"`
	}](t, st, `[
		{"$unwind": "$r"},
		{"$group": {"_id": "$r.appId", "records": {"$sum": 1}}},
		{"$sort": {"_id": 1}}
	]`)
	want := map[string]int64{}
	for _, r := range all {
		want[r.AppID]++
	}
	if len(counts) != len(apps) {
		t.Fatalf("query 2: %v, want %v", counts, want)
	}
	for _, c := range counts {
		if c.Records != want[c.AppID] || c.Records == 0 {
			t.Fatalf("query 2: %v, want %v", counts, want)
		}
	}

	// 3. An export of every record of a type: the chunks of its chain
	// (what mongoexport --query '{"key": "t.db"}' writes), each record once.
	var ids []string
	for _, d := range aggregate[struct {
		R recordDoc `bson:"r"`
	}](t, st, `[{"$match": {"key": "t.db"}}, {"$unwind": "$r"}, {"$project": {"_id": 0, "r": 1}}]`) {
		ids = append(ids, d.R.ID)
	}
	var wantIDs []string
	for _, r := range all {
		if r.Type == logs.TypeDB {
			wantIDs = append(wantIDs, r.ID)
		}
	}
	slices.Sort(ids)
	slices.Sort(wantIDs)
	if len(ids) != 300 || !slices.Equal(ids, wantIDs) {
		t.Fatalf("query 3: %d records, want the service's %d", len(ids), len(wantIDs))
	}
}

// checkRecordsDocuments fails unless log_records holds every record the
// type chains list, each once.
func checkRecordsDocuments(t *testing.T, st *mongostore.Store) {
	t.Helper()
	ctx := context.Background()
	all, err := storetest.All(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range all {
		want = append(want, r.ID)
	}
	var got []string
	for _, d := range aggregate[struct {
		R recordDoc `bson:"r"`
	}](t, st, `[{"$unwind": "$r"}, {"$project": {"_id": 0, "r": 1}}]`) {
		got = append(got, d.R.ID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("log_records: %d records, the chains list %d (or other ones)", len(got), len(want))
	}
}

// Records written without their records documents (stored before
// log_records existed, or with the copy off) are copied by CopyAllRecords,
// each once however often it runs; retention then removes them with their
// chunks.
func TestCopyAllRecords(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	mongostore.SetChunkMax(st, 16)
	st.SetRecordDocuments(false)
	for _, typ := range logs.Types {
		insert(t, st, recs(0, 100, typ))
	}
	st.SetRecordDocuments(true)
	insert(t, st, recs(100, 50, logs.TypeLog))
	if got := aggregate[struct{}](t, st, `[{"$unwind": "$r"}]`); len(got) != 50 {
		t.Fatalf("before the copy: %d records documents, want the 50 written with the copy on", len(got))
	}
	for range 2 {
		n, err := st.CopyAllRecords(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != 3*7+4 { // 100 records in chunks of 16 per type, and 50 more log records
			t.Fatalf("looked at %d chunks, want %d", n, 3*7+4)
		}
		checkRecordsDocuments(t, st)
	}
	if _, err := st.DeleteBefore(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkRecordsDocuments(t, st)
}
