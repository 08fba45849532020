package main

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/acme/platform/scripts/stack"
	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The logdocs section's sizes and shapes. The records are those the scale
// section publishes (scaleFill.publishLogs: type log, three apps, the word
// "needle" in one record of 1,000), so both layouts hold the same records.
const (
	logDocsDefault    = 1_000_000
	logDocsBatch      = 500 // LOGS_BATCH's default: what the ingest fetches and inserts at once
	logDocsRawMax     = 200_000
	logDocsPage       = 20
	logDocsSearchPage = 50
	logDocsApp        = "SERVER-APP-B"
)

// logDocRecord is one log record as a document of its own: what a MongoDB
// user would store, with the service's record id as _id.
type logDocRecord struct {
	ID        bson.ObjectID `bson:"_id"`
	Type      string        `bson:"type"`
	App       string        `bson:"app"`
	LogBody   string        `bson:"logBody"`
	MetricsID string        `bson:"metricsId"`
	CreatedAt time.Time     `bson:"createdAt"`
}

// recordID is the logs service's id of the record at stream sequence seq
// (logs.StreamRecordID): kind 0x01, the 5-byte stream tag, 6 bytes of
// sequence. Ids grow with the sequence, so _id order is arrival order.
func recordID(tag [5]byte, seq uint64) bson.ObjectID {
	var id bson.ObjectID
	id[0] = 0x01
	copy(id[1:6], tag[:])
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	copy(id[6:], s[2:])
	return id
}

// logDocsBody is record i's message, as scaleFill.publishLogs writes it.
func logDocsBody(i int) string {
	body := fmt.Sprintf("scale record %d from host-%d: request took %d ms", i, i%50, i%997)
	if i%1000 == 500 {
		body += ", needle found"
	}
	return body
}

// matchesQ is the service's search of one word: a substring of the
// message, ignoring case.
func matchesQ(body, word string) bool {
	return strings.Contains(strings.ToLower(body), strings.ToLower(word))
}

// ingestDuration is how long n records take at rate records/s.
func ingestDuration(n int, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(n) / rate * float64(time.Second))
}

// logDocsRow is one measure of both layouts.
type logDocsRow struct {
	name         string
	target       time.Duration // p99 target; 0: none
	docs, chunks []time.Duration
	docsCPU      string // CPU per request, per process
	chunksCPU    string
	note         string
	partials     *int // chunk store search answers cut short by the budget
}

// meets says whether the samples meet the row's p99 target.
func (r *logDocsRow) meets(ls []time.Duration) string {
	switch {
	case len(ls) == 0:
		return "-"
	case r.target == 0:
		return "report"
	}
	return mark(quantile(ls, 0.99) <= r.target)
}

// logDocsBench holds what both layouts' measures need.
type logDocsBench struct {
	e           *env
	n, samples  int
	budget      time.Duration
	coll        *mongo.Collection
	cpu         func() cpuSample
	self        int
	ferret      int // FerretDB's process id, 0 when not found (MONGO_URL elsewhere)
	gw          string
	hdr         map[string]string
	depth       int
	window      int
	cursorDoc   bson.ObjectID // the record depth deep, as a document
	cursorChunk string        // and its id in the chunk store
}

// sample times fn until samples answers or the budget is spent (at least
// one), with the CPU per request of the processes in order ("bench" is this
// process: the client, and the NATS server). prep, when set, runs before
// each sample, untimed; its CPU is not told apart, so none is reported.
func (b *logDocsBench) sample(prep, fn func() error, order []string) ([]time.Duration, string, error) {
	if b.ferret > 0 {
		_ = stack.ResetPeakRSS(b.ferret)
	}
	before, self0 := b.cpu(), samplePid(b.self, "bench")
	var out []time.Duration
	start := time.Now()
	for len(out) < b.samples && (len(out) == 0 || time.Since(start) < b.budget) {
		if err := b.e.ctx.Err(); err != nil {
			return out, "", err
		}
		if prep != nil {
			if err := prep(); err != nil {
				return out, "", err
			}
		}
		t := time.Now()
		if err := fn(); err != nil {
			return out, "", err
		}
		out = append(out, time.Since(t))
	}
	if prep != nil {
		return out, "-", nil
	}
	cpu := cpuSample{}
	cpu.add(before, b.cpu())
	cpu.add(self0, samplePid(b.self, "bench"))
	s, _ := onlyNames(cpu, order).perRequest(len(out), order)
	return out, s + b.ferretPeak(), nil
}

// ferretPeak is FerretDB's peak resident memory since the last reset, as
// a note ("" when unknown).
func (b *logDocsBench) ferretPeak() string {
	if b.ferret == 0 {
		return ""
	}
	rss, err := stack.PeakRSS(b.ferret)
	if err != nil {
		return ""
	}
	return ", FerretDB peak RSS " + mib(rss)
}

// childPid is the process id of this process's child whose program name
// begins with prefix, or 0.
func childPid(prefix string) int {
	for pid, st := range allStats() {
		if st.ppid == os.Getpid() && strings.HasPrefix(st.comm, prefix) {
			return pid
		}
	}
	return 0
}

// benchLogDocs (BENCH_ONLY=logdocs): LOGDOCS_N log records (1,000,000) as
// one document each, written with InsertMany as a MongoDB user would and
// indexed on {type: 1, _id: -1} and {app: 1, _id: -1}, against the same
// records in the logs service's chunk store, published over JetStream and
// read through the gateway: ingestion, first page, a deep cursor page, an
// app's page, q= search and a count, side by side with the logs targets.
func benchLogDocs(e *env) error {
	n, err := envCount("LOGDOCS_N", logDocsDefault)
	if err != nil {
		return err
	}
	samples, err := envCount("LOGDOCS_SAMPLES", 200)
	if err != nil {
		return err
	}
	budget, err := envCount("LOGDOCS_BUDGET", 20)
	if err != nil {
		return err
	}
	if n < 2*logDocsSearchPage*1000 {
		return fmt.Errorf("LOGDOCS_N: %d is below %d (the search needs %d matches)", n, 2*logDocsSearchPage*1000, logDocsSearchPage)
	}
	b := &logDocsBench{e: e, n: n, samples: max(samples, 1), budget: time.Duration(budget) * time.Second,
		cpu: platformCPU(e), self: os.Getpid(), ferret: childPid("ferretdb"), gw: e.p.GatewayURL, depth: cursorDepth(n),
		window: logDocsSearchPage * 1000}
	fmt.Fprintf(e.out, "  %d records (type log, 3 apps, \"needle\" in 1 of 1,000); cursor %d deep; search window %d\n", n, b.depth, b.window)
	ingest, err := b.ingestBoth()
	if err != nil {
		return err
	}
	rows, err := b.readBoth()
	if err != nil {
		return err
	}
	b.printTable(ingest, rows)
	return nil
}

// ingestResult is the ingestion of both layouts and the raw baseline.
type ingestResult struct {
	raw, docs, chunks       float64 // records/s
	rawN                    int
	docsCPU, chunksCPU      string
	docsFerret, chunkFerret float64 // FerretDB's CPU µs per record
}

// ingestBoth writes the raw baseline, then the records as documents, then
// publishes them to the logs service, timing each.
func (b *logDocsBench) ingestBoth() (ingestResult, error) {
	e, ctx := b.e, b.e.ctx
	var r ingestResult
	db := e.mongo.Database("bench_logdocs")
	_ = db.Drop(ctx)
	// The raw baseline of the logs section: documents with no index but
	// _id, InsertMany in batches of 1,000 (at most logDocsRawMax).
	r.rawN = min(b.n, logDocsRawMax)
	now := time.Now().UTC()
	start := time.Now()
	raw := db.Collection("raw")
	if err := insertMany(ctx, raw, r.rawN, func(i int) bson.M {
		a, _ := mix(i)
		return logDoc(i, "", a, "log", "bench-raw", now.Add(time.Duration(i)*time.Microsecond))
	}); err != nil {
		return r, fmt.Errorf("raw InsertMany: %w", err)
	}
	r.raw = float64(r.rawN) / time.Since(start).Seconds()
	_ = raw.Drop(ctx)
	fmt.Fprintf(e.out, "  raw InsertMany (no index but _id, batches of 1,000): %d in %s, %.0f records/s\n", r.rawN, time.Since(start).Round(time.Millisecond), r.raw)

	// One document per record, the two indexes made first.
	b.coll = db.Collection("log_records")
	if _, err := b.coll.Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: "type", Value: 1}, {Key: "_id", Value: -1}}},
		{Keys: bson.D{{Key: "app", Value: 1}, {Key: "_id", Value: -1}}},
	}); err != nil {
		return r, err
	}
	sum := sha256.Sum256([]byte("logdocs"))
	var tag [5]byte
	copy(tag[:], sum[:])
	t0 := time.Now().UTC()
	order := []string{"ferretdb", "bench"}
	if b.ferret > 0 {
		_ = stack.ResetPeakRSS(b.ferret)
	}
	cpu0, self0 := b.cpu(), samplePid(b.self, "bench")
	start = time.Now()
	next := b.n / 4
	docs := make([]any, 0, logDocsBatch)
	for i := range b.n {
		a, _ := mix(i)
		docs = append(docs, logDocRecord{ID: recordID(tag, uint64(i+1)), Type: "log", App: a, LogBody: logDocsBody(i),
			MetricsID: "bench-scale", CreatedAt: t0.Add(time.Duration(i) * time.Millisecond)})
		if len(docs) < logDocsBatch && i < b.n-1 {
			continue
		}
		if _, err := b.coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
			return r, fmt.Errorf("per-record InsertMany: %w", err)
		}
		docs = docs[:0]
		if i+1 >= next && i+1 < b.n {
			fmt.Fprintf(e.out, "    documents: %d of %d (%.0f records/s)\n", i+1, b.n, float64(i+1)/time.Since(start).Seconds())
			next += b.n / 4
		}
	}
	took := time.Since(start)
	r.docs = float64(b.n) / took.Seconds()
	cpu := cpuSample{}
	cpu.add(cpu0, b.cpu())
	cpu.add(self0, samplePid(b.self, "bench"))
	r.docsFerret = float64(cpu["ferretdb"]) * 1e6 / clockTicks / float64(b.n)
	r.docsCPU, _ = onlyNames(cpu, order).perRequest(b.n, order)
	r.docsCPU += b.ferretPeak()
	fmt.Fprintf(e.out, "  per-record InsertMany (batches of %d, 2 indexes): %d in %s, %.0f records/s; CPU/record %s\n", logDocsBatch, b.n, took.Round(time.Millisecond), r.docs, r.docsCPU)

	// The chunk store: the same records published over JetStream, timed
	// until the logs service has stored and acked them all.
	nc, err := nats.Connect(e.servers.NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		return r, err
	}
	defer nc.Close()
	js, cons, err := logsConsumer(ctx, e, nc)
	if err != nil {
		return r, err
	}
	f := &scaleFill{e: e, js: js, cons: cons}
	order = []string{"ferretdb", "logs", "bench"}
	if b.ferret > 0 {
		_ = stack.ResetPeakRSS(b.ferret)
	}
	cpu0, self0 = b.cpu(), samplePid(b.self, "bench")
	start = time.Now()
	if err := f.publishLogs(0, b.n); err != nil {
		return r, err
	}
	took = time.Since(start)
	r.chunks = float64(b.n) / took.Seconds()
	cpu = cpuSample{}
	cpu.add(cpu0, b.cpu())
	cpu.add(self0, samplePid(b.self, "bench"))
	r.chunkFerret = float64(cpu["ferretdb"]) * 1e6 / clockTicks / float64(b.n)
	r.chunksCPU, _ = onlyNames(cpu, order).perRequest(b.n, order)
	r.chunksCPU += b.ferretPeak()
	fmt.Fprintf(e.out, "  chunk store (NATS publish → stored and acked): %.0f records/s; CPU/record %s (bench: NATS server and publisher)\n", r.chunks, r.chunksCPU)
	return r, nil
}

// onlyNames is s with the processes named in names only.
func onlyNames(s cpuSample, names []string) cpuSample {
	out := cpuSample{}
	for _, k := range names {
		if v, ok := s[k]; ok {
			out[k] = v
		}
	}
	return out
}
