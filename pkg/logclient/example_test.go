package logclient_test

import (
	"context"
	"log"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/nats-io/nats.go"
)

// A service publishes its own errors as its app (auth as ACME-AUTH) and
// closes the client on shutdown, before draining the connection. It logs in
// to NATS as its user and replies under that user's inbox prefix,
// _INBOX_<user>, the only reply subjects deploy/nats.conf lets it read
// (natsconn.Connect sets it from the URL's login).
func Example() {
	nc, err := nats.Connect("nats://publisher:secret@127.0.0.1:4222", nats.MaxReconnects(-1),
		nats.CustomInboxPrefix(natsconn.InboxPrefix("publisher")))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Drain()
	logs, err := logclient.New(nc, logclient.Options{Prefix: "acme"})
	if err != nil {
		log.Fatal(err)
	}

	// Never blocks; false means the record was dropped (buffer full).
	logs.Log("ACME-AUTH", logclient.TypeError, "sign-in store unavailable", "req-42")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := logs.Close(ctx); err != nil {
		log.Printf("logs not flushed: %v (%+v)", err, logs.Stats())
	}
}
