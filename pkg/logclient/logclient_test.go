package logclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func createStream(t *testing.T, js jetstream.JetStream, prefix string) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       strings.ToUpper(prefix) + "_LOGS",
		Subjects:   []string{logclient.StreamSubjects(prefix)},
		Duplicates: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func streamMsgs(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Every record given to Log reaches the stream once, on its app/type
// subject, with a message id and the wire payload.
func TestLogPublishesWithMsgID(t *testing.T) {
	s := testkit.Get(t, testkit.NATS)
	prefix := s.SubjectPrefix(t)
	st := createStream(t, s.JS, prefix)
	c, err := logclient.New(s.NATS, logclient.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		if !c.Log("ACME-AUTH", logclient.TypeError, "boom "+strconv.Itoa(i), "m-1") {
			t.Fatalf("record %d refused", i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := streamMsgs(t, st); got != n {
		t.Fatalf("stream holds %d messages, want %d", got, n)
	}
	if got := c.Stats(); got.Published != n || got.Dropped != 0 || got.Failed != 0 || got.Pending != 0 {
		t.Fatalf("stats %+v", got)
	}
	raw, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := raw.Subject, prefix+".logs.ACME-AUTH.error"; got != want {
		t.Fatalf("subject %q, want %q", got, want)
	}
	if id := raw.Header.Get(jetstream.MsgIDHeader); len(id) != 32 {
		t.Fatalf("Nats-Msg-Id %q, want 32 hex characters", id)
	}
	var m logclient.Message
	if err := json.Unmarshal(raw.Data, &m); err != nil {
		t.Fatal(err)
	}
	if m.App != "ACME-AUTH" || m.Type != "error" || m.LogBody != "boom 0" || m.MetricsID != "m-1" || m.CreatedAt.IsZero() {
		t.Fatalf("payload %+v", m)
	}
}

func TestLogRefusesInvalidAndAfterClose(t *testing.T) {
	s := testkit.Get(t, testkit.NATS)
	c, err := logclient.New(s.NATS, logclient.Options{Prefix: s.SubjectPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"", "A.B", "A B", "*", ">"} {
		if c.Log(app, "log", "x", "") {
			t.Errorf("app %q accepted", app)
		}
	}
	_ = c.Close(context.Background())
	if c.Log("LOGGING", "log", "x", "") {
		t.Error("accepted after Close")
	}
	if got := c.Stats().Dropped; got != 6 {
		t.Fatalf("dropped %d, want 6", got)
	}
}

// ownNATS starts a NATS server of the test's own that it can stop and
// restart on the same port and store directory.
type ownNATS struct {
	t    *testing.T
	dir  string
	port int
	srv  *server.Server
}

func startOwnNATS(t *testing.T) *ownNATS {
	testkit.SkipShort(t)
	addr, err := embedded.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	o := &ownNATS{t: t, dir: t.TempDir(), port: port}
	o.start()
	t.Cleanup(o.stop)
	return o
}

func (o *ownNATS) start() {
	o.t.Helper()
	s, err := embedded.NATS(o.dir, "127.0.0.1", o.port)
	if err != nil {
		o.t.Fatal(err)
	}
	o.srv = s
}

func (o *ownNATS) stop() {
	if o.srv != nil {
		o.srv.Shutdown()
		o.srv.WaitForShutdown()
		o.srv = nil
	}
}

func (o *ownNATS) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", o.port) }

// With NATS away the buffer holds at most BufferSize records (plus one
// batch in flight); the rest are dropped and counted, and Log never blocks.
func TestBufferBound(t *testing.T) {
	srv := startOwnNATS(t)
	nc, err := nats.Connect(srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	srv.stop()
	const buffer, batch, n = 20, 4, 200
	c, err := logclient.New(nc, logclient.Options{Prefix: "bound", BufferSize: buffer, BatchSize: batch, AckTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	accepted := 0
	for range n {
		if c.Log("LOGGING", "log", "x", "") {
			accepted++
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Log blocked: %d records took %v", n, d)
	}
	st := c.Stats()
	if accepted > buffer+batch || accepted < buffer {
		t.Fatalf("accepted %d, want between %d and %d", accepted, buffer, buffer+batch)
	}
	if st.Dropped != uint64(n-accepted) {
		t.Fatalf("dropped %d, want %d", st.Dropped, n-accepted)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.Close(ctx); err == nil {
		t.Fatal("Close succeeded with NATS away")
	}
	if st := c.Stats(); st.Failed != uint64(accepted) || st.Pending != 0 {
		t.Fatalf("after Close: %+v, want %d failed", st, accepted)
	}
}

// Records logged while NATS is down are retried with their message ids and
// all arrive, exactly once, once it is back; Close flushes them.
func TestRetriesWhileNATSAway(t *testing.T) {
	srv := startOwnNATS(t)
	nc, err := nats.Connect(srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	prefix := "away"
	createStream(t, js, prefix)

	c, err := logclient.New(nc, logclient.Options{Prefix: prefix, AckTimeout: 300 * time.Millisecond, RetryMin: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const before, during = 10, 40
	for i := range before {
		c.Log("SERVER-APP-A", "log", "before "+strconv.Itoa(i), "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	for i := range during {
		if !c.Log("SERVER-APP-A", "log", "during "+strconv.Itoa(i), "") {
			t.Fatalf("record %d refused", i)
		}
	}
	time.Sleep(800 * time.Millisecond) // several failed attempts
	if st := c.Stats(); st.Published != before || st.Pending != during {
		t.Fatalf("while away: %+v", st)
	}
	srv.start()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Published != before+during || st.Failed != 0 || st.Retries == 0 {
		t.Fatalf("after restart: %+v", st)
	}
	stream, err := js.Stream(ctx, strings.ToUpper(prefix)+"_LOGS")
	if err != nil {
		t.Fatal(err)
	}
	if got := streamMsgs(t, stream); got != before+during {
		t.Fatalf("stream holds %d, want %d", got, before+during)
	}
}

// Drops are reported: a counter and an error line at once, then at most one
// line per DropLogInterval carrying the count since the last one.
func TestDropsReportedByMetricAndErrorLog(t *testing.T) {
	srv := startOwnNATS(t)
	nc, err := nats.Connect(srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	srv.stop()
	var logBuf apptest.Log
	reg := prometheus.NewRegistry()
	const buffer, batch, n = 10, 2, 100
	c, err := logclient.New(nc, logclient.Options{
		Prefix: "drops", BufferSize: buffer, BatchSize: batch, AckTimeout: 200 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logBuf, nil)), DropLogInterval: time.Hour, Metrics: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = c.Close(ctx) // NATS stays away: gives up at once
	}()
	for range n {
		c.Log("LOGGING", "log", "x", "")
	}
	st := c.Stats()
	if st.Dropped == 0 {
		t.Fatal("nothing dropped with NATS away and a full buffer")
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "/" + l.GetValue()
			}
			if m.Counter != nil {
				got[key] = m.Counter.GetValue()
			} else if m.Gauge != nil {
				got[key] = m.Gauge.GetValue()
			}
		}
	}
	if got["acme_logclient_records_total/dropped"] != float64(st.Dropped) {
		t.Errorf("metrics %v, want dropped %d", got, st.Dropped)
	}
	if got["acme_logclient_pending"] != float64(st.Pending) {
		t.Errorf("metrics %v, want pending %d", got, st.Pending)
	}
	lines := strings.Split(strings.TrimSpace(logBuf.String()), "\n")
	var errs []map[string]any
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["level"] == "ERROR" {
			errs = append(errs, m)
		}
	}
	if len(errs) != 1 || errs[0]["reason"] != "buffer full" || errs[0]["records"] != float64(1) {
		t.Fatalf("error lines %v, want one for the first drop (the next within the interval are counted, not logged)", errs)
	}
}

// With Linger, records arriving at a trickle are published together: none
// while the first one lingers, all of them once Linger has passed, and at
// once when Flush asks.
func TestLinger(t *testing.T) {
	s := testkit.Get(t, testkit.NATS)
	prefix := s.SubjectPrefix(t)
	st := createStream(t, s.JS, prefix)
	const linger = 2 * time.Second
	c, err := logclient.New(s.NATS, logclient.Options{Prefix: prefix, Linger: linger})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	waitPublished := func(n uint64, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for c.Stats().Published < n {
			if time.Since(start) > within {
				t.Fatalf("published %d after %v, want %d", c.Stats().Published, within, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}

	// A trickle: three records 100 ms apart, all within the first one's
	// linger, then published together when it ends.
	start := time.Now()
	for i := range 3 {
		c.Log("ACME-AUTH", "log", "trickle "+strconv.Itoa(i), "")
		time.Sleep(100 * time.Millisecond)
	}
	if got := c.Stats().Published; got != 0 && time.Since(start) < linger {
		t.Fatalf("%d records published while the first lingers", got)
	}
	waitPublished(3, linger+5*time.Second)
	if took := time.Since(start); took < linger {
		t.Fatalf("published after %v, before the linger of %v ended", took, linger)
	}
	if got := streamMsgs(t, st); got != 3 {
		t.Fatalf("stream holds %d messages, want 3", got)
	}

	// Flush does not wait for the linger.
	c.Log("ACME-AUTH", "log", "flushed", "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start = time.Now()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > linger/2 {
		t.Fatalf("Flush took %v, the linger is %v", took, linger)
	}
	if got := streamMsgs(t, st); got != 4 {
		t.Fatalf("stream holds %d messages, want 4", got)
	}
}

// Under deploy/nats.conf a login subscribes to its own reply subjects only:
// a publisher connected with natsconn (inbox prefix _INBOX_publisher) has
// its records acknowledged; New refuses a logged-in connection that kept
// the shared _INBOX prefix.
func TestPublisherLoginRepliesUnderItsOwnInbox(t *testing.T) {
	testkit.SkipShort(t)
	pw := map[string]string{}
	for _, u := range []string{"auth", "files", "logs", "gateway", "publisher"} {
		pw[u] = "pw-" + u
	}
	srv, err := embedded.NATSWithUsers(embedded.NATSUsersOptions{Config: filepath.Join("..", "..", "deploy", "nats.conf"),
		Passwords: pw, Dir: t.TempDir(), Host: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	port := srv.Addr().(*net.TCPAddr).Port
	login := func(user string) string { return fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", user, pw[user], port) }

	// The logs service's stream, made by its login.
	logsNC, err := natsconn.Connect(login("logs"), "logs", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer logsNC.Close()
	js, _ := jetstream.New(logsNC)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ACME_LOGS", Subjects: []string{logclient.StreamSubjects("acme")}}); err != nil {
		t.Fatal(err)
	}

	shared, err := nats.Connect(srv.ClientURL(), nats.UserInfo("publisher", pw["publisher"]))
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	if _, err := logclient.New(shared, logclient.Options{Prefix: "acme"}); err == nil || !strings.Contains(err.Error(), "_INBOX_publisher") {
		t.Fatalf("New on a publisher login with the shared _INBOX: %v, want an error naming _INBOX_publisher", err)
	}

	nc, err := natsconn.Connect(login("publisher"), "publisher", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := logclient.New(nc, logclient.Options{Prefix: "acme", AckTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Log("SERVER-APP-A", logclient.TypeLog, "acknowledged", "") {
		t.Fatal("record refused")
	}
	if err := c.Close(ctx); err != nil || c.Stats().Published != 1 {
		t.Fatalf("close: %v, stats %+v", err, c.Stats())
	}
}
