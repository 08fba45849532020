package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// pushdownDB starts the patched server, reporting its scans to
// scanLog(t), and returns a database on it.
func pushdownDB(t *testing.T) *mongo.Database {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real server; not in the fast tier (-short)")
	}
	ctx := context.Background()
	_ = os.Remove(scanLog(t))
	t.Cleanup(func() { _ = os.Remove(scanLog(t)) })
	p, err := StartFerretDB(ctx, FerretDBOptions{Dir: filepath.Join(t.TempDir(), "mongo"), Log: os.Stderr,
		Env: []string{"ACME_FERRETDB_SCAN_LOG=" + scanLog(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	client, err := mongo.Connect(options.Client().ApplyURI(p.URI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client.Database("kit")
}

// scanLog is the file t's server reports scans to.
func scanLog(t *testing.T) string {
	return filepath.Join(os.TempDir(), "acme-scans-"+strings.ReplaceAll(t.Name(), "/", "-")+".jsonl")
}

// scans returns the lines of t's scan log.
func scans(t *testing.T) []string {
	b, err := os.ReadFile(scanLog(t))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' })
}

// explain returns the server's explain of a find command.
func explain(t *testing.T, db *mongo.Database, find bson.D) bson.M {
	t.Helper()
	var res bson.M
	if err := db.RunCommand(context.Background(), bson.D{{Key: "explain", Value: find}}).Decode(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestFerretDBPushdown: the patched SQLite backend narrows a query by
// top-level equality and $in with the index the collection has (the SQLite
// plan says SEARCH ... USING INDEX, not SCAN), sorts and limits by an index
// that serves the sort, counts a whole collection with SQL, and returns
// exactly what MongoDB's semantics say, including documents whose field is
// an array holding the value (which the index alone would miss).
func TestFerretDBPushdown(t *testing.T) {
	db := pushdownDB(t)
	ctx := context.Background()
	c := db.Collection("files")
	if _, err := c.Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: "owner", Value: 1}, {Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}, Options: options.Index().SetName("owner_createdAt")},
		{Keys: bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName("createdAt_id")},
		{Keys: bson.D{{Key: "flag", Value: 1}}, Options: options.Index().SetName("flag")},
		{Keys: bson.D{{Key: "n", Value: 1}}, Options: options.Index().SetName("n")},
	}); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var docs []any
	for i := range 2000 {
		docs = append(docs, bson.D{
			{Key: "_id", Value: fmt.Sprintf("f%05d", i)},
			{Key: "owner", Value: fmt.Sprintf("u%03d", i%100)},
			{Key: "createdAt", Value: base.Add(time.Duration(i) * time.Second)},
			{Key: "flag", Value: i%2 == 0},
		})
	}
	// An array holding u007, a number, a missing owner and an ObjectID:
	// MongoDB's equality matches the first for "u007", never the others.
	oid := bson.NewObjectID()
	docs = append(docs,
		bson.D{{Key: "_id", Value: "arr"}, {Key: "owner", Value: bson.A{"x", "u007"}}, {Key: "createdAt", Value: base}},
		bson.D{{Key: "_id", Value: "num"}, {Key: "owner", Value: 7}, {Key: "createdAt", Value: base}},
		bson.D{{Key: "_id", Value: "none"}, {Key: "createdAt", Value: base}},
		bson.D{{Key: "_id", Value: oid}, {Key: "owner", Value: oid.Hex()}, {Key: "createdAt", Value: base}},
	)
	if _, err := c.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}

	ids := func(filter any, opts ...options.Lister[options.FindOptions]) []string {
		t.Helper()
		cur, err := c.Find(ctx, filter, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var got []bson.M
		if err := cur.All(ctx, &got); err != nil {
			t.Fatal(err)
		}
		out := make([]string, 0, len(got))
		for _, d := range got {
			out = append(out, fmt.Sprint(d["_id"]))
		}
		return out
	}

	// Results: MongoDB's semantics, arrays included.
	got := ids(bson.D{{Key: "owner", Value: "u007"}})
	if len(got) != 21 || !slices.Contains(got, "arr") || slices.Contains(got, "num") {
		t.Fatalf("owner u007: %d documents %v, want the 20 of u007 and the array", len(got), got)
	}
	got = ids(bson.D{{Key: "owner", Value: bson.D{{Key: "$in", Value: bson.A{"u001", "u002"}}}}, {Key: "flag", Value: true}})
	if len(got) != 20 {
		t.Fatalf("owner in (u001, u002) and flag: %d documents %v, want 20", len(got), got)
	}
	got = ids(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"f00001", "f00002", "nope"}}}}})
	if slices.Sort(got); !slices.Equal(got, []string{"f00001", "f00002"}) {
		t.Fatalf("_id in: %v", got)
	}
	// Numbers: 7 as an int32, an int64 and a double is one value, as in
	// MongoDB; 7.5 only itself.
	if _, err := c.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: int32(7)}, {Key: "n", Value: 7.0}},
		bson.D{{Key: "_id", Value: "n64"}, {Key: "n", Value: int64(7)}},
		bson.D{{Key: "_id", Value: "nhalf"}, {Key: "n", Value: 7.5}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{int32(7), int64(7), 7.0} {
		if got := ids(bson.D{{Key: "n", Value: v}}); len(got) != 2 {
			t.Fatalf("n = %T 7: %v, want 7 and n64", v, got)
		}
		if got := ids(bson.D{{Key: "_id", Value: v}}); len(got) != 1 {
			t.Fatalf("_id = %T 7: %v", v, got)
		}
	}
	if got := ids(bson.D{{Key: "n", Value: 7.5}}); len(got) != 1 || got[0] != "nhalf" {
		t.Fatalf("n = 7.5: %v", got)
	}
	if _, err := c.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{int32(7), "n64", "nhalf"}}}}}); err != nil {
		t.Fatal(err)
	}
	got = ids(bson.D{{Key: "owner", Value: oid.Hex()}})
	if len(got) != 1 {
		t.Fatalf("owner = the ObjectID's hex string: %v, want only the string-valued document", got)
	}
	got = ids(bson.D{{Key: "owner", Value: "u007"}}, options.Find().SetSort(bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}).SetLimit(3))
	if !slices.Equal(got, []string{"f01907", "f01807", "f01707"}) {
		t.Fatalf("owner u007, newest 3: %v", got)
	}
	// The oldest of u007 is the document whose owner is an array holding
	// it, which the index of owner alone would miss.
	got = ids(bson.D{{Key: "owner", Value: "u007"}}, options.Find().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(2))
	if !slices.Equal(got, []string{"arr", "f00007"}) {
		t.Fatalf("owner u007, oldest 2: %v", got)
	}
	got = ids(bson.D{{Key: "owner", Value: "u007"}}, options.Find().SetSort(bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}).SetSkip(19).SetLimit(5))
	if !slices.Equal(got, []string{"f00007", "arr"}) {
		t.Fatalf("owner u007, newest after 19: %v", got)
	}
	got = ids(bson.D{}, options.Find().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).SetSkip(1000).SetLimit(3))
	if !slices.Equal(got, []string{"f00996", "f00997", "f00998"}) {
		t.Fatalf("all by createdAt, page at 1000: %v", got)
	}
	before := len(scans(t))
	if n, err := c.EstimatedDocumentCount(ctx); err != nil || n != 2004 {
		t.Fatalf("count: %d, %v; want 2004", n, err)
	}
	if after := scans(t); len(after) != before {
		t.Fatalf("the count of the collection read it: %v", after[before:])
	}
	// The count stays exact through inserts, deletes, a drop and a new
	// collection of the same name (the count is kept by triggers).
	if _, err := c.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "c1"}}, bson.D{{Key: "_id", Value: "c2"}}, bson.D{{Key: "_id", Value: "c3"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"c1", "c3", "c-absent"}}}}}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.EstimatedDocumentCount(ctx); err != nil || n != 2005 {
		t.Fatalf("count after 3 inserts and 2 deletes: %d, %v; want 2005", n, err)
	}
	if _, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: "c2"}}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.EstimatedDocumentCount(ctx); err != nil || n != 2004 {
		t.Fatalf("count after one more delete: %d, %v; want 2004", n, err)
	}
	if n, err := c.CountDocuments(ctx, bson.D{{Key: "owner", Value: "u007"}}); err != nil || n != 21 {
		t.Fatalf("count of u007: %d, %v; want 21", n, err)
	}

	// Plans: an index, never a scan of the table.
	for _, tc := range []struct {
		name string
		find bson.D
		sort bool
	}{
		{"equality", bson.D{{Key: "find", Value: "files"}, {Key: "filter", Value: bson.D{{Key: "owner", Value: "u007"}}}}, false},
		{"$eq and $in", bson.D{{Key: "find", Value: "files"}, {Key: "filter", Value: bson.D{{Key: "owner", Value: bson.D{{Key: "$in", Value: bson.A{"u1", "u2"}}}}, {Key: "flag", Value: bson.D{{Key: "$eq", Value: true}}}}}}, false},
		{"_id, a number", bson.D{{Key: "find", Value: "files"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: int32(7)}}}}, false},
		{"_id and another field", bson.D{{Key: "find", Value: "files"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: "f00001"}, {Key: "owner", Value: "u001"}}}}, false},
		{"an owner's sorted page", bson.D{{Key: "find", Value: "files"}, {Key: "filter", Value: bson.D{{Key: "owner", Value: "u007"}}}, {Key: "sort", Value: bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}}, {Key: "limit", Value: int64(20)}}, true},
		{"sorted page", bson.D{{Key: "find", Value: "files"}, {Key: "filter", Value: bson.D{}}, {Key: "sort", Value: bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}}, {Key: "skip", Value: int64(40)}, {Key: "limit", Value: int64(20)}}, true},
		{"sorted page, reversed", bson.D{{Key: "find", Value: "files"}, {Key: "filter", Value: bson.D{}}, {Key: "sort", Value: bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}}, {Key: "limit", Value: int64(20)}}, true},
	} {
		res := explain(t, db, tc.find)
		plan := fmt.Sprint(res["queryPlanner"])
		t.Logf("%s: %s", tc.name, plan)
		if !strings.Contains(plan, "USING INDEX") || strings.Contains(plan, "SCAN") && !tc.sort || strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("%s: plan %s, want the index and no sort of its own", tc.name, plan)
		}
		if tc.sort && (res["sortPushdown"] != true || res["limitPushdown"] != true) {
			t.Errorf("%s: sort or limit not pushed down: %v", tc.name, res)
		}
		if !tc.sort && res["filterPushdown"] != true {
			t.Errorf("%s: filter not pushed down: %v", tc.name, res)
		}
	}
	// Every query above was served by an index (the server's own report).
	if got := scans(t); len(got) != 0 {
		t.Fatalf("queries no index served: %v", got)
	}
	// A sort no index serves is not pushed down (and so neither is the limit).
	res := explain(t, db, bson.D{{Key: "find", Value: "files"}, {Key: "filter", Value: bson.D{}}, {Key: "sort", Value: bson.D{{Key: "flag", Value: -1}, {Key: "owner", Value: 1}}}, {Key: "limit", Value: int64(5)}})
	if res["sortPushdown"] == true || res["limitPushdown"] == true {
		t.Errorf("sort without an index: %v, want neither sort nor limit pushed down", res)
	}
	got = ids(bson.D{}, options.Find().SetSort(bson.D{{Key: "flag", Value: -1}, {Key: "owner", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(2))
	if !slices.Equal(got, []string{"f00000", "f00100"}) {
		t.Fatalf("sort without an index: %v", got)
	}
	if got := scans(t); len(got) != 1 || !strings.Contains(got[0], `"sort":"{flag: number, owner: number, _id: number}"`) {
		t.Fatalf("the sorted page no index serves: reported %v, want it once", got)
	}
}

// TestFerretDBMatchSum: a match of one equality and a group summing integer
// fields (an owner's usage, countDocuments) answers what MongoDB answers,
// whether SQL sums it or FerretDB runs the stages (arrays, doubles): the
// types of the sums, a value of another type with the same text, missing
// fields and no match at all.
func TestFerretDBMatchSum(t *testing.T) {
	db := pushdownDB(t)
	ctx := context.Background()
	c := db.Collection("usage")
	if _, err := c.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "owner", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	oid := bson.NewObjectID()
	docs := []any{
		bson.D{{Key: "owner", Value: "a"}, {Key: "size", Value: int64(5_000_000_000)}},
		bson.D{{Key: "owner", Value: "a"}, {Key: "size", Value: int64(7)}},
		bson.D{{Key: "owner", Value: "a"}},                                 // no size: not summed, counted
		bson.D{{Key: "owner", Value: "b"}, {Key: "size", Value: int32(3)}}, // int32s sum to an int32
		bson.D{{Key: "owner", Value: "b"}, {Key: "size", Value: int32(4)}},
		bson.D{{Key: "owner", Value: oid.Hex()}, {Key: "size", Value: int64(1)}}, // a string
		bson.D{{Key: "owner", Value: oid}, {Key: "size", Value: int64(100)}},     // an ObjectID with the same text
		bson.D{{Key: "owner", Value: "d"}, {Key: "size", Value: 1.5}},            // a double
		bson.D{{Key: "owner", Value: "d"}, {Key: "size", Value: int64(2)}},
	}
	if _, err := c.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	sum := func(owner any) bson.M {
		t.Helper()
		cur, err := c.Aggregate(ctx, mongo.Pipeline{
			{{Key: "$match", Value: bson.D{{Key: "owner", Value: owner}}}},
			{{Key: "$group", Value: bson.D{{Key: "_id", Value: nil}, {Key: "bytes", Value: bson.D{{Key: "$sum", Value: "$size"}}}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var out []bson.M
		if err := cur.All(ctx, &out); err != nil {
			t.Fatal(err)
		}
		if len(out) == 0 {
			return nil
		}
		return out[0]
	}
	for _, tc := range []struct {
		owner any
		bytes any
		n     int64
	}{
		{"a", int64(5_000_000_007), 3},
		{"b", int32(7), 2},
		{oid.Hex(), int64(1), 1},
		{oid, int64(100), 1},
		{"d", 3.5, 2},
	} {
		got := sum(tc.owner)
		if got == nil || got["bytes"] != tc.bytes || got["_id"] != nil {
			t.Errorf("usage of %v: %v, want bytes %T %v", tc.owner, got, tc.bytes, tc.bytes)
		}
		if n, err := c.CountDocuments(ctx, bson.D{{Key: "owner", Value: tc.owner}}); err != nil || n != tc.n {
			t.Errorf("count of %v: %d, %v; want %d", tc.owner, n, err, tc.n)
		}
	}
	// SQL answered the usages and counts above but the usage of "d" (a
	// double among its sizes).
	if n := strings.Count(strings.Join(scans(t), "\n"), `"served":"sum"`); n != 9 {
		t.Errorf("SQL answered %d of the 10 groups, want 9", n)
	}
	if got := sum("nobody"); got != nil {
		t.Errorf("usage of nobody: %v, want no group", got)
	}
	if n, err := c.CountDocuments(ctx, bson.D{{Key: "owner", Value: "nobody"}}); err != nil || n != 0 {
		t.Errorf("count of nobody: %d, %v", n, err)
	}
	// An array holding the owner: counted and summed as MongoDB does.
	if _, err := c.InsertOne(ctx, bson.D{{Key: "owner", Value: bson.A{"a", "z"}}, {Key: "size", Value: int64(10)}}); err != nil {
		t.Fatal(err)
	}
	if got := sum("a"); got["bytes"] != int64(5_000_000_017) {
		t.Errorf("usage of a with an array: %v", got)
	}
	if n, _ := c.CountDocuments(ctx, bson.D{{Key: "owner", Value: "a"}}); n != 4 {
		t.Errorf("count of a with an array: %d, want 4", n)
	}
}

// TestFerretDBUpdatesAreAtomic: concurrent $inc of one document, by update
// and by findAndModify, each count once (FerretDB 1.24 reads, changes in Go
// and writes back; without the patch's lock, concurrent increments of one
// document are lost), and findAndModify hands out every value once.
func TestFerretDBUpdatesAreAtomic(t *testing.T) {
	db := pushdownDB(t)
	ctx := context.Background()
	c := db.Collection("counters")
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "n"}, {Key: "v", Value: int64(0)}}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 25
	seen := make(chan int64, workers*each)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range each {
				inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "v", Value: int64(1)}}}}
				if (w+i)%2 == 0 {
					if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "n"}}, inc); err != nil {
						errs <- err
						return
					}
					continue
				}
				var got struct {
					V int64 `bson:"v"`
				}
				err := c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "n"}}, inc,
					options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&got)
				if err != nil {
					errs <- err
					return
				}
				seen <- got.V
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(seen)
	values := map[int64]bool{}
	for v := range seen {
		if values[v] {
			t.Errorf("findAndModify returned %d twice: two increments read the same value", v)
		}
		values[v] = true
	}
	var final struct {
		V int64 `bson:"v"`
	}
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "n"}}).Decode(&final); err != nil {
		t.Fatal(err)
	}
	if final.V != workers*each {
		t.Fatalf("after %d concurrent increments the counter is %d", workers*each, final.V)
	}
}

// TestFerretDBCountAfterDrop: the constant-time count of a collection is
// right again for a new collection of a dropped one's name (the dropped
// table took its triggers with it, and the count left behind is not used),
// and stays right under concurrent inserts and deletes.
func TestFerretDBCountAfterDrop(t *testing.T) {
	db := pushdownDB(t)
	ctx := context.Background()
	c := db.Collection("counted")
	docs := func(prefix string, n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("%s%03d", prefix, i)}}
		}
		return out
	}
	if _, err := c.InsertMany(ctx, docs("a", 5)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.EstimatedDocumentCount(ctx); err != nil || n != 5 {
		t.Fatalf("count: %d, %v; want 5", n, err)
	}
	if err := c.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertMany(ctx, docs("b", 2)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.EstimatedDocumentCount(ctx); err != nil || n != 2 {
		t.Fatalf("count of the new collection: %d, %v; want 2", n, err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 25 {
				id := fmt.Sprintf("w%d-%02d", w, i)
				if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 {
					if _, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if n, err := c.EstimatedDocumentCount(ctx); err != nil || n != 2+4*20 {
		t.Fatalf("count after concurrent writes: %d, %v; want %d", n, err, 2+4*20)
	}
}
