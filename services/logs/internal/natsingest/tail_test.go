package natsingest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A follower that does not keep up loses records (counted) instead of
// blocking delivery; those it keeps are the first ones, in stream order.
func TestFollowerDropsWhenBehind(t *testing.T) {
	s := testkit.Get(t, testkit.NATS)
	ctx := context.Background()
	prefix := s.SubjectPrefix(t)
	cfg := Config{Prefix: prefix, Consumer: "logs-writer", BatchSize: 20, FetchWait: 100 * time.Millisecond,
		AckWait: time.Second, MaxDeliver: 5, Duplicates: time.Minute, StreamMaxAge: time.Hour}
	if _, err := Setup(ctx, s.JS, cfg); err != nil {
		t.Fatal(err)
	}
	tail := &Tail{JS: s.JS, Config: cfg, Validator: logs.Validator{Apps: logs.NewApps([]logs.App{{ID: "a1", Name: "LOGGING"}}), MaxBody: 1024}}
	f, err := tail.Follow(ctx, "", "", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	const n = 10
	var seqs []uint64
	for i := range n {
		data, _ := json.Marshal(logclient.Message{App: "LOGGING", Type: "log", LogBody: fmt.Sprint(i), CreatedAt: time.Now()})
		m := &nats.Msg{Subject: logclient.Subject(prefix, "LOGGING", "log"), Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprint("drop-", i))
		ack, err := s.JS.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	tag := tagOf(t, s.JS, prefix)
	for end := time.Now().Add(10 * time.Second); f.Dropped() < n-3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("dropped %d, want %d", f.Dropped(), n-3)
		}
	}
	for i := range 3 {
		rec := <-f.C
		if rec.LogBody != fmt.Sprint(i) || rec.ID != logs.StreamRecordID(tag, seqs[i]) || rec.App != "LOGGING" {
			t.Fatalf("record %d: %+v", i, rec)
		}
	}
	if f.Dropped() != n-3 || len(f.C) != 0 {
		t.Fatalf("dropped %d, %d left", f.Dropped(), len(f.C))
	}
}
