// Package logclient publishes log records to the logs service over NATS
// JetStream without ever blocking the caller.
//
// Log puts a record in a bounded in-memory buffer and returns at once; when
// the buffer is full the record is dropped and counted. A background
// publisher sends buffered records with a random Nats-Msg-Id each, so
// JetStream drops duplicates within its window and the logs service's unique
// key drops any that arrive later. A record whose publish is not acknowledged
// (NATS briefly away, the stream not created yet) is retried with the same id
// until it is acknowledged or the client is closed. Flush and Close wait for
// the buffer to drain; call Close on shutdown before draining the connection.
//
// The message on the wire is Message, encoded as JSON, on the subject
// Subject(prefix, app, type): "<prefix>.logs.<APP>.<type>".
//
// JetStream acknowledges each publish on the connection's inbox. A NATS
// login of the platform may subscribe to its own reply subjects only,
// "_INBOX_<user>.>" (deploy/nats.conf), so a connection that logs in must
// use that inbox prefix: natsconn.Connect sets it from the URL's login, or
// pass nats.CustomInboxPrefix(natsconn.InboxPrefix(user)). New refuses a
// connection that logs in as a user and keeps the shared "_INBOX" prefix:
// none of its publishes could be acknowledged.
package logclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acme/platform/pkg/natsconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Log types accepted by the logs service.
const (
	TypeLog   = "log"
	TypeError = "error"
	TypeDB    = "db"
)

// Types lists the accepted log types.
var Types = []string{TypeLog, TypeError, TypeDB}

// Message is the JSON payload of one log record on NATS. It is the contract
// between publishers and the logs service.
type Message struct {
	App       string    `json:"app"`
	Type      string    `json:"type"`
	LogBody   string    `json:"logBody"`
	MetricsID string    `json:"metricsId,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// Subject returns the subject a record of app and type is published on.
func Subject(prefix, app, typ string) string {
	return prefix + ".logs." + app + "." + typ
}

// StreamSubjects is the subject filter of the logs stream for prefix.
func StreamSubjects(prefix string) string { return prefix + ".logs.>" }

// NewMsgID returns a random 128-bit id in hex, the Nats-Msg-Id of a record.
func NewMsgID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ValidToken reports whether s can be one token of a NATS subject.
func ValidToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	return !strings.ContainsAny(s, ".*> \t\r\n")
}

// Options configure a Client. Zero values take the defaults.
type Options struct {
	// Prefix is NATS_SUBJECT_PREFIX (default "acme").
	Prefix string
	// BufferSize bounds the records waiting to be published (default 10000).
	BufferSize int
	// BatchSize is how many records are in flight at once (default 256).
	BatchSize int
	// Linger is how long the publisher waits, after a record arrives with
	// none in flight, for more to publish with it (default 0: at once).
	// Records published together reach NATS, JetStream's consumers and the
	// logs service in one write each way instead of one per record, which
	// matters at a steady trickle (a service's audit trail) and not at
	// all under bulk load, where batches fill anyway. A record waits at
	// most Linger longer; Flush and Close cut the wait short.
	Linger time.Duration
	// AckTimeout bounds the wait for JetStream's acknowledgement of a
	// publish before it is retried (default 5s).
	AckTimeout time.Duration
	// RetryMin and RetryMax bound the pause between retries (default
	// 100ms and 5s, doubling).
	RetryMin, RetryMax time.Duration
	// MaxBody truncates longer log bodies (default 64 KiB, the logs
	// service's default limit); 0 keeps the default, negative disables.
	MaxBody int
	// Logger receives the client's own warnings, and an error when records
	// are dropped (at most one per DropLogInterval, with the count)
	// (default: discarded). Never point it back at this client.
	Logger *slog.Logger
	// DropLogInterval spaces the error lines about dropped records (default
	// 10s); the first drop is logged at once.
	DropLogInterval time.Duration
	// Metrics, when set, gets the counters acme_logclient_records_total
	// {outcome="published|dropped|failed|retried"} and the gauge
	// acme_logclient_pending (see Stats).
	Metrics prometheus.Registerer
}

// Stats count what happened to the records given to Log.
type Stats struct {
	Published uint64 // acknowledged by JetStream (duplicates included)
	Dropped   uint64 // refused by Log: buffer full, invalid, or client closed
	Failed    uint64 // accepted but never acknowledged (given up at Close)
	Retries   uint64 // publish attempts repeated after an error or timeout
	Pending   int    // accepted and not yet published or failed
}

type record struct {
	subject string
	id      string
	data    []byte
}

// Client publishes log records in the background. It is safe for concurrent
// use.
type Client struct {
	js   jetstream.JetStream
	o    Options
	buf  chan record
	kick chan struct{} // Flush: publish what lingers now
	quit chan struct{}
	done chan struct{}

	mu     sync.RWMutex
	closed bool

	dropMu       sync.Mutex
	dropLogged   time.Time // when the last drop error was logged
	dropUnlogged uint64    // drops since then

	accepted  atomic.Uint64
	published atomic.Uint64
	dropped   atomic.Uint64
	failed    atomic.Uint64
	retries   atomic.Uint64
}

// ErrClosed is returned by Flush after Close.
var ErrClosed = errors.New("logclient: closed")

// New starts a client publishing on nc. The caller keeps ownership of nc
// and must Close the client before closing or draining nc.
func New(nc *nats.Conn, o Options) (*Client, error) {
	if nc == nil {
		return nil, errors.New("logclient: nil NATS connection")
	}
	if user := loginUser(nc); user != "" && nc.Opts.InboxPrefix == "" {
		return nil, fmt.Errorf("logclient: the connection logs in as %q but replies under the shared _INBOX, where it may not subscribe: "+
			"connect with nats.CustomInboxPrefix(%q) (natsconn.Connect does)", user, natsconn.InboxPrefix(user))
	}
	if o.Prefix == "" {
		o.Prefix = "acme"
	}
	if o.BufferSize <= 0 {
		o.BufferSize = 10000
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 256
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = 5 * time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 100 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = 5 * time.Second
	}
	if o.MaxBody == 0 {
		o.MaxBody = 64 << 10
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.DropLogInterval <= 0 {
		o.DropLogInterval = 10 * time.Second
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(o.BatchSize),
		jetstream.WithPublishAsyncTimeout(o.AckTimeout))
	if err != nil {
		return nil, err
	}
	c := &Client{
		js:   js,
		o:    o,
		buf:  make(chan record, o.BufferSize),
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	if o.Metrics != nil {
		if err := c.RegisterMetrics(o.Metrics); err != nil {
			return nil, err
		}
	}
	go c.run()
	return c, nil
}

// loginUser is the user nc logs in as: its UserInfo, or the login of its
// URL; "" when it logs in with neither.
func loginUser(nc *nats.Conn) string {
	if nc.Opts.User != "" {
		return nc.Opts.User
	}
	if u := natsconn.URLUser(nc.Opts.Url); u != "" {
		return u
	}
	if len(nc.Opts.Servers) > 0 {
		return natsconn.URLUser(nc.Opts.Servers[0])
	}
	return ""
}

// RegisterMetrics exposes the client's counters on reg (what
// Options.Metrics does, for a registry made after the client).
func (c *Client) RegisterMetrics(reg prometheus.Registerer) error {
	outcome := func(name string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "acme", Subsystem: "logclient", Name: "records_total",
			Help:        "Log records given to the client, by outcome: published (acknowledged), dropped (refused: buffer full, invalid or closed), failed (given up at close), retried (publish attempts repeated).",
			ConstLabels: prometheus.Labels{"outcome": name},
		}, func() float64 { return float64(f()) })
	}
	cs := []prometheus.Collector{
		outcome("published", c.published.Load),
		outcome("dropped", c.dropped.Load),
		outcome("failed", c.failed.Load),
		outcome("retried", c.retries.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "acme", Subsystem: "logclient", Name: "pending",
			Help: "Log records accepted and not yet published or failed.",
		}, func() float64 { return float64(c.Stats().Pending) }),
	}
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("logclient metrics: %w", err)
		}
	}
	return nil
}

// drop counts a refused record and reports it on the logger: at once for
// the first, then at most once per DropLogInterval with the count since.
func (c *Client) drop(reason string) {
	total := c.dropped.Add(1)
	c.dropMu.Lock()
	c.dropUnlogged++
	now := time.Now()
	if !c.dropLogged.IsZero() && now.Sub(c.dropLogged) < c.o.DropLogInterval {
		c.dropMu.Unlock()
		return
	}
	n := c.dropUnlogged
	c.dropUnlogged, c.dropLogged = 0, now
	c.dropMu.Unlock()
	c.o.Logger.Error("logclient: dropped log records", "reason", reason, "records", n, "droppedTotal", total, "bufferSize", c.o.BufferSize)
}

// Log queues one record and returns at once. It reports false, and counts a
// drop, when the record is invalid (app or type not a subject token), the
// buffer is full or the client is closed. metricsID may be empty.
func (c *Client) Log(app, typ, body, metricsID string) bool {
	if !ValidToken(app) || !ValidToken(typ) {
		c.drop("invalid app or type")
		return false
	}
	if c.o.MaxBody > 0 && len(body) > c.o.MaxBody {
		body = truncateUTF8(body, c.o.MaxBody)
	}
	data, err := json.Marshal(Message{App: app, Type: typ, LogBody: body, MetricsID: metricsID, CreatedAt: time.Now().UTC()})
	if err != nil {
		c.drop("not encodable")
		return false
	}
	r := record{subject: Subject(c.o.Prefix, app, typ), id: NewMsgID(), data: data}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		c.drop("client closed")
		return false
	}
	select {
	case c.buf <- r:
		c.accepted.Add(1)
		return true
	default:
		c.drop("buffer full")
		return false
	}
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	pub, failed := c.published.Load(), c.failed.Load()
	return Stats{
		Published: pub,
		Dropped:   c.dropped.Load(),
		Failed:    failed,
		Retries:   c.retries.Load(),
		Pending:   int(c.accepted.Load() - pub - failed),
	}
}

// Flush waits until every record accepted before the call is published (or
// failed), or ctx ends.
func (c *Client) Flush(ctx context.Context) error {
	target := c.accepted.Load()
	if c.o.Linger > 0 {
		select {
		case c.kick <- struct{}{}: // a lingering batch goes now
		default:
		}
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for c.published.Load()+c.failed.Load() < target {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			if c.published.Load()+c.failed.Load() < target {
				return ErrClosed
			}
			return nil
		case <-t.C:
		}
	}
	return nil
}

// Close refuses new records, publishes the buffered ones until ctx ends,
// then stops; records still unpublished are counted as failed. It does not
// close the NATS connection.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	if already {
		<-c.done
		return nil
	}
	err := c.Flush(ctx)
	close(c.quit)
	<-c.done
	return err
}

// run is the publisher: it takes up to BatchSize records, publishes them
// asynchronously, waits for the acknowledgements and retries the failures
// with the same message ids.
func (c *Client) run() {
	defer close(c.done)
	var batch []record
	wait := c.o.RetryMin
	for {
		if len(batch) == 0 {
			select {
			case r := <-c.buf:
				batch = append(batch, r)
			case <-c.quit:
				c.giveUp(nil)
				return
			}
			c.linger(&batch)
		}
	fill:
		for len(batch) < c.o.BatchSize {
			select {
			case r := <-c.buf:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		failed := c.publish(batch)
		if len(failed) == 0 {
			batch = batch[:0]
			wait = c.o.RetryMin
			continue
		}
		c.retries.Add(uint64(len(failed)))
		batch = append(batch[:0], failed...)
		select {
		case <-c.quit:
			c.giveUp(batch)
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, c.o.RetryMax)
	}
}

// linger adds to batch what arrives within Linger, until it is full, a
// Flush asks for it, or the client closes.
func (c *Client) linger(batch *[]record) {
	if c.o.Linger <= 0 {
		return
	}
	t := time.NewTimer(c.o.Linger)
	defer t.Stop()
	for len(*batch) < c.o.BatchSize {
		select {
		case r := <-c.buf:
			*batch = append(*batch, r)
		case <-t.C:
			return
		case <-c.kick:
			return
		case <-c.quit:
			return
		}
	}
}

// publish sends the batch and returns the records that were not acknowledged.
func (c *Client) publish(batch []record) []record {
	type inflight struct {
		r   record
		fut jetstream.PubAckFuture
	}
	var failed []record
	var firstErr error
	fl := make([]inflight, 0, len(batch))
	for _, r := range batch {
		m := &nats.Msg{Subject: r.subject, Data: r.data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, r.id)
		fut, err := c.js.PublishMsgAsync(m, jetstream.WithStallWait(c.o.AckTimeout))
		if err != nil {
			failed = append(failed, r)
			firstErr = cmpErr(firstErr, err)
			continue
		}
		fl = append(fl, inflight{r, fut})
	}
	timeout := time.NewTimer(c.o.AckTimeout + time.Second)
	defer timeout.Stop()
	for i, f := range fl {
		select {
		case <-f.fut.Ok():
			c.published.Add(1)
		case err := <-f.fut.Err():
			failed = append(failed, f.r)
			firstErr = cmpErr(firstErr, err)
		case <-timeout.C:
			// The library's own timeout should have fired; treat the rest as
			// failed and retry them (same ids, so no duplicates result).
			for _, g := range fl[i:] {
				failed = append(failed, g.r)
			}
			firstErr = cmpErr(firstErr, context.DeadlineExceeded)
			return failed
		}
	}
	if firstErr != nil {
		c.o.Logger.Warn("logclient: publish failed, will retry", "records", len(failed), "err", firstErr)
	}
	return failed
}

func (c *Client) giveUp(batch []record) {
	n := uint64(len(batch))
	for {
		select {
		case <-c.buf:
			n++
			continue
		default:
		}
		break
	}
	if n > 0 {
		c.failed.Add(n)
		c.o.Logger.Error("logclient: closed with unpublished records", "records", n)
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
