package mongostore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// benchRecs makes n records of the bench's mix (3 apps x 3 types).
func benchRecs(first, n int) []logs.Record {
	out := make([]logs.Record, n)
	for i := range out {
		k := first + i
		app := []string{"A", "B", "C"}[k%3]
		typ := []string{"log", "info", "error"}[(k/3)%3]
		out[i] = logs.Record{AppID: "app" + app, App: "SERVER-APP-" + app, Type: typ, LogBody: fmt.Sprintf("benchmark record %d with some text", k),
			MsgID: fmt.Sprint("bench-", k), CreatedAt: t0.Add(time.Duration(k) * time.Millisecond), Stream: testTag, Seq: uint64(k + 1)}
		if k%5 == 0 {
			out[i].MetricsID = "m5"
		}
	}
	return out
}

// BenchmarkStore compares InsertBatch of stream records with a raw
// InsertMany of the same records as one document each, 1000 per op.
func BenchmarkStore(b *testing.B) {
	const per = 1000
	benchServers = testkit.Get(b)
	b.Run("InsertBatch", func(b *testing.B) {
		s := testkit.Get(b)
		counts := map[string]int{}
		var mu sync.Mutex
		mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) { mu.Lock(); counts[e.CommandName]++; mu.Unlock() }}
		cl, err := mongo.Connect(options.Client().ApplyURI(s.MongoURL).SetMonitor(mon))
		if err != nil {
			b.Fatal(err)
		}
		st := mongostore.New(cl.Database(s.Database(b)))
		defer func() { b.Log(counts) }()
		measureWrites(b, per, func(i int) {
			if _, err := st.InsertBatch(context.Background(), benchRecs(i*per, per)); err != nil {
				b.Fatal(err)
			}
		})
	})
	// The baseline: the same records as one document each, no index but
	// _id.
	b.Run("RawInsertMany", func(b *testing.B) {
		s := testkit.Get(b)
		coll := s.Mongo.Database(s.Database(b)).Collection("raw")
		measureWrites(b, per, func(i int) { insertPerRecord(b, coll, benchRecs(i*per, per)) })
	})
	// The alternative design: one document per record with the indexes
	// its reads would need (docs/design/log-store.md).
	b.Run("PerRecordIndexed", func(b *testing.B) {
		s := testkit.Get(b)
		coll := perRecordCollection(b, s.Mongo.Database(s.Database(b)))
		measureWrites(b, per, func(i int) { insertPerRecord(b, coll, benchRecs(i*per, per)) })
	})
}

// measureWrites runs write(i) for each of b.N operations of per records
// and reports records per second and CPU per record.
func measureWrites(b *testing.B, per int, write func(i int)) {
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		write(i)
	}
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "recs/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N*per)/1e3, "cpu-µs/rec")
}

// perRecordCollection is a collection for one document per record, with
// the indexes of a page of a type and of an app's type, newest first.
func perRecordCollection(b *testing.B, db *mongo.Database) *mongo.Collection {
	coll := db.Collection("per_record")
	_, err := coll.Indexes().CreateMany(context.Background(), []mongo.IndexModel{
		{Keys: bson.D{{Key: "type", Value: 1}, {Key: "createdAt", Value: -1}}},
		{Keys: bson.D{{Key: "appId", Value: 1}, {Key: "type", Value: 1}, {Key: "createdAt", Value: -1}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return coll
}

func insertPerRecord(b *testing.B, coll *mongo.Collection, rs []logs.Record) {
	docs := make([]any, len(rs))
	for j, r := range rs {
		docs[j] = bson.M{"_id": bson.NewObjectID(), "msgId": r.MsgID, "appId": r.AppID, "app": r.App, "type": r.Type,
			"logBody": r.LogBody, "metricsId": r.MetricsID, "createdAt": r.CreatedAt}
	}
	if _, err := coll.InsertMany(context.Background(), docs); err != nil {
		b.Fatal(err)
	}
}

// firstPageRecords is how many records BenchmarkFirstPage holds.
const firstPageRecords = 20_000

// BenchmarkFirstPage: the first page of 50 of one app's errors among
// 20,000 records, from the store's chunks and from one indexed document per
// record (find by app and type, sorted by createdAt). The chunk store's
// page is read by a store with an empty cache each time. FerretDB on SQLite
// serves only _id lookups from an index: the per-record page reads and
// sorts the whole collection, so its time grows with the records held.
func BenchmarkFirstPage(b *testing.B) {
	benchServers = testkit.Get(b)
	const per = 1000
	ctx := context.Background()
	st := newStoreTB(b)
	for i := 0; i < firstPageRecords; i += per {
		if _, err := st.InsertBatch(ctx, benchRecs(i, per)); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		q    logs.Query
	}{
		{"Chunks", logs.Query{Type: "error", AppID: "appB", Limit: 50}}, // an app chain
		{"ChunksOfAType", logs.Query{Type: "error", Limit: 50}},         // a type chain
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				fresh := mongostore.New(st.Database()) // no chunk in its cache: a cold read
				if p, err := fresh.List(ctx, c.q); err != nil || len(p.Records) != 50 {
					b.Fatal(err, len(p.Records))
				}
			}
		})
	}
	b.Run("PerRecordIndexed", func(b *testing.B) {
		s := testkit.Get(b)
		coll := perRecordCollection(b, s.Mongo.Database(s.Database(b)))
		for i := 0; i < firstPageRecords; i += per {
			insertPerRecord(b, coll, benchRecs(i, per))
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			cur, err := coll.Find(ctx, bson.M{"appId": "appB", "type": "error"},
				options.Find().SetSort(bson.D{{Key: "createdAt", Value: -1}}).SetLimit(50))
			if err != nil {
				b.Fatal(err)
			}
			var page []bson.M
			if err := cur.All(ctx, &page); err != nil || len(page) != 50 {
				b.Fatal(err, len(page))
			}
		}
	})
}

func newStoreTB(b *testing.B) *mongostore.Store {
	s := testkit.Get(b)
	st := mongostore.New(s.Mongo.Database(s.Database(b)))
	if err := st.EnsureIndexes(context.Background()); err != nil {
		b.Fatal(err)
	}
	return st
}

// cpuTime is the user+system CPU time in ns of the test kit's FerretDB
// process (where the work happens) plus this one: a measure less disturbed
// by other work on the machine than rates.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	total := ru.Utime.Nano() + ru.Stime.Nano()
	if p := benchServers.FerretDB; p != nil {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid())); err == nil {
			// Fields after the command name: utime and stime are the
			// 12th and 13th (clock ticks, 100 per second on Linux).
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			total += (ut + st) * 1e7
		}
	}
	return total
}

var benchServers *testkit.Servers

// BenchmarkColdCursor: records that trickle in one per write (every write
// its own slot and chunk), then a cursor 590 records deep asked of a
// replica that has read none of them: it finds the cursor's slot by reading
// its block's slots, 16 at a time.
func BenchmarkColdCursor(b *testing.B) {
	st, all := trickled(b, 600)
	cursor := logs.StreamRecordID(all[590].Stream, all[590].Seq)
	q := logs.Query{Type: all[590].Type, BeforeID: cursor, Limit: 5}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fresh := mongostore.New(st.Database())
		if p, err := fresh.List(context.Background(), q); err != nil || len(p.Records) != 5 {
			b.Fatal(err, len(p.Records))
		}
	}
}

// BenchmarkTrickleFirstPage: the first page of 50 when every record came in
// a write of its own (a chunk each), as at a low publishing rate.
func BenchmarkTrickleFirstPage(b *testing.B) {
	st, all := trickled(b, 600)
	q := logs.Query{Type: all[0].Type, Limit: 50}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if p, err := st.List(context.Background(), q); err != nil || len(p.Records) != 50 {
			b.Fatal(err, len(p.Records))
		}
	}
}

// trickled is a store holding n benchmark records, each written on its own
// (a slot and a chunk each), as records that trickle in at a low rate.
func trickled(b *testing.B, n int) (*mongostore.Store, []logs.Record) {
	b.Helper()
	benchServers = testkit.Get(b)
	st := newStoreTB(b)
	all := benchRecs(0, n)
	for i := range all {
		if _, err := st.InsertBatch(context.Background(), all[i:i+1]); err != nil {
			b.Fatal(err)
		}
	}
	return st, all
}
