// Command stackprobe is what the container tests run inside the compose
// project's networks, in a throw-away container (image acme-test/stackprobe),
// to see the stack as another container on that network does:
//
//	stackprobe publish -app SERVER-APP-A -type log -n 1 [-metrics M] [-rate R] BODY...
//	    publish records over NATS with pkg/logclient, as an application
//	    does (NATS_URL with the publisher's login); -rate: at most R
//	    records a second (0: as fast as the buffer takes them)
//	stackprobe stream
//	    print the log stream's cluster state as one JSON line: leader,
//	    replicas (current, lag), messages, and its consumer logs-writer's
//	    leader and pending counts (NATS_URL with the logs service's login)
//	stackprobe nats-perms
//	    log in as every user of deploy/nats.conf with the real passwords
//	    (NATS_ADDR, NATS_<USER>_PASSWORD) and check that each may publish
//	    what its service publishes and is refused the rest, and may
//	    subscribe to its own replies only (_INBOX_<user>.>); a wrong
//	    password is refused
//	stackprobe dial HOST:PORT...
//	    try a TCP connection to each; prints "HOST:PORT open|closed"
//	stackprobe mongo-auth
//	    MONGO_ADDR with MONGO_USER/MONGO_PASSWORD may write; without a
//	    login or with a wrong password nothing is written
//	stackprobe s3-limits
//	    the files service's MinIO user (S3_ENDPOINT, S3_ACCESS_KEY,
//	    S3_SECRET_KEY) may write and read objects in S3_BUCKET, sees no
//	    other bucket, and is refused a new bucket and another bucket's
//	    objects
//
// It exits non-zero when a check fails, printing what failed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: stackprobe publish|nats-perms|dial|mongo-auth ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "publish":
		err = publish(os.Args[2:])
	case "stream":
		err = streamState()
	case "nats-perms":
		err = natsPerms()
	case "dial":
		err = dial(os.Args[2:])
	case "mongo-auth":
		err = mongoAuth()
	case "s3-limits":
		err = s3Limits()
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stackprobe:", err)
		os.Exit(1)
	}
}

func publish(args []string) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	app := fs.String("app", "SERVER-APP-A", "application name")
	typ := fs.String("type", "log", "log, error or db")
	metrics := fs.String("metrics", "", "metricsId")
	n := fs.Int("n", 1, "records")
	rate := fs.Int("rate", 0, "records a second at most (0: no limit)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	body := strings.Join(fs.Args(), " ")
	nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.Name("stackprobe"), nats.MaxReconnects(-1), natsconn.Inbox(os.Getenv("NATS_URL")))
	if err != nil {
		return err
	}
	defer nc.Close()
	lc, err := logclient.New(nc, logclient.Options{Prefix: "acme", BufferSize: max(*n, 1)})
	if err != nil {
		return err
	}
	t0 := time.Now()
	for i := 0; i < *n; i++ {
		if *rate > 0 {
			time.Sleep(time.Until(t0.Add(time.Duration(i) * time.Second / time.Duration(*rate))))
		}
		b := body
		if *n > 1 {
			b = fmt.Sprintf("%s #%d", body, i)
		}
		lc.Log(*app, *typ, b, *metrics)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := lc.Close(ctx); err != nil {
		return err
	}
	st := lc.Stats()
	fmt.Printf("published %d dropped %d failed %d retries %d\n", st.Published, st.Dropped, st.Failed, st.Retries)
	if st.Published != uint64(*n) {
		return fmt.Errorf("published %d of %d", st.Published, *n)
	}
	return nil
}

// streamState prints the log stream's and its consumer's cluster state.
func streamState() error {
	nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.Name("stackprobe"), nats.Timeout(3*time.Second), natsconn.Inbox(os.Getenv("NATS_URL")))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "ACME_LOGS")
	if err != nil {
		return err
	}
	info := st.CachedInfo()
	type replica struct {
		Name    string `json:"name"`
		Current bool   `json:"current"`
		Lag     uint64 `json:"lag"`
	}
	out := struct {
		Leader      string    `json:"leader"`
		Replicas    []replica `json:"replicas"`
		Messages    uint64    `json:"messages"`
		Consumer    string    `json:"consumerLeader"`
		NumPending  uint64    `json:"numPending"`
		AckPending  int       `json:"ackPending"`
		ConsumerErr string    `json:"consumerErr,omitempty"`
	}{Messages: info.State.Msgs}
	if info.Cluster != nil {
		out.Leader = info.Cluster.Leader
		for _, r := range info.Cluster.Replicas {
			out.Replicas = append(out.Replicas, replica{r.Name, r.Current, r.Lag})
		}
	}
	if c, err := st.Consumer(ctx, "logs-writer"); err != nil {
		out.ConsumerErr = err.Error()
	} else {
		ci := c.CachedInfo()
		out.NumPending, out.AckPending = ci.NumPending, ci.NumAckPending
		if ci.Cluster != nil {
			out.Consumer = ci.Cluster.Leader
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// natsRules is what each user of deploy/nats.conf may and may not publish:
// the subjects its service uses, and ones it must never reach.
var natsRules = []struct {
	user           string
	allow, refused []string
}{
	{"auth", []string{"acme.logs.ACME-AUTH.error", "acme.auth.revoked"}, []string{"acme.logs.ACME-S3.error", "acme.logtail.x", "$JS.API.STREAM.DELETE.ACME_LOGS"}},
	{"files", []string{"acme.logs.ACME-S3.error", "acme.files.deleted"}, []string{"acme.logs.ACME-AUTH.error", "acme.auth.revoked", "$JS.API.STREAM.DELETE.ACME_LOGS"}},
	{"gateway", []string{"acme.logs.LOGGING.error"}, []string{"acme.logs.ACME-AUTH.error", "acme.auth.revoked", "acme.files.deleted", "$JS.API.STREAM.INFO.ACME_LOGS"}},
	{"logs", []string{"acme.logs.LOGGING.error", "$JS.API.STREAM.INFO.ACME_LOGS"}, []string{"acme.auth.revoked", "$JS.API.STREAM.DELETE.ACME_LOGS", "$JS.API.STREAM.PURGE.ACME_LOGS"}},
	{"publisher", []string{"acme.logs.SERVER-APP-A.log"}, []string{"acme.auth.revoked", "acme.logtail.SERVER-APP-A.log", "$JS.API.STREAM.DELETE.ACME_LOGS", "acme.logs.SERVER-APP-A.log.extra"}},
}

func natsPerms() error {
	addr := os.Getenv("NATS_ADDR")
	var failed []string
	for _, r := range natsRules {
		pw := os.Getenv("NATS_" + strings.ToUpper(r.user) + "_PASSWORD")
		if pw == "" {
			return fmt.Errorf("NATS_%s_PASSWORD is not set", strings.ToUpper(r.user))
		}
		if nc, err := nats.Connect(addr, nats.UserInfo(r.user, pw+"x"), nats.NoReconnect()); err == nil {
			nc.Close()
			failed = append(failed, r.user+": a wrong password was accepted")
		} else {
			fmt.Printf("%-9s wrong password   refused (%v)\n", r.user, err)
		}
		c, err := connect(addr, r.user, pw)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: cannot log in: %v", r.user, err))
			continue
		}
		for _, subj := range r.allow {
			if c.refused(subj) {
				failed = append(failed, fmt.Sprintf("%s: publish to %s refused, its service needs it", r.user, subj))
			} else {
				fmt.Printf("%-9s publish %-38s allowed\n", r.user, subj)
			}
		}
		for _, subj := range r.refused {
			if !c.refused(subj) {
				failed = append(failed, fmt.Sprintf("%s: publish to %s allowed, must be refused", r.user, subj))
			} else {
				fmt.Printf("%-9s publish %-38s refused\n", r.user, subj)
			}
		}
		// Replies: its own inbox prefix, nobody else's, not the shared one.
		other := "_INBOX_logs.>"
		if r.user == "logs" {
			other = "_INBOX_auth.>"
		}
		for _, subj := range []string{"_INBOX.>", other} {
			if !c.refusedSub(subj) {
				failed = append(failed, fmt.Sprintf("%s: subscription to %s allowed, must be refused", r.user, subj))
			} else {
				fmt.Printf("%-9s subscribe %-36s refused\n", r.user, subj)
			}
		}
		if c.refusedSub(natsconn.InboxPrefix(r.user) + ".>") {
			failed = append(failed, fmt.Sprintf("%s: subscription to its own inbox refused", r.user))
		}
		c.nc.Close()
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

type natsClient struct {
	nc   *nats.Conn
	mu   sync.Mutex
	errs []error
}

func connect(addr, user, pw string) (*natsClient, error) {
	c := &natsClient{}
	nc, err := nats.Connect(addr, nats.UserInfo(user, pw), nats.NoReconnect(), nats.CustomInboxPrefix(natsconn.InboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
		}))
	c.nc = nc
	return c, err
}

// refused publishes to subject and reports whether the server answered
// with a permissions violation naming it. A publish is fire and forget: the
// server reports a refusal asynchronously, so the flush and a short wait
// give it the time to.
func (c *natsClient) refused(subject string) bool {
	_ = c.nc.Publish(subject, []byte("{}"))
	return c.violation(subject)
}

// violation waits for the server's permissions violation naming subject,
// two seconds at most, and reports whether it came.
func (c *natsClient) violation(subject string) bool {
	_ = c.nc.Flush()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for i, err := range c.errs {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				c.errs = append(c.errs[:i], c.errs[i+1:]...)
				c.mu.Unlock()
				return true
			}
		}
		c.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// refusedSub subscribes to subject and reports whether the server answered
// with a permissions violation naming it.
func (c *natsClient) refusedSub(subject string) bool {
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		return false
	}
	defer sub.Unsubscribe()
	return c.violation(subject)
}

func dial(addrs []string) error {
	for _, a := range addrs {
		conn, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err != nil {
			fmt.Printf("%s closed (%v)\n", a, err)
			continue
		}
		conn.Close()
		fmt.Printf("%s open\n", a)
	}
	return nil
}

func mongoAuth() error {
	addr, user, pw := os.Getenv("MONGO_ADDR"), os.Getenv("MONGO_USER"), os.Getenv("MONGO_PASSWORD")
	try := func(login *url.Userinfo) error {
		u := url.URL{Scheme: "mongodb", Host: addr, Path: "/", RawQuery: "authSource=acme&serverSelectionTimeoutMS=5000"}
		u.User = login
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := mongo.Connect(options.Client().ApplyURI(u.String()))
		if err != nil {
			return err
		}
		defer c.Disconnect(ctx)
		_, err = c.Database("acme").Collection("stackprobe").InsertOne(ctx, bson.M{"at": time.Now()})
		return err
	}
	if err := try(url.UserPassword(user, pw)); err != nil {
		return fmt.Errorf("the services' login cannot write: %w", err)
	}
	fmt.Println("services' login   write allowed")
	if err := try(nil); err == nil {
		return errors.New("a write without a login was accepted")
	} else {
		fmt.Printf("no login          refused (%v)\n", err)
	}
	if err := try(url.UserPassword(user, pw+"x")); err == nil {
		return errors.New("a write with a wrong password was accepted")
	} else {
		fmt.Printf("wrong password    refused (%v)\n", err)
	}
	return nil
}

func s3Limits() error {
	c, err := minio.New(os.Getenv("S3_ENDPOINT"), &minio.Options{
		Creds: credentials.NewStaticV4(os.Getenv("S3_ACCESS_KEY"), os.Getenv("S3_SECRET_KEY"), ""),
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bucket := os.Getenv("S3_BUCKET")
	key := "stackprobe/" + time.Now().Format("150405.000")
	if _, err := c.PutObject(ctx, bucket, key, strings.NewReader("probe"), 5, minio.PutObjectOptions{}); err != nil {
		return fmt.Errorf("the files user cannot write its bucket: %w", err)
	}
	if _, err := c.StatObject(ctx, bucket, key, minio.StatObjectOptions{}); err != nil {
		return fmt.Errorf("the files user cannot read its bucket: %w", err)
	}
	if err := c.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("the files user cannot delete in its bucket: %w", err)
	}
	fmt.Printf("%-28s allowed\n", "objects in "+bucket)
	denied := func(what string, err error) error {
		if minio.ToErrorResponse(err).Code != "AccessDenied" {
			return fmt.Errorf("%s: %v, want AccessDenied", what, err)
		}
		fmt.Printf("%-28s refused (AccessDenied)\n", what)
		return nil
	}
	if err := denied("make another bucket", c.MakeBucket(ctx, "stackprobe-other", minio.MakeBucketOptions{})); err != nil {
		return err
	}
	// MinIO answers a bucket list with the buckets the policy allows.
	buckets, err := c.ListBuckets(ctx)
	if err != nil {
		return fmt.Errorf("list buckets: %w", err)
	}
	for _, b := range buckets {
		if b.Name != bucket {
			return fmt.Errorf("the files user sees bucket %s", b.Name)
		}
	}
	fmt.Printf("%-28s only %s\n", "list buckets", bucket)
	_, err = c.PutObject(ctx, bucket+"-other", key, strings.NewReader("probe"), 5, minio.PutObjectOptions{})
	return denied("write another bucket", err)
}
