// Command examplepublisher publishes log records to the logs service over
// NATS JetStream with pkg/logclient, the way a service does:
//
//	go run ./cmd/examplepublisher -app SERVER-APP-A -type error -n 3 "disk almost full"
//
// NATS_URL, NATS_USER, NATS_PASSWORD(_FILE) and NATS_SUBJECT_PREFIX are
// read like the services read them (pkg/config's NATS settings), and it
// connects the way they do (pkg/natsconn): replies, JetStream's
// acknowledgements, come on the login's own inbox prefix, _INBOX_<user>
// (_INBOX_publisher for the publisher login of deploy/nats.conf).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/natsconn"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "examplepublisher:", err)
		os.Exit(1)
	}
}

func run() error {
	app := flag.String("app", "SERVER-APP-A", "application name (one of the logs service's apps)")
	typ := flag.String("type", "log", "log, error or db")
	metrics := flag.String("metrics", "", "optional metricsId")
	n := flag.Int("n", 1, "how many records")
	flag.Parse()
	body := strings.Join(flag.Args(), " ")
	if body == "" {
		body = "hello from examplepublisher"
	}
	r := config.New("", os.Getenv, config.NATS)
	url, prefix := r.URLWithLogin("NATS_URL", "NATS_USER", "NATS_PASSWORD"), r.String("NATS_SUBJECT_PREFIX")
	if err := r.Err(); err != nil {
		return err
	}

	nc, err := natsconn.Connect(url, "examplepublisher", nil)
	if err != nil {
		return err
	}
	defer nc.Drain()
	c, err := logclient.New(nc, logclient.Options{Prefix: prefix})
	if err != nil {
		return err
	}
	for i := range *n {
		b := body
		if *n > 1 {
			b = fmt.Sprintf("%s (%d/%d)", body, i+1, *n)
		}
		c.Log(*app, *typ, b, *metrics)
	}
	// On shutdown: publish what is buffered, within a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Close(ctx)
	st := c.Stats()
	fmt.Printf("published %d, dropped %d, failed %d on %s\n", st.Published, st.Dropped, st.Failed, logclient.Subject(prefix, *app, *typ))
	return err
}
