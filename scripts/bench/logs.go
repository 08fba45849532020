package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// logsCollection is the logs service's collection
// (services/logs/internal/mongostore.LogsCollection).
const logsCollection = "logs"

func envCount(key string, def int) (int, error) {
	s := os.Getenv(key)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a count", key, s)
	}
	return n, nil
}

// logIndexes are the logs service's indexes on its collection, so the raw
// inserts pay for the same index maintenance.
func logIndexes() []mongo.IndexModel {
	by := func(prefix ...string) bson.D {
		var d bson.D
		for _, k := range prefix {
			d = append(d, bson.E{Key: k, Value: 1})
		}
		return append(d, bson.E{Key: "createdAt", Value: -1}, bson.E{Key: "_id", Value: -1})
	}
	return []mongo.IndexModel{
		{Keys: bson.D{{Key: "msgId", Value: 1}}, Options: options.Index().SetUnique(true)},
		{Keys: by("type")}, {Keys: by("appId", "type")}, {Keys: by("type", "metricsId")},
		{Keys: bson.D{{Key: "createdAt", Value: 1}}},
	}
}

func logDoc(i int, appID, app, typ, metricsID string, at time.Time) bson.M {
	return bson.M{"_id": bson.NewObjectID(), "msgId": fmt.Sprintf("raw-%s-%d", metricsID, i), "appId": appID, "app": app,
		"type": typ, "logBody": fmt.Sprintf("benchmark record %d with some text", i), "metricsId": metricsID, "createdAt": at}
}

// insertMany writes n documents to coll with unordered InsertMany batches of
// 1000; mk makes document i.
func insertMany(ctx context.Context, coll *mongo.Collection, n int, mk func(i int) bson.M) error {
	docs := make([]any, 0, 1000)
	for i := range n {
		docs = append(docs, mk(i))
		if len(docs) == cap(docs) || i == n-1 {
			if _, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
				return err
			}
			docs = docs[:0]
		}
	}
	return nil
}

// benchLogs: NATS ingestion (publish → queryable) vs raw InsertMany, POST
// /log through the gateway vs raw InsertOne, and the latency of the first
// page and of a deep cursor page through the gateway.
func benchLogs(e *env) error {
	ctx := e.ctx
	n, err := envCount("BENCH_LOG_RECORDS", 200000)
	if err != nil {
		return err
	}
	pageRecords, err := envCount("BENCH_LOG_PAGE_RECORDS", 0)
	if err != nil {
		return err
	}
	db := e.mongo.Database(e.servers.MongoDB)
	coll := db.Collection(logsCollection)
	var app struct {
		ID bson.ObjectID `bson:"_id"`
	}
	if err := db.Collection("log_apps").FindOne(ctx, bson.M{"name": "SERVER-APP-A"}).Decode(&app); err != nil {
		return fmt.Errorf("app SERVER-APP-A: %w", err)
	}
	appID := app.ID.Hex()

	// Raw InsertMany of n equivalent documents to a scratch collection with
	// the same indexes, on the same server.
	scratch := db.Collection("bench_raw_logs")
	_ = scratch.Drop(ctx)
	if _, err := scratch.Indexes().CreateMany(ctx, logIndexes()); err != nil {
		return err
	}
	now := time.Now().UTC()
	start := time.Now()
	if err := insertMany(ctx, scratch, n, func(i int) bson.M {
		return logDoc(i, appID, "SERVER-APP-A", "log", "bench-raw", now.Add(time.Duration(i)*time.Microsecond))
	}); err != nil {
		return fmt.Errorf("raw InsertMany: %w", err)
	}
	rawMany := float64(n) / time.Since(start).Seconds()
	e.report("logs", fmt.Sprintf("raw InsertMany, %d docs in batches of 1000", n), fmt.Sprintf("%.0f logs/s", rawMany), "")

	// The same number published over NATS with pkg/logclient, timed until
	// the consumer has acked everything (acks follow the durable insert) and
	// the records are counted in MongoDB.
	nc, err := nats.Connect(e.servers.NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	lc, err := logclient.New(nc, logclient.Options{Prefix: e.servers.SubjectPrefix, BufferSize: 20000})
	if err != nil {
		return err
	}
	defer lc.Close(context.Background())
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, strings.ToUpper(e.servers.SubjectPrefix)+"_LOGS", "logs-writer")
	if err != nil {
		return fmt.Errorf("logs consumer: %w", err)
	}
	filter := bson.M{"app": "SERVER-APP-A", "metricsId": "bench-ingest"}
	start = time.Now()
	for i := 0; i < n; {
		if lc.Log("SERVER-APP-A", logclient.TypeLog, fmt.Sprintf("benchmark record %d with some text", i), "bench-ingest") {
			i++
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Millisecond) // buffer full: the client is the bottleneck, wait
	}
	refused := lc.Stats().Dropped
	published := time.Time{}
	deadline := time.Now().Add(time.Duration(n/200)*time.Second + 2*time.Minute)
	var drained time.Duration
	for {
		st := lc.Stats()
		if published.IsZero() && st.Pending == 0 {
			published = time.Now()
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if st.Pending == 0 && info.NumPending == 0 && info.NumAckPending == 0 {
			drained = time.Since(start)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("ingestion not done after %s: %+v, consumer pending %d, ack pending %d", time.Since(start).Round(time.Second), st, info.NumPending, info.NumAckPending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Acks follow the durable insert, so everything is queryable once the
	// consumer has drained; the count confirms it (a full scan on FerretDB,
	// so it is not polled while ingesting).
	stored, err := coll.CountDocuments(ctx, filter)
	if err != nil {
		return err
	}
	queryable := drained
	for stored < int64(n) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Second)
		if stored, err = coll.CountDocuments(ctx, filter); err != nil {
			return err
		}
		queryable = time.Since(start)
	}
	counted := time.Since(start)
	distinct, err := distinctMsgIDs(ctx, coll, filter)
	if err != nil {
		return err
	}
	ingest := float64(n) / queryable.Seconds()
	e.report("logs", fmt.Sprintf("published with logclient (%d records)", n), fmt.Sprintf("acked by JetStream after %s, %d Log calls refused (buffer full, retried)", published.Sub(start).Round(time.Millisecond), refused), "")
	e.report("logs", "NATS publish → stored and acked (logs-writer drained)", fmt.Sprintf("%.0f logs/s (%s; count of %d confirmed at %s)", ingest, queryable.Round(time.Millisecond), stored, counted.Round(time.Millisecond)), "")
	e.report("logs", "ingest logs/s ÷ raw InsertMany logs/s", ratio(ingest, rawMany), ">= 0.7")
	e.report("logs", "ingested records lost (n - distinct msgIds)", strconv.Itoa(n-distinct), "0")
	e.report("logs", "ingested records duplicated (stored - distinct)", strconv.Itoa(int(stored)-distinct), "0")
	_ = scratch.Drop(ctx)

	// POST /log through the gateway vs raw InsertOne, same number of workers.
	cookie, err := signInCookie(e)
	if err != nil {
		return err
	}
	const workers = 8
	c := httpClient(workers)
	post := load(ctx, workers, e.seconds, func(int) error {
		_, _, err := call(c, "POST", e.p.GatewayURL+"/log", map[string]string{"app": "SERVER-APP-B", "type": "log", "logBody": "a log line posted over HTTP"},
			map[string]string{"Cookie": "sessionId=" + cookie}, 201)
		return err
	})
	if _, err := scratch.Indexes().CreateMany(ctx, logIndexes()); err != nil {
		return err
	}
	var seq [workers]int
	one := load(ctx, workers, e.seconds, func(w int) error {
		seq[w]++
		_, err := scratch.InsertOne(ctx, logDoc(seq[w], appID, "SERVER-APP-B", "log", fmt.Sprintf("one-%d", w), time.Now().UTC()))
		return err
	})
	_ = scratch.Drop(ctx)
	e.report("logs", fmt.Sprintf("POST /log through the gateway (%d workers)", workers), post.String(), "")
	e.report("logs", fmt.Sprintf("raw InsertOne (%d workers)", workers), one.String(), "")
	e.report("logs", "POST /log/s ÷ raw InsertOne/s", ratio(post.rps(), one.rps()), ">= 0.5")

	// Page latency with the records stored (topped up to
	// BENCH_LOG_PAGE_RECORDS with raw inserts when asked).
	total, err := coll.EstimatedDocumentCount(ctx)
	if err != nil {
		return err
	}
	if extra := pageRecords - int(total); extra > 0 {
		old := time.Now().UTC().Add(-time.Duration(extra) * time.Millisecond)
		start := time.Now()
		if err := insertMany(ctx, coll, extra, func(i int) bson.M {
			return logDoc(i, appID, "SERVER-APP-A", "log", "bench-fill", old.Add(time.Duration(i)*time.Millisecond))
		}); err != nil {
			return err
		}
		fmt.Fprintf(e.out, "  (stored %d more records directly in %s)\n", extra, time.Since(start).Round(time.Second))
		total += int64(extra)
	}
	logType, err := coll.CountDocuments(ctx, bson.M{"type": "log"})
	if err != nil {
		return err
	}
	depth := min(1000*50, int(logType)*9/10)
	var cur struct {
		ID bson.ObjectID `bson:"_id"`
	}
	findStart := time.Now()
	if err := coll.FindOne(ctx, bson.M{"type": "log"}, options.FindOne().
		SetSort(bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}).SetSkip(int64(depth)).SetProjection(bson.M{"_id": 1})).Decode(&cur); err != nil {
		return fmt.Errorf("cursor record %d deep: %w", depth, err)
	}
	fmt.Fprintf(e.out, "  (%d records stored, %d of type log; cursor record %d deep found in MongoDB in %s)\n", total, logType, depth, time.Since(findStart).Round(time.Millisecond))
	hdr := map[string]string{"Cookie": "sessionId=" + cookie}
	// FerretDB on SQLite scans the collection for every filtered, sorted
	// query: bound each kind to 20 samples or 60 s, whichever comes first.
	first, err := pageLatencies(ctx, c, e.p.GatewayURL+"/log/log/1", hdr, 20, time.Minute)
	if err != nil {
		return err
	}
	deep, err := pageLatencies(ctx, c, e.p.GatewayURL+"/log/log/1?before="+cur.ID.Hex(), hdr, 20, time.Minute)
	if err != nil {
		return err
	}
	e.report("logs", fmt.Sprintf("GET /log/log/1, %d records stored", total), latString(first), "p99 < 50 ms")
	e.report("logs", fmt.Sprintf("GET /log/log/1?before=<record %d deep (%d pages of 50)>", depth, depth/50), latString(deep), "p99 < 50 ms")
	return nil
}

// distinctMsgIDs counts the distinct msgIds of the records matching filter
// (streamed: Distinct returns one document, limited to 16 MiB).
func distinctMsgIDs(ctx context.Context, coll *mongo.Collection, filter bson.M) (int, error) {
	cur, err := coll.Find(ctx, filter, options.Find().SetProjection(bson.M{"msgId": 1, "_id": 0}).SetBatchSize(10000))
	if err != nil {
		return 0, err
	}
	defer cur.Close(ctx)
	seen := map[string]struct{}{}
	for cur.Next(ctx) {
		id, _ := cur.Current.Lookup("msgId").StringValueOK()
		seen[id] = struct{}{}
	}
	return len(seen), cur.Err()
}

// pageLatencies times sequential GETs until n samples or budget is spent
// (at least one sample).
func pageLatencies(ctx context.Context, c *http.Client, url string, hdr map[string]string, n int, budget time.Duration) ([]time.Duration, error) {
	var out []time.Duration
	start := time.Now()
	for len(out) < n && (len(out) == 0 || time.Since(start) < budget) {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		t := time.Now()
		if _, _, err := call(c, "GET", url, nil, hdr, 201); err != nil {
			return out, err
		}
		out = append(out, time.Since(t))
	}
	return out, nil
}

func latString(l []time.Duration) string {
	if len(l) == 0 {
		return "no samples"
	}
	slices.Sort(l)
	p50 := l[len(l)/2]
	p99 := l[min(len(l)-1, len(l)*99/100)]
	note := ""
	if len(l) < 100 {
		note = ", p99 = max"
	}
	r := func(d time.Duration) time.Duration {
		if d > time.Second {
			return d.Round(time.Millisecond)
		}
		return d.Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("p50 %s, p99 %s (%d samples%s)", r(p50), r(p99), len(l), note)
}
