package files

import (
	"context"
	"errors"
	"fmt"
)

// Usage is what an owner stores against their quota.
type Usage struct {
	Used    int64 // bytes of the owner's records (as uploaded; images as re-encoded)
	Quota   int64 // bytes allowed, when Limited
	Limited bool  // false: no quota applies
	Files   int64 // records
}

// Usage returns owner's usage and the quota in force for them.
func (s *Service) Usage(ctx context.Context, owner string) (Usage, error) {
	used, n, err := s.store.Usage(ctx, owner)
	if err != nil {
		return Usage{}, err
	}
	q, limited, err := s.quota(ctx, owner)
	if err != nil {
		return Usage{}, err
	}
	return Usage{Used: used, Quota: q, Limited: limited, Files: n}, nil
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

// quota is the quota in force for owner: their own, else the default
// (none when the default is 0).
func (s *Service) quota(ctx context.Context, owner string) (q int64, limited bool, err error) {
	q, ok, err := s.store.Quota(ctx, owner)
	if err != nil {
		return 0, false, err
	}
	if ok {
		return q, true, nil
	}
	return s.cfg.DefaultQuota, s.cfg.DefaultQuota > 0, nil
}

// remaining is how many more bytes owner may store; -1 when unlimited.
func (s *Service) remaining(ctx context.Context, owner string) (int64, error) {
	q, limited, err := s.quota(ctx, owner)
	if err != nil || !limited {
		return -1, err
	}
	used, _, err := s.store.Usage(ctx, owner)
	if err != nil {
		return 0, err
	}
	return max(q-used, 0), nil
}

// CheckSpace returns ErrQuotaExceeded when owner has less than n bytes of
// quota left (a resumable upload declares its length before sending it).
func (s *Service) CheckSpace(ctx context.Context, owner string, n int64) error {
	left, err := s.remaining(ctx, owner)
	if err != nil {
		return err
	}
	if left >= 0 && n > left {
		return ErrQuotaExceeded
	}
	return nil
}

// overQuota reports whether owner's records now pass their quota.
func (s *Service) overQuota(ctx context.Context, owner string) (bool, error) {
	q, limited, err := s.quota(ctx, owner)
	if err != nil || !limited {
		return false, err
	}
	used, _, err := s.store.Usage(ctx, owner)
	if err != nil {
		return false, err
	}
	return used > q, nil
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
	s.log.Publish(ctx, LogEntry{Type: "log", Body: fmt.Sprintf("deleted %s %s of %s (by %s)", f.Kind, f.ID, f.Owner, r.UserID)})
	return nil
}

// EraseOwner deletes every record, object and share link of owner, their
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
