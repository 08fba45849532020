package sessions

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/nats-io/nats.go"
)

// The fence's promise, under concurrency: when Sync returns nil, every
// revocation published and flushed before Sync was called has been applied.
// Many requests call Sync at once (rounds overlap, up to maxRounds) while
// revocations keep coming from another connection, as auth sends them, and
// applying them lags behind their delivery. (Checked against broken
// versions: it fails every run when Sync returns at once, and about one run
// in three when a round still takes requests after its PING was sent.)
func TestSyncAppliesEverythingPublishedBefore(t *testing.T) {
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
	r := NewResolver(nil, "", nil, time.Minute)
	rv, err := NewRevocations(gw, subject, r, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	rv.applyDelay = 300 * time.Microsecond // applying lags behind delivery
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
		msg, _ := json.Marshal(Revocation{Sessions: []string{"x"}})
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
				rv.appliedMu.Lock()
				applied := rv.applied
				rv.appliedMu.Unlock()
				if applied < before {
					t.Errorf("Sync returned with %d revocations applied, %d were published before it was called", applied, before)
					return
				}
				rv.mu.Lock()
				if rv.inflight > 1 {
					overlapped.Add(1)
				}
				rv.mu.Unlock()
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
	rv.mu.Lock()
	inflight := rv.inflight
	rv.mu.Unlock()
	t.Logf("%d syncs, %d revocations, %d syncs saw rounds overlap", syncs.Load(), published.Load(), overlapped.Load())
	if inflight < 0 || inflight > maxRounds {
		t.Fatalf("%d rounds in flight after the test", inflight)
	}
}
