package natsconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestConnect: the shared options hold (no unbounded host lookup under the
// connection's lock, bounded dials, reconnecting forever) and extra options
// override them.
func TestConnect(t *testing.T) {
	kit := testkit.Get(t, testkit.NATS)
	nc, err := Connect(kit.NATSURL, "test", nil, nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	o := nc.Opts
	if !o.SkipHostLookup || o.Timeout != DialTimeout || o.MaxReconnect != -1 || o.Name != "test" ||
		o.PingInterval != PingInterval || o.MaxPingsOut != MaxPingsOut || o.FlusherTimeout != FlusherTimeout || !o.ReconnectOnFlusherError {
		t.Fatalf("options: skip lookup %v, timeout %v, max reconnects %d, name %q, pings every %v, stale after %d, flusher timeout %v, reconnect on its error %v",
			o.SkipHostLookup, o.Timeout, o.MaxReconnect, o.Name, o.PingInterval, o.MaxPingsOut, o.FlusherTimeout, o.ReconnectOnFlusherError)
	}
	if o.ReconnectWait != 250*time.Millisecond {
		t.Fatalf("an extra option did not override the shared one: reconnect wait %v", o.ReconnectWait)
	}
}

func TestURLUser(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"nats://127.0.0.1:4222", ""},
		{"nats://auth:secret@nats:4222", "auth"},
		{"nats://publisher:pw@n1:4222, nats://publisher:pw@n2:4222", "publisher"},
		{"files:pw@127.0.0.1:4222", "files"},
		{"nats://tokenonly@nats:4222", "tokenonly"},
	} {
		if got := URLUser(c.url); got != c.want {
			t.Errorf("URLUser(%q) = %q, want %q", c.url, got, c.want)
		}
	}
	if got := InboxPrefix(""); got != "_INBOX" {
		t.Errorf("InboxPrefix(\"\") = %q", got)
	}
}

// TestConnectRepliesUnderItsLogin: a connection logged in as a user whose
// permissions allow only its own inbox prefix gets its request replies and
// JetStream answers; the shared _INBOX.> is refused to it.
func TestConnectRepliesUnderItsLogin(t *testing.T) {
	testkit.SkipShort(t)
	own := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"svc.echo", "$JS.API.INFO"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_alice.>"}},
	}
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
		Users: []*server.User{
			{Username: "alice", Password: "pw-alice", Permissions: own},
			{Username: "echo", Password: "pw-echo", Permissions: &server.Permissions{
				Subscribe: &server.SubjectPermission{Allow: []string{"svc.echo"}},
				Response:  &server.ResponsePermission{MaxMsgs: 1},
			}},
		}}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	port := srv.Addr().(*net.TCPAddr).Port
	url := func(user string) string { return fmt.Sprintf("nats://%s:pw-%s@127.0.0.1:%d", user, user, port) }

	responder, err := Connect(url("echo"), "echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer responder.Close()
	if _, err := responder.Subscribe("svc.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	_ = responder.Flush()

	violations := make(chan error, 4)
	nc, err := Connect(url("alice"), "alice", nil,
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.Opts.InboxPrefix; got != "_INBOX_alice" {
		t.Fatalf("inbox prefix %q, want _INBOX_alice", got)
	}
	if m, err := nc.Request("svc.echo", []byte("ping"), 3*time.Second); err != nil || string(m.Data) != "ping" {
		t.Fatalf("request: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream API request: %v", err)
	}
	if _, err := nc.SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"_INBOX.>"`) {
			t.Fatalf("subscribing to _INBOX.>: %v, want a permissions violation", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("subscribing to _INBOX.> was not refused")
	}
}
