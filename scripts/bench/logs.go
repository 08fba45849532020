package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

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
	var app struct {
		ID bson.ObjectID `bson:"_id"`
	}
	if err := db.Collection("log_apps").FindOne(ctx, bson.M{"name": "SERVER-APP-A"}).Decode(&app); err != nil {
		return fmt.Errorf("app SERVER-APP-A: %w", err)
	}
	appID := app.ID.Hex()

	// Raw InsertMany of n equivalent documents to a scratch collection with
	// no index but _id (the fastest the server can take them), on the same
	// server.
	scratch := db.Collection("bench_raw_logs")
	_ = scratch.Drop(ctx)
	now := time.Now().UTC()
	start := time.Now()
	if err := insertMany(ctx, scratch, n, func(i int) bson.M {
		a, typ := mix(i)
		return logDoc(i, appID, a, typ, "bench-raw", now.Add(time.Duration(i)*time.Microsecond))
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
	_, cons, err := logsConsumer(ctx, e, nc)
	if err != nil {
		return err
	}
	start = time.Now()
	for i := 0; i < n; {
		a, typ := mix(i)
		if lc.Log(a, typ, fmt.Sprintf("benchmark record %d with some text", i), "bench-ingest") {
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
	// Acks follow the durable write, so everything is listed once the
	// consumer has drained. Count through the API: every type's listing,
	// cursor page after cursor page, and every app's.
	queryable := drained
	cookie, err := signInCookie(e)
	if err != nil {
		return err
	}
	c := httpClient(8)
	hdr := map[string]string{"Cookie": "sessionId=" + cookie}
	countStart := time.Now()
	var stored, distinct int
	for _, typ := range logclient.Types {
		total, unique, err := listAll(ctx, c, e.p.GatewayURL+"/log/"+typ+"/1?limit=500&metricsId=bench-ingest", hdr)
		if err != nil {
			return err
		}
		stored, distinct = stored+total, distinct+unique
		for _, a := range mixApps {
			at, au, err := listAll(ctx, c, e.p.GatewayURL+"/log/"+typ+"/1/"+a+"?limit=500&metricsId=bench-ingest", hdr)
			if err != nil {
				return err
			}
			stored, distinct = stored+at, distinct+au
		}
	}
	stored, distinct = stored/2, distinct/2 // each record is in its type's listing and its app's
	counted := time.Since(countStart)
	ingest := float64(n) / queryable.Seconds()
	e.report("logs", fmt.Sprintf("published with logclient (%d records)", n), fmt.Sprintf("acked by JetStream after %s, %d Log calls refused (buffer full, retried)", published.Sub(start).Round(time.Millisecond), refused), "")
	e.report("logs", "NATS publish → stored and acked (logs-writer drained)", fmt.Sprintf("%.0f logs/s (%s; %d listed, counted through the API in %s)", ingest, queryable.Round(time.Millisecond), stored, counted.Round(time.Millisecond)), "")
	e.report("logs", "ingest logs/s ÷ raw InsertMany logs/s", ratio(ingest, rawMany), ">= 0.7")
	e.report("logs", "ingested records lost (n - distinct msgIds)", strconv.Itoa(n-distinct), "0")
	e.report("logs", "ingested records duplicated (stored - distinct)", strconv.Itoa(int(stored)-distinct), "0")
	_ = scratch.Drop(ctx)

	// POST /log through the gateway vs raw InsertOne, same number of workers.
	const workers = 8
	post := load(ctx, workers, e.seconds, func(int) error {
		_, _, err := call(c, "POST", e.p.GatewayURL+"/log", map[string]string{"app": "SERVER-APP-B", "type": "log", "logBody": "a log line posted over HTTP"},
			map[string]string{"Cookie": "sessionId=" + cookie}, 201)
		return err
	})
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

	// Page latency with pageRecords stored: top up by publishing more,
	// all of type log, so GET /log/log/1 reads the longest chain.
	total := n + 3 // self-logs aside: the ingested records and the POSTs
	total += post.n
	if extra := pageRecords - total; extra > 0 {
		start := time.Now()
		for i := 0; i < extra; {
			a, _ := mix(i)
			if lc.Log(a, logclient.TypeLog, fmt.Sprintf("fill record %d with some text", i), "bench-fill") {
				i++
				continue
			}
			time.Sleep(time.Millisecond)
		}
		if err := drain(ctx, lc, cons, time.Duration(extra/200)*time.Second+2*time.Minute); err != nil {
			return err
		}
		fmt.Fprintf(e.out, "  (published and stored %d more records in %s)\n", extra, time.Since(start).Round(time.Second))
		total += extra
	}
	// The cursor: the record 1,000 pages of 50 deep, reached by cursor pages.
	depth := 1000 * 50
	var cursor, cursorAt string
	walkStart := time.Now()
	for seen := 0; seen < depth; {
		u := e.p.GatewayURL + "/log/log/1?limit=500"
		if cursor != "" {
			u += "&before=" + cursor
		}
		m, _, err := call(c, "GET", u, nil, hdr, 201)
		if err != nil {
			return err
		}
		ls, _ := m["logs"].([]any)
		if len(ls) == 0 {
			return fmt.Errorf("only %d records of type log: none %d deep", seen, depth)
		}
		take := min(len(ls), depth-seen)
		cursor, _ = ls[take-1].(map[string]any)["id"].(string)
		cursorAt, _ = ls[take-1].(map[string]any)["createdAt"].(string)
		seen += take
	}
	fmt.Fprintf(e.out, "  (about %d records stored; cursor record %d deep reached through the API in %s)\n", total, depth, time.Since(walkStart).Round(time.Millisecond))
	first, err := pageLatencies(ctx, c, e.p.GatewayURL+"/log/log/1", hdr, 200, time.Minute)
	if err != nil {
		return err
	}
	deep, err := pageLatencies(ctx, c, e.p.GatewayURL+"/log/log/1?before="+cursor, hdr, 200, time.Minute)
	if err != nil {
		return err
	}
	byNumber, err := pageLatencies(ctx, c, e.p.GatewayURL+"/log/log/1000", hdr, 200, time.Minute)
	if err != nil {
		return err
	}
	byTime, err := pageLatencies(ctx, c, e.p.GatewayURL+"/log/log/1?to="+url.QueryEscape(cursorAt), hdr, 200, time.Minute)
	if err != nil {
		return err
	}
	// A metricsId no record has: the read must rule out the whole chain.
	byMetric, err := pageLatencies(ctx, c, e.p.GatewayURL+"/log/log/1?metricsId=held-by-none", hdr, 200, time.Minute)
	if err != nil {
		return err
	}
	e.report("logs", fmt.Sprintf("GET /log/log/1, about %d records stored", total), latString(first), "p99 < 50 ms")
	e.report("logs", fmt.Sprintf("GET /log/log/1?before=<record %d deep (%d pages of 50)>", depth, depth/50), latString(deep), "p99 < 50 ms")
	e.report("logs", "GET /log/log/1000 (page number, no cursor)", latString(byNumber), "")
	e.report("logs", "GET /log/log/1?to=<createdAt of that deep record>", latString(byTime), "")
	e.report("logs", "GET /log/log/1?metricsId=<held by no record>", latString(byMetric), "")
	return nil
}

// mixApps and mix spread the benchmark's records over three apps and the
// three types, as several services would.
var mixApps = []string{"SERVER-APP-A", "SERVER-APP-B", "SERVER-APP-C"}

func mix(i int) (app, typ string) {
	return mixApps[i%3], logclient.Types[(i/3)%3]
}

// drain waits until the client has published everything and the consumer
// has acked it.
func drain(ctx context.Context, lc *logclient.Client, cons jetstream.Consumer, budget time.Duration) error {
	deadline := time.Now().Add(budget)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if lc.Stats().Pending == 0 && info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not drained after %s: consumer pending %d, ack pending %d", budget, info.NumPending, info.NumAckPending)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listAll reads a listing cursor page after cursor page (url has ?limit=500)
// and returns how many records it listed and how many distinct ids.
func listAll(ctx context.Context, c *http.Client, url string, hdr map[string]string) (int, int, error) {
	seen := map[string]bool{}
	total := 0
	cursor := ""
	for ctx.Err() == nil {
		u := url
		if cursor != "" {
			u += "&before=" + cursor
		}
		m, _, err := call(c, "GET", u, nil, hdr, 201)
		if err != nil {
			return 0, 0, err
		}
		ls, _ := m["logs"].([]any)
		for _, r := range ls {
			id, _ := r.(map[string]any)["id"].(string)
			seen[id] = true
			cursor = id
		}
		total += len(ls)
		if len(ls) < 500 {
			break
		}
	}
	return total, len(seen), ctx.Err()
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
