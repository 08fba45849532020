//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// listAll reads every record of a GET /log listing (with ?limit=500 and a
// metricsId filter in path), cursor page after page, and returns the number
// of distinct ids and of distinct bodies, failing on an id listed twice.
func (e *env) listAll(path string) (ids, bodies int) {
	e.t.Helper()
	seenID, seenBody := map[string]bool{}, map[string]bool{}
	cursor := ""
	for {
		u := path
		if cursor != "" {
			u += "&before=" + cursor
		}
		m := e.admin.mustStatus(201, "GET", u, nil)
		ls, _ := m["logs"].([]any)
		for _, r := range ls {
			rec := r.(map[string]any)
			id, _ := rec["id"].(string)
			if seenID[id] {
				e.t.Fatalf("%s: record %s listed twice", path, id)
			}
			seenID[id] = true
			b, _ := rec["logBody"].(string)
			seenBody[b] = true
			cursor = id
		}
		if len(ls) < 500 {
			return len(seenID), len(seenBody)
		}
	}
}

// storedIDs counts the logs service's id documents (one per stored record)
// straight from the store: cheap enough to poll.
func (e *env) storedIDs() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := srv.mongo.Database(e.servers.MongoDB).Collection("log_ids").CountDocuments(ctx, bson.M{})
	if err != nil {
		return -1
	}
	return n
}

func (e *env) natsConn() *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect(srv.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// NATS stops while a service publishes logs: the client buffers up to its
// bound, reports what it could not keep (metric and error log), and every
// record it kept is stored exactly once after NATS returns.
func TestNATSDownWhilePublishing(t *testing.T) {
	e := launch(t, map[string]string{"LOGS_ACK_WAIT": "5s"})
	nc := e.natsConn()
	var logBuf syncBuffer
	reg := prometheus.NewRegistry()
	const buffer, total = 2000, 6000
	lc, err := logclient.New(nc, logclient.Options{
		Prefix: e.servers.SubjectPrefix, BufferSize: buffer, BatchSize: 100, AckTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(&logBuf, nil)), Metrics: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	// Some records before the outage, stored normally.
	for i := range 500 {
		lc.Log("SERVER-APP-B", logclient.TypeLog, fmt.Sprintf("record %d", i), "nats-run")
	}
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := lc.Flush(fctx); err != nil {
		t.Fatalf("flush before the outage: %v", err)
	}
	cancel()
	srv.stopNATS()
	accepted := 500
	for i := 500; i < total; i++ {
		if lc.Log("SERVER-APP-B", logclient.TypeLog, fmt.Sprintf("record %d", i), "nats-run") {
			accepted++
		}
		if i%100 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	during := lc.Stats()
	time.Sleep(3 * time.Second) // outage continues; the client retries
	if err := srv.startNATS(); err != nil {
		t.Fatal(err)
	}
	fctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := lc.Flush(fctx); err != nil {
		t.Fatalf("flush after NATS returned: %v (%+v)", err, lc.Stats())
	}
	after := lc.Stats()
	var stored int
	var rec time.Duration
	rec = eventually(t, 90*time.Second, "all kept records stored", func() bool {
		stored, _ = e.listAll("/log/log/1/SERVER-APP-B?limit=500&metricsId=nats-run")
		return stored >= accepted
	})
	time.Sleep(6 * time.Second) // any redelivery (ack wait 5 s) would show now
	ids, bodies := e.listAll("/log/log/1/SERVER-APP-B?limit=500&metricsId=nats-run")

	var dropMetric float64
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "acme_logclient_records_total" && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "dropped" {
				dropMetric = m.Counter.GetValue()
			}
		}
	}
	var errLines int
	for _, l := range strings.Split(logBuf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["level"] == "ERROR" && strings.Contains(fmt.Sprint(m["msg"]), "dropped") {
			errLines++
		}
	}
	t.Logf("NATS stopped while publishing %d records (buffer %d):\n  accepted %d, dropped %d (metric %v, error lines %d), retries %d\n  after NATS returned: published %d, stored %d (distinct bodies %d) in %s",
		total, buffer, accepted, during.Dropped, dropMetric, errLines, after.Retries, after.Published, ids, bodies, rec.Round(time.Millisecond))
	if during.Dropped == 0 || accepted+int(during.Dropped) != total {
		t.Errorf("accepted %d + dropped %d != %d, or nothing dropped", accepted, during.Dropped, total)
	}
	if accepted > 500+buffer+100 {
		t.Errorf("accepted %d, over the bound %d", accepted, 500+buffer+100)
	}
	if dropMetric != float64(during.Dropped) || errLines == 0 {
		t.Errorf("drops not reported: metric %v, error lines %d, dropped %d", dropMetric, errLines, during.Dropped)
	}
	if ids != accepted || bodies != accepted {
		t.Errorf("stored %d records (%d distinct bodies), want exactly the %d kept", ids, bodies, accepted)
	}
}

// The logs service is killed with SIGKILL three times while 100,000 records
// are published: exactly 100,000 stored, none twice.
func TestLogsKilledThreeTimes(t *testing.T) {
	const total = 100_000
	e := launch(t, map[string]string{"LOGS_ACK_WAIT": "5s"})
	nc := e.natsConn()
	lc, err := logclient.New(nc, logclient.Options{Prefix: e.servers.SubjectPrefix, BufferSize: total})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	var refused atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range total {
			if !lc.Log("SERVER-APP-C", logclient.TypeDB, fmt.Sprintf("record %d", i), "kill-run") {
				refused.Add(1)
			}
			if i%1000 == 999 {
				time.Sleep(20 * time.Millisecond) // spread the publishing out a little
			}
		}
	}()
	start := time.Now()
	var kills []string
	for k, at := range []int64{15_000, 40_000, 65_000} {
		eventually(t, 4*time.Minute, fmt.Sprintf("%d records stored before kill %d", at, k+1), func() bool { return e.storedIDs() >= at })
		before := e.storedIDs()
		e.p.Procs["logs"].Kill()
		kills = append(kills, fmt.Sprintf("kill %d at %d stored (%s)", k+1, before, time.Since(start).Round(time.Second)))
		e.restart("logs")
	}
	<-done
	if refused.Load() != 0 {
		t.Fatalf("logclient refused %d records", refused.Load())
	}
	fctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := lc.Flush(fctx); err != nil {
		t.Fatalf("flush: %v (%+v)", err, lc.Stats())
	}
	eventually(t, 5*time.Minute, "all records stored", func() bool { return e.storedIDs() >= total })
	time.Sleep(6 * time.Second) // let any redelivery (ack wait 5 s) arrive
	idDocs := e.storedIDs()
	ids, bodies := e.listAll("/log/db/1/SERVER-APP-C?limit=500&metricsId=kill-run")
	t.Logf("logs SIGKILLed three times during %d published records:\n  %s\n  id documents %d, listed %d, distinct bodies %d, total %s",
		total, strings.Join(kills, "\n  "), idDocs, ids, bodies, time.Since(start).Round(time.Second))
	if idDocs != total || ids != total || bodies != total {
		t.Errorf("stored: %d id documents, %d listed, %d distinct bodies; want exactly %d each", idDocs, ids, bodies, total)
	}
}
