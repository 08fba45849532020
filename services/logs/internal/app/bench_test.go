package app_test

// Benchmarks (make bench). Each is a macro benchmark that does its work once
// per b.N iteration; run them with -benchtime=1x:
//
//	go test -run '^$' -bench . -benchtime=1x ./internal/app/
//
// LOGS_BENCH_N (default 20000) is the number of records published for
// BenchmarkIngestVsInsertMany; LOGS_BENCH_RECORDS (default 100000) the
// number stored before timing the pages in BenchmarkFirstPageAndDeepCursor.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/logs/internal/app"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
		return n
	}
	return def
}

// benchService starts the service for a benchmark (testing.B has no
// t-specific helpers for it, so this mirrors start).
func benchService(b *testing.B, extra map[string]string) (*testkit.Servers, testkit.Env, string, func() string) {
	b.Helper()
	s := testkit.Get(b)
	env := s.NewEnv(b)
	id := testkit.NewIdentity(b)
	env["IDENTITY_PUBLIC_KEY"] = id.PublicPEM
	env["LOGS_ADDR"] = "127.0.0.1:0"
	env["LOGS_RETENTION"] = "0s"
	for k, v := range extra {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	addr := make(chan string, 1)
	go func() { done <- appRun(ctx, env, func(a string) { addr <- a }) }()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		b.Fatalf("Run: %v", err)
	}
	b.Cleanup(func() { cancel(); <-done })
	tok := func() string {
		return id.Token(b, identity.Claims{Role: identity.RoleAdmin, RegisteredClaims: jwtSubject("bench")}, "logs")
	}
	return s, env, base, tok
}

func benchDoc(i int, now time.Time) bson.M {
	return bson.M{"_id": bson.NewObjectID(), "msgId": fmt.Sprintf("raw-%d", i), "appId": "x", "app": "SERVER-APP-A",
		"type": "log", "logBody": fmt.Sprintf("benchmark record %d with some text", i), "metricsId": nil, "createdAt": now.Add(time.Duration(i) * time.Millisecond)}
}

// insertManyRate writes n documents with unordered InsertMany batches of
// batch to a fresh collection with the service's indexes; logs per second.
func insertManyRate(b *testing.B, s *testkit.Servers, n, batch int) float64 {
	b.Helper()
	ctx := context.Background()
	st := scratchStore(b, s)
	now := time.Now()
	docs := make([]any, 0, batch)
	start := time.Now()
	for i := range n {
		docs = append(docs, benchDoc(i, now))
		if len(docs) == batch || i == n-1 {
			if _, err := st.Logs().InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
				b.Fatal(err)
			}
			docs = docs[:0]
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkIngestVsInsertMany: publish on NATS → queryable in MongoDB, vs
// raw InsertMany of the same number of documents to the same server.
func BenchmarkIngestVsInsertMany(b *testing.B) {
	n := envInt("LOGS_BENCH_N", 20000)
	batch := 500
	for range b.N {
		s, env, _, _ := benchService(b, map[string]string{"LOGS_BATCH": strconv.Itoa(batch)})
		raw := insertManyRate(b, s, n, batch)

		js, err := jetstream.New(s.NATS, jetstream.WithPublishAsyncMaxPending(4096))
		if err != nil {
			b.Fatal(err)
		}
		coll := s.Mongo.Database(env["MONGO_DB"]).Collection("logs")
		subj := env["NATS_SUBJECT_PREFIX"] + ".logs.SERVER-APP-A.log"
		start := time.Now()
		for i := range n {
			m := &nats.Msg{Subject: subj, Data: payload("SERVER-APP-A", "log", fmt.Sprintf("benchmark record %d with some text", i)), Header: nats.Header{}}
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("bench-%d", i))
			if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		// Records are acked only after they are durable in MongoDB, so a
		// consumer with nothing pending means all are queryable; polling the
		// consumer keeps the measurement off the database (a count is a full
		// scan on FerretDB). The count below checks it.
		ctx := context.Background()
		cons, err := s.JS.Consumer(ctx, strings.ToUpper(env["NATS_SUBJECT_PREFIX"])+"_LOGS", "logs-writer")
		if err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(time.Duration(n/100+60) * time.Second)
		for time.Now().Before(deadline) {
			info, err := cons.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream >= uint64(n) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		ingest := float64(n) / time.Since(start).Seconds()
		stored, err := coll.CountDocuments(ctx, bson.M{"app": "SERVER-APP-A"})
		if err != nil {
			b.Fatal(err)
		}
		var ids []string
		if err := coll.Distinct(ctx, "msgId", bson.M{"app": "SERVER-APP-A"}).Decode(&ids); err != nil {
			b.Fatal(err)
		}
		lost, dup := n-len(ids), int(stored)-len(ids)
		b.ReportMetric(ingest, "ingest_logs/s")
		b.ReportMetric(raw, "insertmany_logs/s")
		b.ReportMetric(ingest/raw, "ratio")
		b.ReportMetric(float64(lost), "lost")
		b.ReportMetric(float64(dup), "dup")
		b.Logf("n=%d ingest %.0f logs/s, raw InsertMany %.0f logs/s, ratio %.2f (target >= 0.7), lost %d, dup %d", n, ingest, raw, ingest/raw, lost, dup)
	}
}

// BenchmarkPostLogVsInsertOne: POST /log in-process (HTTP, same server) vs
// raw InsertOne, both with 4 concurrent clients.
func BenchmarkPostLogVsInsertOne(b *testing.B) {
	n := envInt("LOGS_BENCH_POSTS", 2000)
	const workers = 4
	for range b.N {
		s, _, base, tokf := benchService(b, nil)
		tok := tokf()
		body := []byte(`{"app":"SERVER-APP-B","type":"log","logBody":"a log line posted over HTTP"}`)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
		var failed atomic.Int64
		post := run(workers, n, func(int) {
			req, _ := http.NewRequest("POST", base+"/log", bytesReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(identity.Header, tok)
			res, err := client.Do(req)
			if err != nil || res.StatusCode != 201 {
				failed.Add(1)
			}
			if res != nil {
				res.Body.Close()
			}
		})
		ctx := context.Background()
		st := scratchStore(b, s)
		now := time.Now()
		raw := run(workers, n, func(i int) {
			if _, err := st.Logs().InsertOne(ctx, benchDoc(i, now)); err != nil {
				failed.Add(1)
			}
		})
		if failed.Load() > 0 {
			b.Fatalf("%d requests failed", failed.Load())
		}
		b.ReportMetric(post, "post_logs/s")
		b.ReportMetric(raw, "insertone_logs/s")
		b.ReportMetric(post/raw, "ratio")
		b.Logf("n=%d POST /log %.0f/s, InsertOne %.0f/s, ratio %.2f (target >= 0.5)", n, post, raw, post/raw)
	}
}

// run calls f(i) for i in [0,n) on workers goroutines; calls per second.
func run(workers, n int, f func(int)) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkFirstPageAndDeepCursor: p50/p99 of GET /log/log/1 and of a page
// read with ?before= far from the top, with LOGS_BENCH_RECORDS stored.
func BenchmarkFirstPageAndDeepCursor(b *testing.B) {
	records := envInt("LOGS_BENCH_RECORDS", 100000)
	samples := envInt("LOGS_BENCH_SAMPLES", 30)
	for range b.N {
		s, env, base, tok := benchService(b, map[string]string{"LOGS_INGEST": "false"})
		ctx := context.Background()
		coll := s.Mongo.Database(env["MONGO_DB"]).Collection("logs")
		now := time.Now().Add(-time.Duration(records) * time.Millisecond)
		docs := make([]any, 0, 1000)
		for i := range records {
			d := benchDoc(i, now)
			d["type"] = []string{"log", "error", "db"}[i%3]
			docs = append(docs, d)
			if len(docs) == cap(docs) || i == records-1 {
				if _, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
					b.Fatal(err)
				}
				docs = docs[:0]
			}
		}
		// The cursor: the record 1,000 pages of 50 deep (or 90% deep when
		// fewer are stored) among type "log".
		depth := min(1000*50, records/3*9/10)
		var cur struct {
			ID bson.ObjectID `bson:"_id"`
		}
		err := coll.FindOne(ctx, bson.M{"type": "log"}, options.FindOne().
			SetSort(bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}).SetSkip(int64(depth))).Decode(&cur)
		if err != nil && err != mongo.ErrNoDocuments {
			b.Fatal(err)
		}
		first := latencies(b, samples, base+"/log/log/1", tok)
		deep := latencies(b, samples, base+"/log/log/1?before="+cur.ID.Hex(), tok)
		b.ReportMetric(first[len(first)*99/100].Seconds()*1000, "first_p99_ms")
		b.ReportMetric(first[len(first)/2].Seconds()*1000, "first_p50_ms")
		b.ReportMetric(deep[len(deep)*99/100].Seconds()*1000, "cursor_p99_ms")
		b.ReportMetric(deep[len(deep)/2].Seconds()*1000, "cursor_p50_ms")
		b.Logf("records=%d cursor depth=%d: first page p50 %v p99 %v; cursor page p50 %v p99 %v (target p99 < 50ms)",
			records, depth, first[len(first)/2], first[len(first)*99/100], deep[len(deep)/2], deep[len(deep)*99/100])
	}
}

func latencies(b *testing.B, n int, url string, tok func() string) []time.Duration {
	b.Helper()
	out := make([]time.Duration, 0, n)
	for range n {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set(identity.Header, tok())
		start := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 201 {
			b.Fatalf("GET %s: %d", url, res.StatusCode)
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

func appRun(ctx context.Context, env testkit.Env, ready func(string)) error {
	return app.Run(ctx, env.Getenv, io.Discard, ready)
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// scratchStore is a fresh database with the service's indexes, for the raw
// driver side of a comparison.
func scratchStore(b *testing.B, s *testkit.Servers) *mongostore.Store {
	b.Helper()
	st := mongostore.New(s.Mongo.Database(s.Database(b)))
	if err := st.EnsureIndexes(context.Background()); err != nil {
		b.Fatal(err)
	}
	return st
}
