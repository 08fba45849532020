package natsconn

import (
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/nats-io/nats.go"
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
