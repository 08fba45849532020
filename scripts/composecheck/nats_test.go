package composecheck

import (
	"context"
	"errors"
	"fmt"
	"github.com/acme/platform/pkg/testkit"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/healthcheck"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/userevents"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The names deploy/nats.conf is written for: services/logs natsingest
// (stream <PREFIX>_LOGS, durable logs-writer) and pkg/logclient subjects.
const (
	prefix   = "acme"
	stream   = "ACME_LOGS"
	consumer = "logs-writer"
)

// natsUsers are the users of deploy/nats.conf and the log app each one
// publishes as (publisher: the organisation's own applications).
var natsUsers = map[string]string{"auth": "ACME-AUTH", "files": "ACME-S3", "gateway": "LOGGING", "logs": "LOGGING", "publisher": "SERVER-APP-A"}

// StartDeployNATS runs deploy/nats.conf on an embedded server of the pinned
// nats-server version, the passwords given by user name set in the
// environment variables the file reads (NATS_<USER>_PASSWORD).
func startDeployNATS(t *testing.T, passwords map[string]string) *server.Server {
	testkit.SkipShort(t)
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for user, pw := range passwords {
		t.Setenv("NATS_"+strings.ToUpper(user)+"_PASSWORD", pw)
	}
	srv, err := embedded.NATSWithConfig(filepath.Join(root, "deploy", "nats.conf"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// natsClient is a connection that records the server's asynchronous
// errors: that is how NATS reports a refused publish or subscription.
type natsClient struct {
	user string
	nc   *nats.Conn
	mu   sync.Mutex
	errs []error
	seen chan struct{}
}

func connectAs(t *testing.T, url, user, password string) *natsClient {
	t.Helper()
	c := &natsClient{user: user, seen: make(chan struct{}, 1)}
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.Name("composecheck-"+user),
		nats.CustomInboxPrefix(natsconn.InboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
			select {
			case c.seen <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("%s cannot connect: %v", user, err)
	}
	c.nc = nc
	t.Cleanup(func() {
		// Whatever the server refused and no test expected is a failure.
		_ = nc.Flush()
		time.Sleep(50 * time.Millisecond)
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, err := range c.errs {
			t.Errorf("%s: unexpected asynchronous error: %v", user, err)
		}
		nc.Close()
	})
	return c
}

// take removes and returns the first recorded violation naming subject.
func (c *natsClient) take(subject string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, err := range c.errs {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
			c.errs = append(c.errs[:i], c.errs[i+1:]...)
			return true
		}
	}
	return false
}

// refused checks that the server reports a permissions violation on subject
// after op.
func (c *natsClient) refused(t *testing.T, what, subject string, op func() error) {
	t.Helper()
	if err := op(); err != nil {
		t.Fatalf("%s %s %s: %v", c.user, what, subject, err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", c.user, err)
	}
	deadline := time.After(3 * time.Second)
	for !c.take(subject) {
		select {
		case <-c.seen:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Errorf("%s may %s %s; deploy/nats.conf must refuse it", c.user, what, subject)
			return
		}
	}
}

func (c *natsClient) refusePublish(t *testing.T, subject string) {
	t.Helper()
	c.refused(t, "publish to", subject, func() error { return c.nc.Publish(subject, []byte("{}")) })
}

func (c *natsClient) refuseSubscribe(t *testing.T, subject string) {
	t.Helper()
	c.refused(t, "subscribe to", subject, func() error {
		_, err := c.nc.SubscribeSync(subject)
		return err
	})
}

// clean checks that nothing was refused so far.
func (c *natsClient) clean(t *testing.T, what string) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", c.user, err)
	}
	time.Sleep(50 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range c.errs {
		t.Errorf("%s: %s: refused: %v", c.user, what, err)
	}
	c.errs = nil
}

// setupLogStream makes the JetStream calls natsingest.Setup makes (same
// stream and consumer settings that matter for permissions: names, filter
// subject, durable pull consumer with explicit acks).
func setupLogStream(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       stream,
		Subjects:   []string{logclient.StreamSubjects(prefix)},
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	return js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       consumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    20,
		BackOff:       []time.Duration{30 * time.Second, time.Minute},
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: logclient.StreamSubjects(prefix),
		MaxAckPending: 4000,
	})
}

func TestNATSPermissions(t *testing.T) {
	passwords := map[string]string{}
	for user := range natsUsers {
		passwords[user] = "test" + strings.ToUpper(user[:1]) + user[1:] + "Password1"
	}
	srv := startDeployNATS(t, passwords)
	url := srv.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := map[string]*natsClient{}
	for user := range natsUsers {
		c[user] = connectAs(t, url, user, passwords[user])
	}

	t.Run("healthcheckURL", func(t *testing.T) {
		// compose.yaml's healthcheck of the nats service.
		if err := healthcheck.ProbeURL("http://" + srv.MonitorAddr().String() + "/healthz?js-enabled-only=true"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("loginRefused", func(t *testing.T) {
		for name, opt := range map[string]nats.Option{
			"noCredentials": func(*nats.Options) error { return nil },
			"wrongPassword": nats.UserInfo("auth", passwords["files"]),
			"unknownUser":   nats.UserInfo("admin", passwords["auth"]),
		} {
			nc, err := nats.Connect(url, opt, nats.NoReconnect())
			if err == nil {
				nc.Close()
				t.Errorf("%s: connected", name)
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("%s: %v, want an authorization violation", name, err)
			}
		}
	})

	// The logs service creates (then, on every later start, updates) the
	// stream and its durable consumer.
	logsJS, err := jetstream.New(c["logs"].nc)
	if err != nil {
		t.Fatal(err)
	}
	var cons jetstream.Consumer
	for range 2 {
		if cons, err = setupLogStream(ctx, logsJS); err != nil {
			t.Fatalf("logs cannot set up %s/%s: %v", stream, consumer, err)
		}
	}
	c["logs"].clean(t, "stream and consumer set-up")

	// Every service publishes its own log records the way pkg/logclient
	// does (JetStream publish, acknowledgement on an inbox).
	for user, app := range natsUsers {
		lc, err := logclient.New(c[user].nc, logclient.Options{Prefix: prefix, AckTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !lc.Log(app, logclient.TypeError, "from "+user, "") {
			t.Fatalf("%s: record not accepted", user)
		}
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
		err = lc.Flush(fctx)
		fcancel()
		if err != nil || lc.Stats().Published != 1 {
			t.Errorf("%s cannot publish its logs as %s: %v (stats %+v)", user, app, err, lc.Stats())
		}
		_ = lc.Close(ctx)
		c[user].clean(t, "publishing its logs")
	}

	t.Run("logsConsumesTheStream", func(t *testing.T) {
		got := map[string]int{}
		for deadline := time.Now().Add(10 * time.Second); len(got) < len(natsUsers) && time.Now().Before(deadline); {
			batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				t.Fatalf("fetch: %v", err)
			}
			for m := range batch.Messages() {
				got[string(m.Data())]++
				if err := m.DoubleAck(ctx); err != nil {
					t.Errorf("ack %s: %v", m.Subject(), err)
				}
			}
		}
		for user := range natsUsers {
			found := false
			for body := range got {
				found = found || strings.Contains(body, `"from `+user+`"`)
			}
			if !found {
				t.Errorf("the record published by %s did not reach the logs consumer (got %v)", user, got)
			}
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatalf("consumer info: %v", err)
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			t.Errorf("after acks: %d pending acks, %d pending messages", info.NumAckPending, info.NumPending)
		}
		c["logs"].clean(t, "consuming")
	})

	// auth announces user deletions on the durable user stream; the files
	// service's durable consumer receives them and acknowledges.
	t.Run("userDeletionsFromAuthToFiles", func(t *testing.T) {
		authJS, err := jetstream.New(c["auth"].nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := userevents.EnsureStream(ctx, authJS, prefix); err != nil {
			t.Fatalf("auth cannot create the user stream: %v", err)
		}
		if err := userevents.PublishDeleted(ctx, authJS, prefix, "64b000000000000000000002"); err != nil {
			t.Fatalf("auth cannot publish a deletion: %v", err)
		}
		c["auth"].clean(t, "publishing a user deletion")
		filesJS, err := jetstream.New(c["files"].nc)
		if err != nil {
			t.Fatal(err)
		}
		var ucons jetstream.Consumer
		for range 2 {
			if ucons, err = userevents.SetupConsumer(ctx, filesJS, prefix, "files-erasure", 30*time.Second, 50); err != nil {
				t.Fatalf("files cannot set up its erasure consumer: %v", err)
			}
		}
		it, err := ucons.Messages(jetstream.PullMaxMessages(1))
		if err != nil {
			t.Fatal(err)
		}
		defer it.Stop()
		m, err := it.Next()
		if err != nil {
			t.Fatalf("files receives no deletion: %v", err)
		}
		if d, err := userevents.ParseDeleted(m.Data()); err != nil || d.UserID != "64b000000000000000000002" {
			t.Fatalf("deletion %+v %v", d, err)
		}
		if err := m.InProgress(); err != nil {
			t.Fatal(err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("files cannot acknowledge: %v", err)
		}
		c["files"].clean(t, "consuming user deletions")
		for _, user := range []string{"gateway", "publisher", "logs"} {
			c[user].refusePublish(t, prefix+".users.deleted") // only auth deletes users
		}
	})

	// Replies: every user reads its own reply subjects only, so none reads
	// the JetStream deliveries to the logs service (the log records, auth's
	// audit events among them) or another's acknowledgements.
	t.Run("ownInboxOnly", func(t *testing.T) {
		for user := range natsUsers {
			cl := c[user]
			cl.refuseSubscribe(t, "_INBOX.>")
			cl.refuseSubscribe(t, "_INBOX.*")
			cl.refuseSubscribe(t, ">")
			for other := range natsUsers {
				if other != user {
					cl.refuseSubscribe(t, natsconn.InboxPrefix(other)+".>")
				}
			}
			if _, err := cl.nc.SubscribeSync(natsconn.InboxPrefix(user) + ".x"); err != nil {
				t.Fatal(err)
			}
			cl.clean(t, "subscribing to its own inbox")
		}
	})

	t.Run("revocationsFromAuthToGateway", func(t *testing.T) {
		sub, err := c["gateway"].nc.SubscribeSync(prefix + ".auth.revoked")
		if err != nil {
			t.Fatal(err)
		}
		c["gateway"].clean(t, "subscribing to revocations")
		// auth's replicas listen too (their user caches).
		own, err := c["auth"].nc.SubscribeSync(prefix + ".auth.revoked")
		if err != nil {
			t.Fatal(err)
		}
		c["auth"].clean(t, "subscribing to revocations")
		if err := c["auth"].nc.Publish(prefix+".auth.revoked", []byte(`{"sessions":[],"users":["u1"]}`)); err != nil {
			t.Fatal(err)
		}
		c["auth"].clean(t, "publishing a revocation")
		if m, err := sub.NextMsg(3 * time.Second); err != nil || !strings.Contains(string(m.Data), "u1") {
			t.Fatalf("gateway did not receive auth's revocation: %v", err)
		}
		_ = sub.Unsubscribe()
		if m, err := own.NextMsg(3 * time.Second); err != nil || !strings.Contains(string(m.Data), "u1") {
			t.Fatalf("auth did not receive its own revocation: %v", err)
		}
		_ = own.Unsubscribe()
	})

	t.Run("fileDeletionsBetweenFilesReplicas", func(t *testing.T) {
		sub, err := c["files"].nc.SubscribeSync(prefix + ".files.deleted")
		if err != nil {
			t.Fatal(err)
		}
		c["files"].clean(t, "subscribing to file deletions")
		if err := c["files"].nc.Publish(prefix+".files.deleted", []byte(`{"files":["f1"]}`)); err != nil {
			t.Fatal(err)
		}
		c["files"].clean(t, "announcing a file deletion")
		if m, err := sub.NextMsg(3 * time.Second); err != nil || !strings.Contains(string(m.Data), "f1") {
			t.Fatalf("files did not receive its own deletion: %v", err)
		}
		_ = sub.Unsubscribe()
		for _, user := range []string{"auth", "gateway", "publisher", "logs"} {
			c[user].refusePublish(t, prefix+".files.deleted") // only files deletes files
		}
	})

	// What the stream's owner may do, nobody else may.
	streamAdmin := []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.UPDATE." + stream,
		"$JS.API.STREAM.DELETE." + stream,
		"$JS.API.STREAM.PURGE." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.CONSUMER.INFO." + stream + "." + consumer,
		"$JS.API.CONSUMER.CREATE." + stream + ".spy",
		"$JS.API.CONSUMER.CREATE." + stream + "." + consumer + "." + prefix + ".logs.>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + "." + consumer,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer,
		"$JS.API.CONSUMER.DELETE." + stream + "." + consumer,
		"$JS.ACK." + stream + "." + consumer + ".1.1.1.1.0",
		"$JS.API.INFO",
	}
	otherApp := map[string]string{"auth": "LOGGING", "files": "ACME-AUTH", "gateway": "ACME-S3", "logs": "ACME-AUTH"}
	for _, user := range []string{"auth", "files", "gateway"} {
		t.Run(user+"Refused", func(t *testing.T) {
			cl := c[user]
			for _, subj := range streamAdmin {
				cl.refusePublish(t, subj)
			}
			// Reading the log records without the consumer, or forging another app's.
			cl.refuseSubscribe(t, prefix+".logs.>")
			cl.refuseSubscribe(t, prefix+".logs.ACME-AUTH.error")
			// The live tails' feed of HTTP-written records: the logs service's only.
			cl.refusePublish(t, prefix+".logtail.ACME-AUTH.error")
			cl.refuseSubscribe(t, prefix+".logtail.>")
			cl.refusePublish(t, logclient.Subject(prefix, otherApp[user], logclient.TypeError))
			if user != "auth" {
				cl.refusePublish(t, prefix+".auth.revoked") // only auth ends sessions
			}
			if user != "gateway" && user != "auth" {
				cl.refuseSubscribe(t, prefix+".auth.revoked")
			}
		})
	}
	t.Run("logsRefused", func(t *testing.T) {
		cl := c["logs"]
		for _, subj := range []string{
			"$JS.API.STREAM.DELETE." + stream,
			"$JS.API.STREAM.PURGE." + stream,
			"$JS.API.STREAM.MSG.DELETE." + stream,
			"$JS.API.STREAM.CREATE.OTHER_LOGS",
			"$JS.API.STREAM.LIST",
			"$JS.API.CONSUMER.CREATE." + stream + ".spy",
			"$JS.API.CONSUMER.DELETE." + stream + "." + consumer,
			// live-tail consumers: created only with a filter under the
			// stream's subjects; never deleted by the client
			"$JS.API.CONSUMER.CREATE." + stream + ".spy.other.>",
			"$JS.API.CONSUMER.DELETE." + stream + ".spy",
			prefix + ".auth.revoked",
			// OTLP ingest publishes records for every app, on
			// <prefix>.logs.<app>.<type> only.
			logclient.Subject(prefix, otherApp["logs"], logclient.TypeError) + ".extra",
		} {
			cl.refusePublish(t, subj)
		}
		cl.refuseSubscribe(t, prefix+".logs.>")
		cl.refuseSubscribe(t, prefix+".auth.revoked")
		// The refused deletes did nothing.
		if _, err := logsJS.Stream(ctx, stream); err != nil {
			t.Fatalf("stream gone: %v", err)
		}
		if _, err := logsJS.Consumer(ctx, stream, consumer); err != nil {
			t.Fatalf("consumer gone: %v", err)
		}
		cl.clean(t, "reading stream and consumer info")
	})
}
