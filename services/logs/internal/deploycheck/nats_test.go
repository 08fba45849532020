package deploycheck

import (
	"context"
	"errors"
	"github.com/acme/platform/pkg/testkit"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/services/logs/internal/app"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/natsingest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// memStore keeps what the ingestor writes; the other Store methods are not
// used on this path.
type memStore struct {
	logs.Store
	mu      sync.Mutex
	records []logs.Record
	dead    []logs.DeadLetter
}

func (s *memStore) InsertBatch(_ context.Context, rs []logs.Record) ([]error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, rs...)
	return make([]error, len(rs)), nil
}

func (s *memStore) AddDeadLetters(_ context.Context, ds []logs.DeadLetter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead = append(s.dead, ds...)
	return nil
}

func (s *memStore) counts() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records), len(s.dead)
}

// connect logs in as user and collects the server's asynchronous errors
// (refused publishes and subscriptions).
func connect(t *testing.T, url, user, password string) (*nats.Conn, func() []error) {
	t.Helper()
	var mu sync.Mutex
	var errs []error
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.CustomInboxPrefix(natsconn.InboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatalf("%s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, func() []error {
		_ = nc.Flush()
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		return errs
	}
}

func TestIngestUnderDeploymentPermissions(t *testing.T) {
	testkit.SkipShort(t)
	passwords := map[string]string{"auth": "authPw1", "files": "filesPw1", "logs": "logsPw1", "gateway": "gatewayPw1", "publisher": "publisherPw1"}
	for u, pw := range passwords {
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", pw)
	}
	srv, err := embedded.NATSWithConfig(filepath.Join("..", "..", "..", "..", "deploy", "nats.conf"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	// The production settings (LOGS_* defaults, as compose runs them).
	settings, _, err := app.Load(func(k string) string {
		return map[string]string{"IDENTITY_PUBLIC_KEY": "set", "LOGS_FETCH_WAIT": "200ms"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := settings.Ingest
	apps := make([]logs.App, len(settings.Apps))
	for i, name := range settings.Apps {
		apps[i] = logs.App{ID: name, Name: name}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	logsNC, logsErrs := connect(t, srv.ClientURL(), "logs", passwords["logs"])
	js, err := jetstream.New(logsNC)
	if err != nil {
		t.Fatal(err)
	}
	var cons jetstream.Consumer
	for range 2 { // first start creates, every later start updates
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second) // a refused request only times out
		cons, err = natsingest.Setup(sctx, js, cfg)
		scancel()
		if err != nil {
			t.Fatalf("natsingest.Setup as the logs user: %v", err)
		}
	}

	// The live tail's followers (ordered consumers, one unfiltered, one
	// filtered) work as the logs user too.
	validator := logs.Validator{Apps: logs.NewApps(apps), MaxBody: settings.MaxBody}
	tail := &natsingest.Tail{JS: js, NC: logsNC, Config: cfg, Validator: validator}
	var followers []*natsingest.Follower
	for _, f := range [][2]string{{"", ""}, {logclient.TypeError, "ACME-AUTH"}} {
		fl, err := tail.Follow(ctx, f[0], f[1], 8)
		if err != nil {
			t.Fatalf("tail follower %v as the logs user: %v", f, err)
		}
		defer fl.Stop()
		followers = append(followers, fl)
	}

	// auth publishes a record and a poison message (which the ingestor
	// terminates: another kind of ack).
	authNC, authErrs := connect(t, srv.ClientURL(), "auth", passwords["auth"])
	lc, err := logclient.New(authNC, logclient.Options{Prefix: cfg.Prefix, AckTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lc.Log("ACME-AUTH", logclient.TypeError, "sign-in store unavailable", "")
	if err := lc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = lc.Close(ctx)
	authJS, _ := jetstream.New(authNC)
	poison := &nats.Msg{Subject: logclient.Subject(cfg.Prefix, "ACME-AUTH", logclient.TypeError), Data: []byte("{not json"), Header: nats.Header{}}
	poison.Header.Set(jetstream.MsgIDHeader, logclient.NewMsgID())
	if _, err := authJS.PublishMsg(ctx, poison); err != nil {
		t.Fatal(err)
	}

	// A record stored from POST /log reaches the followers on core NATS.
	tail.Announce(logs.Record{ID: "000000000000000000000001", App: "ACME-AUTH", Type: logclient.TypeError, LogBody: "posted over HTTP"})

	for i, fl := range followers {
		got := map[string]bool{}
		for len(got) < 2 {
			select {
			case rec := <-fl.C:
				got[rec.LogBody] = true
			case <-time.After(5 * time.Second):
				t.Fatalf("follower %d: got %v, want both records under the deployment permissions", i, got)
			}
		}
		if !got["sign-in store unavailable"] || !got["posted over HTTP"] {
			t.Errorf("follower %d got %v", i, got)
		}
		fl.Stop()
	}

	store := &memStore{}
	in := &natsingest.Ingestor{Consumer: cons, StreamTag: tagOf(t, js, cfg.Prefix), Store: store, Validator: validator,
		Config: cfg, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.Run(runCtx) }()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r, d := store.counts(); r == 1 && d == 1 {
			break
		}
		if time.Now().After(deadline) {
			r, d := store.counts()
			t.Fatalf("ingested %d records and %d dead letters, want 1 and 1", r, d)
		}
	}
	// Acks travel asynchronously: wait until the server has them all.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not acked: %d pending acks, %d pending messages", info.NumAckPending, info.NumPending)
		}
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("ingestor: %v", err)
	}
	for user, errs := range map[string]func() []error{"logs": logsErrs, "auth": authErrs} {
		for _, err := range errs() {
			t.Errorf("%s: refused by deploy/nats.conf: %v", user, err)
		}
	}
}

func tagOf(t *testing.T, js jetstream.JetStream, prefix string) string {
	t.Helper()
	tag, err := natsingest.Tag(context.Background(), js, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}
