package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/web"
	"github.com/nats-io/nats.go"
)

// Process is the part of a running service every Run shares: its logger,
// its NATS connection, and what must happen, in order,
// when it stops. A Run starts one with Start after reading its
// configuration, and ends with Stop.
type Process struct {
	// Name is the service's name ("auth"); every log line carries it as
	// the service key.
	Name string
	// Base writes JSON lines to the process's stdout at its LOG_LEVEL,
	// without the service key; loggers of the service's own wrap it.
	Base slog.Handler
	// Log is the service's logger. SelfLog replaces it with one that also
	// publishes error lines to the log store and carries request ids.
	Log *slog.Logger
	// NATS is set by ConnectNATS. (MongoDB is connected with
	// mongox.Connect and its disconnect registered with Defer: the gateway
	// uses this package and must not link the MongoDB driver.)
	NATS *nats.Conn

	closeSelfLog func()   // idempotent
	closers      []func() // run last first by Close
	once         sync.Once
}

// ParseLevel reads a LOG_LEVEL: debug, info, warn or error (any case).
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is not a log level (debug, info, warn or error)", s)
}

// Start returns the process of service name logging JSON to stdout at
// level (its LOG_LEVEL setting), and logs the configuration r read,
// secrets masked.
func Start(name string, stdout io.Writer, level string, r *config.Reader) (*Process, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("configuration: %s: %w", r.Name("LOG_LEVEL"), err)
	}
	base := slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: lvl})
	p := &Process{Name: name, Base: base, Log: slog.New(base).With("service", name)}
	r.Log(p.Log)
	return p, nil
}

// Defer registers f to run when the process closes, after the closers
// registered before it (last registered, first run), as defer would.
func (p *Process) Defer(f func()) { p.closers = append(p.closers, f) }

// Close runs the registered closers, last first: what a Run's defers
// did. It is idempotent; Stop calls it.
func (p *Process) Close() {
	p.once.Do(func() {
		for i := len(p.closers) - 1; i >= 0; i-- {
			p.closers[i]()
		}
	})
}

// ConnectNATS connects to NATS as client name (natsconn.Connect; log, when
// set, receives the connection's events) and closes the connection when
// the process closes.
func (p *Process) ConnectNATS(url, name string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := natsconn.Connect(url, name, log, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	p.NATS = nc
	p.Defer(nc.Close)
	return nc, nil
}

// SelfLog makes the process's error lines also go to the administrators'
// log store, as app (over the NATS connection, subjects under prefix),
// and the lines logged with a request's context carry its id. Stop
// publishes what is buffered before NATS drains.
func (p *Process) SelfLog(prefix, app string) error {
	log, closeSelfLog, err := logclient.SelfLogger(p.NATS, prefix, p.Base, app, "service", p.Name)
	if err != nil {
		return err
	}
	p.Log, p.closeSelfLog = web.WithRequestIDs(log), sync.OnceFunc(closeSelfLog)
	p.Defer(p.closeSelfLog)
	return nil
}

// NATSConnected is the readiness check of the NATS connection.
func (p *Process) NATSConnected(context.Context) error {
	if !p.NATS.IsConnected() {
		return errors.New("not connected")
	}
	return nil
}

// Stop ends the process after its server stopped with err: the buffered
// error lines are published, NATS drains, "stopped" is logged and the
// closers run (MongoDB, connected first, disconnects last). It returns err.
func (p *Process) Stop(err error) error {
	if p.closeSelfLog != nil {
		p.closeSelfLog()
	}
	if p.NATS != nil {
		if derr := p.NATS.Drain(); derr != nil && !errors.Is(derr, nats.ErrConnectionClosed) {
			p.Log.Warn("nats drain", "err", derr)
		}
	}
	p.Log.Info("stopped", "err", err)
	p.Close()
	return err
}
