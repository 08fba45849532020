package natsingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/logs/storetest"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// A consumer that dies after writing a batch and before acking it (a
// crash) loses nothing and duplicates nothing: the batch is redelivered to
// the next consumer and the unique message id makes the rewrite a no-op.
func TestCrashBetweenWriteAndAck(t *testing.T) {
	ctx := context.Background()
	s, store, apps, cfg, cons := newIngestEnv(t)
	prefix := cfg.Prefix
	const n = 200
	for i := range n {
		data, _ := json.Marshal(logclient.Message{App: "LOGGING", Type: "log", LogBody: fmt.Sprint(i), CreatedAt: time.Now()})
		m := &nats.Msg{Subject: logclient.Subject(prefix, "LOGGING", "log"), Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprint("id-", i))
		if _, err := s.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	newIngestor := func() *Ingestor {
		return &Ingestor{Consumer: cons, StreamTag: tagOf(t, s.JS, cfg.Prefix), Store: store, Validator: logs.Validator{Apps: logs.NewApps(apps), MaxBody: 1024},
			Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	count := func() int64 {
		rs, err := storetest.All(ctx, store, "")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, r := range rs {
			if seen[r.ID] {
				t.Fatalf("record %s listed twice", r.ID)
			}
			seen[r.ID] = true
		}
		return int64(len(rs))
	}

	// First consumer: acks one batch, writes the second and "crashes".
	crashCtx, crash := context.WithCancel(ctx)
	var batches atomic.Int32
	first := newIngestor()
	first.afterWrite = func(int) bool {
		if batches.Add(1) == 2 {
			crash()
			return true
		}
		return false
	}
	if err := first.Run(crashCtx); err != nil {
		t.Fatal(err)
	}
	written := count()
	if written != 40 {
		t.Fatalf("%d records written before the crash, want 40", written)
	}
	info, _ := cons.Info(ctx)
	// The 20 written but unacked must still be pending; a batch the fetcher
	// had already pulled ahead may be too (it was given back or never acked).
	// Exactly the first batch was acked: everything else is still owed.
	if info.NumAckPending+int(info.NumPending) != n-20 || info.NumAckPending < 20 {
		t.Fatalf("after the crash: %d awaiting ack, %d pending, %d redelivered; the 20 written but unacked must not be acked",
			info.NumAckPending, info.NumPending, info.NumRedelivered)
	}

	// Second consumer gets the rest, including the 20 written but unacked.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- newIngestor().Run(runCtx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, _ = cons.Info(ctx)
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer not settled: %+v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := count(); got != n {
		t.Fatalf("%d records, want exactly %d", got, n)
	}
}

func TestBackOff(t *testing.T) {
	c := Config{AckWait: 30 * time.Second, MaxDeliver: 20}
	b := c.BackOff()
	if len(b) != 8 || b[0] != 30*time.Second || b[7] != 5*time.Minute {
		t.Fatalf("backoff %v", b)
	}
	if got := (Config{AckWait: time.Second, MaxDeliver: 3}).BackOff(); len(got) != 2 {
		t.Fatalf("backoff %v, want len < MaxDeliver", got)
	}
}

// refusing is a real store that refuses one message id on every write, as
// a server would refuse a document for a reason of its own.
type refusing struct {
	*mongostore.Store
	msgID string
}

func (r refusing) InsertBatch(ctx context.Context, rs []logs.Record) ([]error, error) {
	var keep []logs.Record
	var at []int
	per := make([]error, len(rs))
	for i, x := range rs {
		if x.MsgID == r.msgID {
			per[i] = errors.New("document refused")
			continue
		}
		keep = append(keep, x)
		at = append(at, i)
	}
	got, err := r.Store.InsertBatch(ctx, keep)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		per[i] = got[j]
	}
	return per, nil
}

// A valid message the store refuses on every delivery is kept as a dead
// letter on its last one, then terminated; the others are stored.
func TestRefusedOnLastDeliveryIsDeadLettered(t *testing.T) {
	s := testkit.Get(t, testkit.Mongo, testkit.NATS)
	ctx := context.Background()
	prefix := s.SubjectPrefix(t)
	store := mongostore.New(s.Mongo.Database(s.Database(t)))
	if err := store.EnsureIndexes(ctx); err != nil { // as the service does before it serves
		t.Fatal(err)
	}
	apps, err := store.EnsureApps(ctx, []string{"LOGGING"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Prefix: prefix, Consumer: "logs-writer", BatchSize: 10, FetchWait: 100 * time.Millisecond,
		AckWait: 300 * time.Millisecond, MaxDeliver: 3, Duplicates: time.Minute, StreamMaxAge: time.Hour}
	cons, err := Setup(ctx, s.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ok-1", "refused", "ok-2"} {
		data, _ := json.Marshal(logclient.Message{App: "LOGGING", Type: "log", LogBody: id})
		m := &nats.Msg{Subject: logclient.Subject(prefix, "LOGGING", "log"), Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		if _, err := s.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	in := &Ingestor{Consumer: cons, StreamTag: tagOf(t, s.JS, cfg.Prefix), Store: refusing{store, "refused"}, Validator: logs.Validator{Apps: logs.NewApps(apps), MaxBody: 1024},
		Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go func() { done <- in.Run(runCtx) }()
	deadline := time.Now().Add(30 * time.Second)
	var dead []logs.DeadLetter
	for len(dead) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no dead letter for the refused message")
		}
		time.Sleep(100 * time.Millisecond)
		if dead, err = store.ListDeadLetters(ctx, 0, 10); err != nil {
			t.Fatal(err)
		}
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer not settled: %+v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].MsgID != "refused" || dead[0].Deliveries != 3 || !strings.Contains(dead[0].Reason, "document refused") {
		t.Fatalf("dead letters: %+v", dead)
	}
	rs, err := storetest.All(ctx, store, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].LogBody == "refused" || rs[1].LogBody == "refused" {
		t.Fatalf("stored: %+v", rs)
	}
}

// tagOf is Tag, failing the test on error.
func tagOf(t *testing.T, js jetstream.JetStream, prefix string) string {
	t.Helper()
	tag, err := Tag(context.Background(), js, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// A stream deleted and made again under the same name (its sequences start
// over at 1) while a replica runs: the replica notices (its fetch fails, or
// its periodic check), reads the new tag, and stores the new stream's
// messages instead of taking them for redeliveries of the old ones.
func TestStreamMadeAgainWhileRunning(t *testing.T) {
	ctx := context.Background()
	s, store, apps, cfg, cons := newIngestEnv(t)
	prefix := cfg.Prefix
	publish := func(from, n int) {
		for i := from; i < from+n; i++ {
			data, _ := json.Marshal(logclient.Message{App: "LOGGING", Type: "log", LogBody: fmt.Sprint(i), CreatedAt: time.Now()})
			m := &nats.Msg{Subject: logclient.Subject(prefix, "LOGGING", "log"), Data: data, Header: nats.Header{}}
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprint("again-", i))
			if _, err := s.JS.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	stored := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			rs, err := storetest.All(ctx, store, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d records stored, want %d", len(rs), want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	in := &Ingestor{Consumer: cons, StreamTag: tagOf(t, s.JS, prefix), Store: store, Validator: logs.Validator{Apps: logs.NewApps(apps), MaxBody: 1024},
		Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RefreshTag: func(ctx context.Context) (string, error) { return Tag(ctx, s.JS, prefix) }}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	publish(0, 30)
	stored(30)

	if err := s.JS.DeleteStream(ctx, StreamName(prefix)); err != nil {
		t.Fatal(err)
	}
	if _, err := Setup(ctx, s.JS, cfg); err != nil { // another replica starting
		t.Fatal(err)
	}
	publish(30, 30) // sequences 1 to 30 again
	stored(60)
	rs, err := storetest.All(ctx, store, "")
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]bool{}
	for _, r := range rs {
		bodies[r.LogBody] = true
	}
	if len(bodies) != 60 {
		t.Fatalf("%d distinct bodies, want 60", len(bodies))
	}
}

// newIngestEnv is a fresh store with the app LOGGING, and the log stream and
// consumer of a fresh subject prefix (batches of 20, ack wait 1s).
func newIngestEnv(t *testing.T) (*testkit.Servers, *mongostore.Store, []logs.App, Config, jetstream.Consumer) {
	t.Helper()
	s := testkit.Get(t, testkit.Mongo, testkit.NATS)
	ctx := context.Background()
	store := mongostore.New(s.Mongo.Database(s.Database(t)))
	if err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	apps, err := store.EnsureApps(ctx, []string{"LOGGING"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Prefix: s.SubjectPrefix(t), Consumer: "logs-writer", BatchSize: 20, FetchWait: 100 * time.Millisecond,
		AckWait: time.Second, MaxDeliver: 5, Duplicates: time.Minute, StreamMaxAge: time.Hour}
	cons, err := Setup(ctx, s.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, store, apps, cfg, cons
}
