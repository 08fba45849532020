// Package mongox holds what every service needs from MongoDB beyond the
// driver: connecting with a start-up wait, creating indexes in a way the
// embedded FerretDB accepts, and recognising unique-index violations as
// FerretDB reports them.
package mongox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acme/platform/pkg/web"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// Every service that talks to MongoDB imports this package: its errors of
// an unreachable server answer 503 (web.IsUnavailable).
func init() { web.AddUnavailableCheck(IsUnavailable) }

// IsUnavailable reports whether err means the MongoDB server is out of
// reach: a network error or timeout, no server selectable, or a client
// already disconnected.
func IsUnavailable(err error) bool {
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return true
	}
	var sse topology.ServerSelectionError
	return errors.As(err, &sse) || errors.Is(err, mongo.ErrClientDisconnected)
}

// Connect opens a client and pings it until it answers or wait has passed
// (a service may start before its database). The returned function
// disconnects within five seconds.
func Connect(ctx context.Context, opts *options.ClientOptions, wait time.Duration) (*mongo.Client, func(), error) {
	mc, err := mongo.Connect(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("mongo: %w", err)
	}
	disconnect := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = mc.Disconnect(dctx)
	}
	deadline := time.Now().Add(wait)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := mc.Ping(pctx, nil)
		cancel()
		if err == nil {
			return mc, disconnect, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			disconnect()
			return nil, nil, fmt.Errorf("mongo ping: %w", err)
		}
		time.Sleep(time.Second)
	}
}

// EnsureIndexes creates indexes one per command. It is idempotent and safe
// when several replicas start at once. One per command because FerretDB 1.24
// drops the connection (a panic on its side) when a createIndexes command
// with several indexes names indexes that all exist already, as on every
// restart.
func EnsureIndexes(ctx context.Context, c *mongo.Collection, models ...mongo.IndexModel) error {
	for _, m := range models {
		if _, err := c.Indexes().CreateOne(ctx, m); err != nil {
			return fmt.Errorf("create index on %s: %w", c.Name(), err)
		}
	}
	return nil
}

// IsDuplicate reports a unique-index violation. FerretDB 1.24 answers an
// update (findAndModify) that breaks a unique index with an InternalError
// carrying SQLite's message instead of code 11000, so both are recognised.
func IsDuplicate(err error) bool {
	if err == nil {
		return false
	}
	return mongo.IsDuplicateKeyError(err) || strings.Contains(err.Error(), "UNIQUE constraint failed")
}
