// Package natsconn connects the services to NATS with the options they
// share: reconnect forever, one second apart, and no connection step that
// can hold the connection's lock for long.
//
// nats.go dials a reconnect while holding the connection's lock, which
// IsConnected, Publish and Flush also take. By default it first resolves
// the server's host name with net.LookupHost, which has no deadline of its
// own: in a container cut off from the network where that name lives (a
// `docker network disconnect`, a partition), the lookup waits for the
// resolver's timeouts, tens of seconds, and every request that publishes,
// flushes (the fences of pkg/natsfence) or checks readiness waits with it.
// SkipHostLookup leaves resolution to the dialer, which the connect Timeout
// bounds, so the lock is held at most that long per attempt. The servers to
// use are listed in the URL (the nodes of a cluster by name), so the
// expansion of one name into several addresses that the lookup provides is
// not needed.
//
// A connection whose peer is gone without a word (the container moved to
// another address on its network, packets dropped rather than refused) is
// noticed late by default, and holds the lock meanwhile: the background
// flusher's write into the dead socket blocks, holding the connection's
// lock, for up to FlusherTimeout (1 minute by default), fails, and by
// default leaves the connection as it is, so the next write blocks again;
// the client's pings (every 2 minutes, stale after 2 unanswered) are the
// only way out. A replica cut off from the bus for 10 seconds stayed
// unready for minutes that way. Here a write that has not completed in
// FlusherTimeout reconnects at once (ReconnectOnFlusherError; what was
// buffered is lost, as with any write error: publishers that need
// delivery wait for JetStream's acknowledgement), and pings every
// PingInterval find a silent peer within MaxPingsOut of them.
//
// Replies come back on subjects of the login's own: a connection that logs
// in as user subscribes to its replies (request replies, JetStream's
// acknowledgements and API answers, the messages a pull consumer delivers)
// under InboxPrefix(user), "_INBOX_<user>", never the shared "_INBOX".
// deploy/nats.conf lets each user subscribe to its own prefix only, so no
// login reads another's replies, such as the log records (auth's audit
// events among them) that JetStream delivers to the logs service.
package natsconn

import (
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// DialTimeout bounds one connection attempt: name resolution, TCP connect
// and the protocol handshake.
const DialTimeout = 2 * time.Second

// PingInterval and MaxPingsOut: a connection is stale, and reconnected,
// after MaxPingsOut pings PingInterval apart went unanswered.
// FlusherTimeout bounds a write to the server (and how long it holds the
// connection's lock); one that times out reconnects.
const (
	PingInterval   = 5 * time.Second
	MaxPingsOut    = 3
	FlusherTimeout = 10 * time.Second
)

// InboxPrefix is the prefix of the reply subjects of a connection logged in
// as user: "_INBOX_<user>" (the server's permissions let user subscribe to
// "_INBOX_<user>.>" only), or nats.go's shared "_INBOX" for a connection
// without a login.
func InboxPrefix(user string) string {
	if user == "" {
		return strings.TrimSuffix(nats.InboxPrefix, ".")
	}
	return "_INBOX_" + user
}

// URLUser is the login user of the first server of urls (a comma-separated
// list, as nats.Connect takes it), "" when it names none.
func URLUser(urls string) string {
	first, _, _ := strings.Cut(urls, ",")
	first = strings.TrimSpace(first)
	if !strings.Contains(first, "://") {
		first = "nats://" + first
	}
	u, err := url.Parse(first)
	if err != nil || u.User == nil {
		return ""
	}
	return u.User.Username()
}

// Inbox is the option that makes a connection to urls reply under the
// InboxPrefix of the user its URL logs in as (nothing changes for a URL
// without a login). A client that logs in with nats.UserInfo instead
// passes nats.CustomInboxPrefix(InboxPrefix(user)) itself.
func Inbox(urls string) nats.Option {
	user := URLUser(urls)
	if user == "" {
		return func(*nats.Options) error { return nil }
	}
	return nats.CustomInboxPrefix(InboxPrefix(user))
}

// Connect connects to url as name. log (nil: none) gets disconnections and
// reconnections. extra options are applied after the shared ones and may
// override them (nats.RetryOnFailedConnect(true) for a service that starts
// without NATS). Replies use the inbox prefix of url's login (Inbox).
func Connect(url, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.Timeout(DialTimeout),
		nats.SkipHostLookup(),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		nats.FlusherTimeout(FlusherTimeout),
		nats.ReconnectOnFlusherError(),
		Inbox(url),
	}
	if log != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					log.Warn("nats disconnected", "err", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted()) }))
	}
	return nats.Connect(url, append(opts, extra...)...)
}
