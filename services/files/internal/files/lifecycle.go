package files

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Usage is what an owner stores against their quota.
type Usage struct {
	Used    int64 // bytes of the owner's records (as uploaded; images as re-encoded), uploads in flight included
	Quota   int64 // bytes allowed, when Limited
	Limited bool  // false: no quota applies
	Files   int64 // records, uploads in flight included
}

// Usage returns owner's usage and the quota in force for them.
func (s *Service) Usage(ctx context.Context, owner string) (Usage, error) {
	a, err := s.store.Account(ctx, owner)
	if err != nil {
		return Usage{}, err
	}
	q := s.maxBytes(a)
	return Usage{Used: max(a.Bytes, 0), Quota: max(q, 0), Limited: q >= 0, Files: max(a.Count, 0)}, nil
}

// SetQuota gives owner their own quota in bytes, or back the default when
// quota is nil.
func (s *Service) SetQuota(ctx context.Context, owner string, quota *int64) error {
	if quota != nil && *quota < 0 {
		return ErrBadQuota
	}
	return s.store.SetQuota(ctx, owner, quota)
}

// ErrBadQuota is a negative quota.
var ErrBadQuota = errors.New("a quota must not be negative")

// maxBytes is the quota in force for an account: its own, else the
// default; -1 when none applies (no own quota and a default of 0).
func (s *Service) maxBytes(a Account) int64 {
	switch {
	case a.OwnQuota:
		return a.Quota
	case s.cfg.DefaultQuota > 0:
		return s.cfg.DefaultQuota
	}
	return -1
}

// left is how many more bytes an account allows; -1 when unlimited.
func (s *Service) left(a Account) int64 {
	q := s.maxBytes(a)
	if q < 0 {
		return -1
	}
	return max(q-a.Bytes, 0)
}

// CheckSpace returns ErrQuotaExceeded when owner has less than n bytes of
// quota left (a resumable upload declares its length before sending it).
// It reads the account as known (usually cached): the reservation at the
// end of the upload decides.
func (s *Service) CheckSpace(ctx context.Context, owner string, n int64) error {
	a, err := s.store.Account(ctx, owner)
	if err != nil {
		return err
	}
	if left := s.left(a); left >= 0 && n > left {
		return ErrQuotaExceeded
	}
	return nil
}

// reserveAttempts bounds the reservations one upload tries: each retry
// follows a quota changed by an administrator, or bytes freed, since the
// account was read.
const reserveAttempts = 4

// reserve takes n bytes of owner's quota in one conditional write, checked
// against known, the account as last read (usually from the cache): the
// quota it had is part of the condition, so a quota changed meanwhile
// fails the write, and the account then stored decides.
func (s *Service) reserve(ctx context.Context, owner string, n int64, known Account) error {
	for range reserveAttempts {
		q := s.maxBytes(known)
		now, ok, err := s.store.Reserve(ctx, owner, n, known, q)
		if err != nil || ok {
			return err
		}
		if sameQuota(now, known) && q >= 0 && now.Bytes+n > q {
			return ErrQuotaExceeded // refused under the quota it was checked against
		}
		known = now
	}
	return ErrQuotaExceeded
}

// sameQuota reports whether two accounts are under the same quota.
func sameQuota(a, b Account) bool {
	return a.OwnQuota == b.OwnQuota && (!a.OwnQuota || a.Quota == b.Quota)
}

// release gives a reservation back, on a context of its own: the
// request's may be done.
func (s *Service) release(ctx context.Context, owner string, n int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.store.Release(ctx, owner, n); err != nil {
		s.log.Publish(ctx, LogEntry{Type: "error", Body: fmt.Sprintf("giving back %d reserved bytes of %s failed (their usage counts them until recounted): %v", n, owner, err)})
	}
}

// Delete removes file id for its owner or an administrator: the record
// first (from then on every URL of it answers 404), then its share links
// and its object. An object whose removal fails has no record any more, so
// the orphan sweep removes it later.
func (s *Service) Delete(ctx context.Context, id string, r Reader) error {
	f, err := s.modifiable(ctx, id, r)
	if err != nil {
		return err
	}
	if err := s.store.Delete(ctx, f.ID); err != nil {
		return err
	}
	if err := s.store.DeleteLinksByFile(ctx, f.ID); err != nil {
		// Shared refuses links whose file is gone; the link sweep
		// forgets them after expiry.
		s.log.Publish(ctx, LogEntry{Type: "error", Body: "removing the share links of deleted " + f.ID + " failed: " + err.Error()})
	}
	s.remove(f.Key)
	if err := s.removeVariants(ctx, f); err != nil {
		s.log.Publish(ctx, LogEntry{Type: "error", Body: "removing the variants of deleted " + f.ID + " failed (the sweeper will retry): " + err.Error()})
	}
	s.log.Publish(ctx, LogEntry{Type: "log", Body: fmt.Sprintf("deleted %s %s of %s (by %s)", f.Kind, f.ID, f.Owner, r.UserID)})
	return nil
}

// EraseOwner deletes every record, object (image variants included) and share link of owner, their
// own quota and their usage count: the user is gone. Each object is removed before its
// record, so a record left means work left, and an error (storage away)
// leaves the rest for a retry of the whole call, which is idempotent. It
// returns how many records it removed.
func (s *Service) EraseOwner(ctx context.Context, owner string) (int, error) {
	if owner == "" {
		return 0, errors.New("erase: empty owner")
	}
	n := 0
	for {
		batch, err := s.store.ListByOwner(ctx, owner, 0, 100)
		if err != nil {
			return n, err
		}
		if len(batch) == 0 {
			break
		}
		for _, f := range batch {
			if err := s.removeVariants(ctx, f); err != nil {
				return n, err
			}
			if err := s.objects.Remove(ctx, f.Key); err != nil {
				return n, err
			}
			if err := s.store.DeleteLinksByFile(ctx, f.ID); err != nil {
				return n, err
			}
			if err := s.store.Delete(ctx, f.ID); err != nil && !errors.Is(err, ErrNotFound) {
				return n, err
			}
			n++
		}
	}
	if err := s.store.SetQuota(ctx, owner, nil); err != nil {
		return n, err
	}
	// Every record is gone: whatever count an interrupted erasure left
	// (a process killed between a record's delete and its count) goes too.
	if err := s.store.ForgetUsage(ctx, owner); err != nil {
		return n, err
	}
	s.log.Publish(ctx, LogEntry{Type: "log", Body: fmt.Sprintf("erased %d files of deleted user %s", n, owner)})
	return n, nil
}
