// Package filecache keeps file records read by id in memory, so that a
// download, an image or a retrieve usually needs no database read, without
// ever serving a record that was deleted (through any files replica)
// before the request arrived.
//
// Records never change once written: a delete is the only write that can
// make a cached record wrong. Store.Delete (which every deletion, the
// erasure of a user's files included, goes through) drops the record here
// and publishes {"files":[id]} on <prefix>.files.deleted, flushed, before
// the deletion answers; every replica applies those messages (Apply, fed by
// pkg/natsfence), and serves a cached record only after a fence round trip
// begun after the request arrived (pkg/fencedcache says why that is
// enough). When NATS is away the fence fails and records are read from the
// database.
package filecache

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/acme/platform/pkg/fencedcache"
	"github.com/acme/platform/pkg/handoff"
	"github.com/acme/platform/pkg/natsfence"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/nats-io/nats.go"
)

// Subject returns the deletion subject for a NATS subject prefix: the
// contract is package handoff's, whose object cache in the gateways also
// drops what the messages name.
func Subject(prefix string) string { return handoff.DeletedSubject(prefix) }

// Deleted is the message published on Subject.
type Deleted = handoff.Deleted

// Cache is the record cache: a fencedcache of records by id.
type Cache = fencedcache.Cache[files.File]

// NewCache returns a cache keeping at most max records for ttl each (ttl 0:
// off). Set its fence (natsfence.Fence.Sync) before serving.
func NewCache(ttl time.Duration, max int) *Cache {
	return fencedcache.New[files.File](ttl, max, nil)
}

// Apply is the natsfence apply function for Subject: it drops the records a
// message names, and everything when a message cannot be read.
func Apply(c *Cache, log *slog.Logger) func([]byte) {
	return handoff.ApplyDeleted(c.Invalidate, c.Clear, log)
}

// Store is a files.Store whose Get reads through the cache and whose
// Delete invalidates it on every replica.
type Store struct {
	files.Store
	cache   *Cache
	publish func(ctx context.Context, ids []string)
}

// New wraps inner. publish announces deleted ids to every replica and
// returns once the NATS server has them (Publisher).
func New(inner files.Store, cache *Cache, publish func(ctx context.Context, ids []string)) *Store {
	return &Store{Store: inner, cache: cache, publish: publish}
}

// Get returns a copy of the record: callers may change what they get.
func (s *Store) Get(ctx context.Context, id string) (*files.File, error) {
	f, err := s.cache.Get(ctx, id, s.load)
	if err != nil {
		return nil, err
	}
	return &f, nil
}

func (s *Store) load(ctx context.Context, id string) (files.File, error) {
	f, err := s.Store.Get(ctx, id)
	if err != nil {
		return files.File{}, err
	}
	return *f, nil
}

// Delete removes the record, then drops it here and announces it, whatever
// the outcome (a failed delete may still have been applied).
func (s *Store) Delete(ctx context.Context, id string) error {
	err := s.Store.Delete(ctx, id)
	s.cache.Invalidate(id)
	if s.publish != nil {
		s.publish(ctx, []string{id})
	}
	return err
}

// Publisher returns the publish function of New on nc. A failure is logged:
// the deletion stands, other replicas may serve the record until it expires
// from their caches, and its bytes are gone from S3 by then or soon after.
func Publisher(nc *nats.Conn, prefix string, log *slog.Logger) func(context.Context, []string) {
	subject := Subject(prefix)
	return func(ctx context.Context, ids []string) {
		body, _ := json.Marshal(Deleted{Files: ids})
		if err := natsfence.Publish(nc, subject, body); err != nil {
			log.WarnContext(ctx, "publish file deletion failed; other replicas expire the record from their caches", "err", err, "files", len(ids))
		}
	}
}
