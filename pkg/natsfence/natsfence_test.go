package natsfence

import (
	"context"
	"github.com/acme/platform/pkg/testkit"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/nats-io/nats.go"
)

// The fence's promise, under concurrency: when Sync returns nil, every
// message published and flushed before Sync was called has been applied.
// Many requests call Sync at once (rounds overlap, up to MaxRounds) while
// revocations keep coming from another connection, as auth sends them, and
// applying them lags behind their delivery. (Checked against broken
// versions: it fails every run when Sync returns at once, and about one run
// in three when a round still takes requests after its PING was sent.)
func TestSyncAppliesEverythingPublishedBefore(t *testing.T) {
	testkit.SkipShort(t)
	srv, err := embedded.NATS(t.TempDir(), "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	gw, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	auth, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()

	const subject = "acme.auth.revoked"
	rv, err := New(gw, subject, func([]byte) {}, func() {}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	rv.SetApplyDelay(300 * time.Microsecond) // applying lags behind delivery
	// The subscription is registered on the server.
	if err := gw.Flush(); err != nil {
		t.Fatal(err)
	}

	// The publisher counts a revocation once the server has it (as auth
	// answers only after its flush).
	var published atomic.Int64
	stop := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		msg := []byte(`{"sessions":["x"],"users":[]}`)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := auth.Publish(subject, msg); err != nil {
				t.Error(err)
				return
			}
			if err := auth.Flush(); err != nil {
				t.Error(err)
				return
			}
			published.Add(1)
			time.Sleep(time.Millisecond) // slower than applying, on average
		}
	}()

	var wg sync.WaitGroup
	var syncs, overlapped atomic.Int64
	end := time.Now().Add(2 * time.Second)
	for range 32 {
		wg.Go(func() {
			for time.Now().Before(end) {
				before := published.Load()
				if err := rv.Sync(context.Background()); err != nil {
					t.Error(err)
					return
				}
				applied := rv.Applied()
				if applied < before {
					t.Errorf("Sync returned with %d revocations applied, %d were published before it was called", applied, before)
					return
				}
				if rv.InFlight() > 1 {
					overlapped.Add(1)
				}
				syncs.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-pubDone
	if published.Load() == 0 {
		t.Fatal("no revocation was published during the test")
	}
	inflight := rv.InFlight()
	t.Logf("%d syncs, %d revocations, %d syncs saw rounds overlap", syncs.Load(), published.Load(), overlapped.Load())
	if inflight < 0 || inflight > MaxRounds {
		t.Fatalf("%d rounds in flight after the test", inflight)
	}
}

// Messages are applied in order, a reconnect resets the cache before Sync
// succeeds again, and without a connection Sync fails (the cache must not
// be trusted).
func TestApplyResetAndDisconnected(t *testing.T) {
	testkit.SkipShort(t)
	dir := t.TempDir()
	addr, err := embedded.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	srv, err := embedded.NATS(dir, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	var got []string
	var resets atomic.Int64
	f, err := New(nc, "x.changed", func(b []byte) {
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	}, func() { resets.Add(1) }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b", "c"} {
		if err := nc.Publish("x.changed", []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(got) != 3 || got[0] != "a" || got[2] != "c" {
		t.Fatalf("applied %v, want [a b c]", got)
	}
	mu.Unlock()
	if resets.Load() != 0 {
		t.Fatalf("reset %d times without a reconnect", resets.Load())
	}

	srv.Shutdown()
	deadline := time.Now().Add(5 * time.Second)
	for nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.Sync(context.Background()); err == nil {
		t.Fatal("Sync succeeded without a NATS connection")
	}
	// The same address again: the client reconnects, and the first Sync
	// that succeeds has reset the cache.
	srv2, err := embedded.NATS(dir, "127.0.0.1", port)
	if err != nil {
		t.Fatalf("cannot restart NATS on %s: %v", url, err)
	}
	defer srv2.Shutdown()
	for !nc.IsConnected() && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if resets.Load() != 1 {
		t.Fatalf("reset %d times after one reconnect, want 1", resets.Load())
	}
}

// Under Once, a fence that passed passes again without a round trip (here
// the server is gone by then); a failed Sync is not remembered, and
// another request's context is not affected.
func TestOnce(t *testing.T) {
	testkit.SkipShort(t)
	srv, err := embedded.NATS(t.TempDir(), "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f, err := New(nc, "x.once", func([]byte) {}, func() {}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := New(nc, "y.once", func([]byte) {}, func() {}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	req := Once(context.Background())
	if err := f.Sync(req); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	deadline := time.Now().Add(5 * time.Second)
	for nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.Sync(req); err != nil {
		t.Fatalf("second Sync of the same request: %v, want nil without a round trip", err)
	}
	if err := g.Sync(req); err == nil {
		t.Fatal("another fence passed without its own round trip")
	}
	if err := f.Sync(Once(context.Background())); err == nil {
		t.Fatal("a new request passed the fence with NATS away")
	}
	if err := f.Sync(context.Background()); err == nil {
		t.Fatal("Sync without Once passed with NATS away")
	}
	failed := Once(context.Background())
	if f.Sync(failed) == nil || f.Sync(failed) == nil {
		t.Fatal("a failed Sync was remembered as passed")
	}
}
