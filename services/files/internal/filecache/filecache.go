// Package filecache keeps file records read by id, and each owner's
// listing pages and account (usage and own quota), in memory, so that a
// download, an image, a retrieve, a GET /files or an upload's quota bound
// usually needs no database read, without ever serving a record that was
// deleted, or a listing or usage that an upload, deletion or quota change
// (through any files replica) changed before the request arrived.
//
// Records never change once written: an insert and a delete are the only
// writes. Store.Insert, Store.Delete, and the account's writes other than
// a reservation (Release, SetQuota, ForgetUsage) drop what they make wrong
// here and publish it on <prefix>.files.deleted, flushed, before the write
// answers: {"files":[id],"owners":[owner]} for a delete, {"owners":[owner]}
// otherwise. An upload's reservation is announced by its record's insert
// (or by its release); the account it answers is kept here (Reserve), so
// that the same owner's next upload through this replica is bounded with
// no read. Every replica applies the messages of the others (Apply, fed by
// pkg/natsfence), and serves a cached record, page or account only after
// a fence round trip begun after the request arrived (pkg/fencedcache says
// why that is enough). When NATS is away the fence fails and the database
// is read.
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
// and the owners' listings and accounts a message names, and everything
// when a message cannot be read. A message of origin (this process's
// Publisher) is skipped: Store applied it here before publishing it, and
// may have kept since the account its reservation left (PutAccount).
// Either cache may be nil.
func Apply(c *Cache, owners *OwnerCache, origin string, log *slog.Logger) func([]byte) {
	return func(data []byte) {
		var d Deleted
		if err := json.Unmarshal(data, &d); err != nil {
			log.Warn("bad file deletion message", "err", err)
			c.Clear()
			owners.Clear()
			return
		}
		if origin != "" && d.Origin == origin {
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

// Store is a files.Store whose Get, ListByOwner and Account read through
// the caches, and whose writes invalidate them on every replica.
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

// Account returns owner's account (see files.AccountStore).
func (s *Store) Account(ctx context.Context, owner string) (files.Account, error) {
	return s.owners.Account(ctx, owner, func(ctx context.Context) (files.Account, error) {
		return s.Store.Account(ctx, owner)
	})
}

// Reserve reserves in owner's account and keeps the account it answers
// (see OwnerCache.PutAccount), so that this process's next upload of the
// owner is bounded without a read. A reservation taken is announced by
// the record's insert (or the reservation's release) that follows; a
// failed one, which may still have been applied, at once.
func (s *Store) Reserve(ctx context.Context, owner string, n int64, expect files.Account, max int64) (files.Account, bool, error) {
	token := s.owners.Token(owner)
	a, ok, err := s.Store.Reserve(ctx, owner, n, expect, max)
	if err != nil { // it may still have been applied
		s.changed(ctx, owner)
		return a, ok, err
	}
	s.owners.PutAccount(owner, token, a)
	return a, ok, nil
}

// Release gives a reservation back, then drops the owner's account here
// and announces the owner.
func (s *Store) Release(ctx context.Context, owner string, n int64) error {
	err := s.Store.Release(ctx, owner, n)
	s.changed(ctx, owner)
	return err
}

// SetQuota sets owner's quota, then drops their account here and
// announces the owner.
func (s *Store) SetQuota(ctx context.Context, owner string, quota *int64) error {
	err := s.Store.SetQuota(ctx, owner, quota)
	s.changed(ctx, owner)
	return err
}

// ForgetUsage drops owner's kept usage, then its listings here, and
// announces the owner.
func (s *Store) ForgetUsage(ctx context.Context, owner string) error {
	err := s.Store.ForgetUsage(ctx, owner)
	s.changed(ctx, owner)
	return err
}

// changed drops what is cached of owner here and announces the owner.
func (s *Store) changed(ctx context.Context, owner string) {
	s.owners.Invalidate(owner)
	if s.publish != nil {
		s.publish(ctx, Deleted{Owners: []string{owner}})
	}
}

// Insert writes the record, then drops its owner's listings here (the
// account stays: Reserve counted the record) and announces the owner,
// whatever the outcome (a failed insert may still have been applied).
// Other replicas drop the owner's account too: theirs may predate the
// reservation.
func (s *Store) Insert(ctx context.Context, f *files.File) error {
	err := s.Store.Insert(ctx, f)
	s.owners.InvalidatePages(f.Owner)
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

// Publisher returns the publish function of New on nc, naming origin (a
// value of this process alone, given to Apply too) in every message. A failure is logged:
// the write stands, other replicas may serve the deleted record, or the
// owner's former listing and usage, until it expires from their caches
// (a deleted record's bytes are gone from S3 by then or soon after).
func Publisher(nc *nats.Conn, prefix, origin string, log *slog.Logger) func(context.Context, Deleted) {
	subject := Subject(prefix)
	return func(ctx context.Context, d Deleted) {
		d.Origin = origin
		body, _ := json.Marshal(d)
		if err := natsfence.Publish(nc, subject, body); err != nil {
			log.WarnContext(ctx, "publish file change failed; other replicas expire it from their caches", "err", err, "files", len(d.Files), "owners", len(d.Owners))
		}
	}
}
