//go:build unix

package httpapi

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/files"
)

// tcpPair is a connected pair of TCP connections: the server's side and
// the client's.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// A watch cancels its context with ErrClientGone soon after the client
// closes; one whose client stays, or still has bytes to be read, does not;
// stop returns at once either way.
func TestHangupWatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(client net.Conn)
		gone  bool
	}{
		{"closed", func(c net.Conn) { c.Close() }, true},
		{"stays", func(net.Conn) {}, false},
		{"closed behind unread bytes", func(c net.Conn) { c.Write([]byte("--B--\r\n")); c.Close() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := tcpPair(t)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			w := &hangupWatch{conn: server, cancel: cancel}
			w.start()
			tc.leave(client)
			select {
			case <-ctx.Done():
				if !tc.gone {
					t.Fatalf("cancelled: %v", context.Cause(ctx))
				}
				if !errors.Is(context.Cause(ctx), files.ErrClientGone) {
					t.Fatalf("cause %v, want ErrClientGone", context.Cause(ctx))
				}
			case <-time.After(5 * hangupPoll):
				if tc.gone {
					t.Fatal("not cancelled after the client closed")
				}
			}
			start := time.Now()
			w.stop()
			if d := time.Since(start); d > time.Second {
				t.Fatalf("stop took %v", d)
			}
		})
	}
	// A watch never started, or without a connection, stops at once.
	(&hangupWatch{}).stop()
	w := &hangupWatch{}
	w.start()
	w.stop()
}
