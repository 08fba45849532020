package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func (v *svc) prefix() string { return v.env["NATS_SUBJECT_PREFIX"] }

// publish sends raw data on a subject with an optional message id and
// reports whether JetStream called it a duplicate.
func (v *svc) publish(subject, msgID string, data []byte) bool {
	v.t.Helper()
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := v.s.JS.PublishMsg(ctx, m)
	if err != nil {
		v.t.Fatalf("publish %s: %v", subject, err)
	}
	if msgID != "" && !ack.Duplicate {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.seqs == nil {
			v.seqs = map[string]uint64{}
		}
		if want, ok := v.expect[msgID]; ok && want != ack.Sequence {
			v.t.Fatalf("message %q got sequence %d, storeDirect expected %d", msgID, ack.Sequence, want)
		}
		delete(v.expect, msgID)
		v.seqs[msgID] = ack.Sequence
	}
	return ack.Duplicate
}

func payload(app, typ, body string) []byte {
	b, _ := json.Marshal(logclient.Message{App: app, Type: typ, LogBody: body, CreatedAt: time.Now().UTC()})
	return b
}

func (v *svc) consumerInfo() *jetstream.ConsumerInfo {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := v.s.JS.Consumer(ctx, strings.ToUpper(v.prefix())+"_LOGS", "logs-writer")
	if err != nil {
		v.t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		v.t.Fatal(err)
	}
	return info
}

func (v *svc) settled() bool {
	i := v.consumerInfo()
	return i.NumAckPending == 0 && i.NumPending == 0
}

// Records published with the log client become queryable records.
func TestNATSIngest(t *testing.T) {
	v := startService(t, nil)
	c, err := logclient.New(v.s.NATS, logclient.Options{Prefix: v.prefix()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		c.Log("SERVER-APP-A", "error", fmt.Sprint("failure ", i), "run-7")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	apptest.Until(t, 20*time.Second, "25 records", func() bool { return v.count(byApp("SERVER-APP-A")) == 25 })
	st, got := v.do("GET", "/log/error/1/SERVER-APP-A?limit=100", v.admin(), nil)
	ls := logsOf(t, got)
	if st != 201 || len(ls) != 25 || ls[0]["logBody"] != "failure 24" || ls[0]["metricsId"] != "run-7" {
		t.Fatalf("status %d, %d logs, first %v", st, len(ls), ls[0])
	}
	apptest.Until(t, 10*time.Second, "consumer settled", v.settled)
}

// Messages that can never be valid are terminated (not redelivered) and
// kept as dead letters that admins can read.
func TestNATSPoisonMessages(t *testing.T) {
	v := startService(t, nil)
	p := v.prefix() + ".logs."
	poison := []struct {
		name, subject, msgID string
		data                 []byte
	}{
		{"badJSON", p + "LOGGING.log", "p1", []byte(`{not json`)},
		{"oversizedMsgID", p + "LOGGING.log", strings.Repeat("i", 129), payload("LOGGING", "log", "x")},
		{"wrongTypes", p + "LOGGING.log", "p3", []byte(`{"app":1,"type":"log","logBody":"x"}`)},
		{"unknownField", p + "LOGGING.log", "p4", []byte(`{"app":"LOGGING","type":"log","logBody":"x","x":1}`)},
		{"unknownApp", p + "NOPE.log", "p5", payload("NOPE", "log", "x")},
		{"differentlyCasedApp", p + "logging.log", "p6", payload("logging", "log", "x")},
		{"invalidType", p + "LOGGING.warn", "p7", payload("LOGGING", "warn", "x")},
		{"emptyBody", p + "LOGGING.log", "p8", payload("LOGGING", "log", "")},
		{"plainTextUnknownApp", p + "NOPE.log", "", []byte("plain text")},
		{"subjectMismatch", p + "LOGGING.log", "p10", payload("ACME-S3", "log", "x")},
		{"extraToken", p + "LOGGING.log.more", "p11", payload("LOGGING", "log", "x")},
		{"trailingData", p + "LOGGING.log", "p12", append(payload("LOGGING", "log", "x"), []byte(` {}`)...)},
	}
	for _, m := range poison {
		v.publish(m.subject, m.msgID, m.data)
	}
	v.publish(p+"LOGGING.log", "good-1", payload("LOGGING", "log", "valid"))

	admin := v.admin()
	var dead []any
	apptest.Until(t, 20*time.Second, "dead letters", func() bool {
		_, got := v.do("GET", "/log/dead?limit=100", admin, nil)
		dead, _ = got["deadLetters"].([]any)
		return len(dead) >= len(poison)
	})
	apptest.Until(t, 10*time.Second, "valid record", func() bool { return v.count(v.byMsgID("good-1")) == 1 })
	apptest.Until(t, 10*time.Second, "consumer settled", v.settled)
	time.Sleep(1500 * time.Millisecond) // longer than AckWait: nothing comes back
	st, got := v.do("GET", "/log/dead?limit=100", admin, nil)
	dead, _ = got["deadLetters"].([]any)
	if st != 200 || len(dead) != len(poison) {
		t.Fatalf("status %d, %d dead letters, want %d", st, len(dead), len(poison))
	}
	bySubjectID := map[string]map[string]any{}
	for _, d := range dead {
		m := d.(map[string]any)
		if m["reason"] == "" || m["data"] == nil || m["seq"] == nil || m["id"] == "" {
			t.Fatalf("dead letter lacks fields: %v", m)
		}
		bySubjectID[m["subject"].(string)+"|"+m["msgId"].(string)] = m
	}
	for _, m := range poison {
		if _, ok := bySubjectID[m.subject+"|"+m.msgID]; !ok {
			t.Errorf("%s: not dead-lettered", m.name)
		}
	}
	if n := v.count(nil); n != 1 {
		t.Fatalf("%d records stored, want only the valid one", n)
	}
	if i := v.consumerInfo(); i.NumRedelivered != 0 {
		t.Fatalf("redelivered %d", i.NumRedelivered)
	}
	// Pages and access.
	if st, got := v.do("GET", "/log/dead?page=2&limit=10", admin, nil); st != 200 || len(got["deadLetters"].([]any)) != len(poison)-10 {
		t.Fatalf("page 2: %d %v", st, got)
	}
	if st, got := v.do("GET", "/log/dead?page=0", admin, nil); st != 400 || got["field"] != "page" {
		t.Fatalf("page 0: %d %v", st, got)
	}
}

// A message id published twice within the stream's window is stored once
// (JetStream drops the second); a redelivery of a message already stored
// (written directly here, as a delivery cut short before its ack would have)
// is stored once too: its stream sequence is claimed in MongoDB. Republished
// after the window (one second here), a message is a new message of the
// stream and is stored again: the window must cover publishers' retries
// (docs/design/log-store.md, "Exactly once").
func TestNATSDuplicateMsgID(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_DUPLICATE_WINDOW": "1s"})
	subj := v.prefix() + ".logs.ACME-S3.log"
	data := payload("ACME-S3", "log", "uploaded")
	if v.publish(subj, "dup-1", data) {
		t.Fatal("first publish called a duplicate")
	}
	if !v.publish(subj, "dup-1", data) {
		t.Fatal("second publish within the window not called a duplicate")
	}
	time.Sleep(1500 * time.Millisecond) // past the dedupe window
	if v.publish(subj, "dup-1", data) {
		t.Fatal("publish after the window called a duplicate")
	}
	// An id already stored by an earlier delivery (written directly here).
	v.storeDirect("dup-2", "ACME-S3", "stored before")
	v.publish(subj, "dup-2", payload("ACME-S3", "log", "redelivered"))
	v.publish(subj, "marker", payload("ACME-S3", "log", "marker"))
	apptest.Until(t, 20*time.Second, "marker", func() bool { return v.count(v.byMsgID("marker")) == 1 })
	apptest.Until(t, 10*time.Second, "consumer settled", v.settled)
	if n := v.count(v.byMsgID("dup-1")); n != 1 {
		t.Fatalf("dup-1 (republished after the window) stored %d times", n)
	}
	if n := v.count(func(r logs.Record) bool { return r.LogBody == "uploaded" }); n != 2 {
		t.Fatalf("dup-1 stored %d times in all, want 2 (once in the window, once after)", n)
	}
	dup2 := v.recordID("dup-2")
	if n := v.count(func(r logs.Record) bool { return r.ID == dup2 && r.LogBody == "stored before" }); n != 1 {
		t.Fatalf("dup-2 stored %d times as first written", n)
	}
	if n := v.count(nil); n != 4 {
		t.Fatalf("%d records, want 4", n)
	}
	v.checkChains()
	code, got := v.do("GET", "/log/dead", v.admin(), nil)
	if code != 200 || len(got["deadLetters"].([]any)) != 0 {
		t.Fatalf("dead letters: %d %v", code, got)
	}
}

// The consumer stopped mid-stream and started again stores every record
// exactly once.
func TestNATSStopMidStreamAndRestart(t *testing.T) {
	const n = 600
	s, env, id := newEnv(t, map[string]string{"LOGS_BATCH": "20"})
	v := start(t, s, env, id)
	v.stop()
	// Publish while no consumer runs, then start it, stop it mid-stream and
	// start it again.
	js, _ := jetstream.New(s.NATS)
	subj := v.prefix() + ".logs.SERVER-APP-C.db"
	for i := range n {
		m := &nats.Msg{Subject: subj, Data: payload("SERVER-APP-C", "db", fmt.Sprint("query ", i)), Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("crash-%d", i))
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publish did not complete")
	}
	filter := byApp("SERVER-APP-C")
	v = start(t, s, env, id)
	// Progress is read from the consumer (cheap), the records once at rest.
	apptest.Until(t, 30*time.Second, "first records acked", func() bool { return v.consumerInfo().AckFloor.Stream > 0 })
	v.stop()
	partial := v.count(filter)
	t.Logf("stopped after %d of %d records", partial, n)
	if partial >= n {
		t.Fatalf("all %d records were stored before the stop; the test did not stop mid-stream", n)
	}
	v = start(t, s, env, id)
	apptest.Until(t, 6*time.Minute, "consumer settled", v.settled)
	if got := v.count(filter); got != n {
		t.Fatalf("%d records stored, want exactly %d", got, n)
	}
	// count has checked that no record is listed twice.
	v.checkChains()
}

// Retention removes records older than LOGS_RETENTION (whole chunks; the
// newest chunk of a chain anchors it and stays).
func TestRetention(t *testing.T) {
	s, env, id := newEnv(t, map[string]string{"LOGS_RETENTION": "1h", "LOGS_RETENTION_INTERVAL": "100ms"})
	st := mongostore.New(s.Mongo.Database(env["MONGO_DB"]))
	ctx := context.Background()
	apps, err := st.EnsureApps(ctx, []string{"LOGGING"})
	if err != nil {
		t.Fatal(err)
	}
	for i, age := range []time.Duration{2 * time.Hour, 30 * time.Minute} {
		if per, err := st.InsertBatch(ctx, []logs.Record{{MsgID: fmt.Sprint("r", i), Type: "log", App: "LOGGING", AppID: apps[0].ID,
			LogBody: fmt.Sprint("r", i), CreatedAt: time.Now().Add(-age)}}); err != nil || per[0] != nil {
			t.Fatal(err, per)
		}
	}
	v := start(t, s, env, id)
	body := func(b string) func(logs.Record) bool { return func(r logs.Record) bool { return r.LogBody == b } }
	apptest.Until(t, 10*time.Second, "old record removed", func() bool { return v.count(body("r0")) == 0 })
	if n := v.count(body("r1")); n != 1 {
		t.Fatal("recent record removed")
	}
}
