// Package filecache keeps file records read by id, and each owner's
// listing pages and usage, in memory, so that a download, an image, a
// retrieve, a GET /files or a quota check usually needs no database read,
// without ever serving a record that was deleted, or a listing or usage
// that an upload or deletion changed (through any files replica), before
// the request arrived.
//
// Records never change once written: an insert and a delete are the only
// writes. Store.Insert and Store.Delete (which every upload, tus finish,
// deletion and erasure of a user's files goes through) drop what they make
// wrong here and publish it on <prefix>.files.deleted, flushed, before the
// write answers: {"files":[id],"owners":[owner]} for a delete,
// {"owners":[owner]} for an insert. Every replica applies those messages
// (Apply, fed by pkg/natsfence), and serves a cached record, page or usage
// only after a fence round trip begun after the request arrived
// (pkg/fencedcache says why that is enough). When NATS is away the fence
// fails and the database is read.
package filecache

import (
	"context"
	"encoding/json"
	"errors"
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

// Apply is the natsfence apply function for Subject: it drops the records
// and the owners' listings a message names, and everything when a message
// cannot be read. Either cache may be nil.
func Apply(c *Cache, owners *OwnerCache, log *slog.Logger) func([]byte) {
	return func(data []byte) {
		var d Deleted
		if err := json.Unmarshal(data, &d); err != nil {
			log.Warn("bad file deletion message", "err", err)
			c.Clear()
			owners.Clear()
			return
		}
		c.Invalidate(d.Files...)
		owners.Invalidate(d.Owners...)
	}
}

// Reset is the natsfence reset function: messages may have been missed.
func Reset(c *Cache, owners *OwnerCache) func() {
	return func() {
		c.Clear()
		owners.Clear()
	}
}

// Store is a files.Store whose Get, ListByOwner and Usage read through the
// caches, and whose Insert and Delete invalidate them on every replica.
type Store struct {
	files.Store
	cache   *Cache
	owners  *OwnerCache
	publish func(ctx context.Context, d Deleted)
}

// New wraps inner; either cache may be nil (off). publish announces
// deleted records and changed owners to every replica and returns once the
// NATS server has them (Publisher).
func New(inner files.Store, cache *Cache, owners *OwnerCache, publish func(ctx context.Context, d Deleted)) *Store {
	return &Store{Store: inner, cache: cache, owners: owners, publish: publish}
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

// ListByOwner returns copies of owner's records (see files.Store).
func (s *Store) ListByOwner(ctx context.Context, owner string, skip, limit int) ([]*files.File, error) {
	return s.owners.List(ctx, owner, skip, limit, func(ctx context.Context) ([]*files.File, error) {
		return s.Store.ListByOwner(ctx, owner, skip, limit)
	})
}

// Usage returns owner's bytes and count (see files.Store).
func (s *Store) Usage(ctx context.Context, owner string) (int64, int64, error) {
	return s.owners.Usage(ctx, owner, func(ctx context.Context) (int64, int64, error) {
		return s.Store.Usage(ctx, owner)
	})
}

// ForgetUsage drops owner's kept usage, then its listings here, and
// announces the owner.
func (s *Store) ForgetUsage(ctx context.Context, owner string) error {
	err := s.Store.ForgetUsage(ctx, owner)
	s.owners.Invalidate(owner)
	if s.publish != nil {
		s.publish(ctx, Deleted{Owners: []string{owner}})
	}
	return err
}

// Insert writes the record, then drops its owner's listings here and
// announces the owner, whatever the outcome (a failed insert may still
// have been applied).
func (s *Store) Insert(ctx context.Context, f *files.File) error {
	err := s.Store.Insert(ctx, f)
	s.owners.Invalidate(f.Owner)
	if s.publish != nil {
		s.publish(ctx, Deleted{Owners: []string{f.Owner}})
	}
	return err
}

// Delete removes the record, then drops it and its owner's listings here
// and announces both, whatever the outcome (a failed delete may still have
// been applied). The owner is read first (usually from the record cache);
// when that read fails otherwise than "not found", every owner is
// announced (AllOwners).
func (s *Store) Delete(ctx context.Context, id string) error {
	var owners []string
	switch f, err := s.Get(ctx, id); {
	case err == nil:
		owners = []string{f.Owner}
	case errors.Is(err, files.ErrNotFound): // nothing of anyone's to delete
	default:
		owners = []string{AllOwners}
	}
	err := s.Store.Delete(ctx, id)
	s.cache.Invalidate(id)
	s.owners.Invalidate(owners...)
	if s.publish != nil {
		s.publish(ctx, Deleted{Files: []string{id}, Owners: owners})
	}
	return err
}

// Publisher returns the publish function of New on nc. A failure is logged:
// the write stands, other replicas may serve the deleted record, or the
// owner's former listing and usage, until it expires from their caches
// (a deleted record's bytes are gone from S3 by then or soon after).
func Publisher(nc *nats.Conn, prefix string, log *slog.Logger) func(context.Context, Deleted) {
	subject := Subject(prefix)
	return func(ctx context.Context, d Deleted) {
		body, _ := json.Marshal(d)
		if err := natsfence.Publish(nc, subject, body); err != nil {
			log.WarnContext(ctx, "publish file change failed; other replicas expire it from their caches", "err", err, "files", len(d.Files), "owners", len(d.Owners))
		}
	}
}
