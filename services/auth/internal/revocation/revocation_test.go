package revocation

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/nats-io/nats.go"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// When Revoked returns, the NATS server has the message: a subscriber that
// then makes a round trip to the server has received it. Gateways rely on
// this to refuse a session on the request after a sign-out.
func TestRevokedIsOnTheServerWhenItReturns(t *testing.T) {
	s := testkit.Get(t, testkit.NATS)
	prefix := s.SubjectPrefix(t)
	pubConn, err := nats.Connect(s.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pubConn.Close()
	subConn, err := nats.Connect(s.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer subConn.Close()
	ch := make(chan *nats.Msg, 1000)
	if _, err := subConn.ChanSubscribe(Subject(prefix), ch); err != nil {
		t.Fatal(err)
	}
	if err := subConn.Flush(); err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(pubConn, prefix, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for i := range 300 {
		p.Revoked(context.Background(), account.Revocation{Users: []string{string(rune('a' + i%26))}})
		if err := subConn.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-ch:
			var r account.Revocation
			if err := json.Unmarshal(m.Data, &r); err != nil || len(r.Users) != 1 || r.Sessions == nil {
				t.Fatalf("message %d: %s", i, m.Data)
			}
		default:
			t.Fatalf("revocation %d not at the subscriber after Revoked returned and a round trip", i)
		}
	}
}
