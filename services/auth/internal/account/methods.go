package account

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math/big"
	"sync"
	"time"
)

// A user's ways to sign in are the password, the linked identities and
// the passkeys, kept in three collections that no write changes together.
// "The last way to sign in is never removed" is therefore decided under a
// lock on the user's document (UserStore.LockMethods: one conditional
// write, atomic on every server): a user's removals run one at a time,
// each counting what is left before it deletes, so two concurrent removals
// of the last two ways cannot both pass. Additions need no lock: they only
// make a removal safer.

// Bounds of the removal lock.
const (
	// methodsLease is how long a removal may hold the lock; a removal that
	// died holding it blocks the user's removals this long at most. The
	// removal's own work is cut off a second before (methodsWork).
	methodsLease = 10 * time.Second
	methodsWork  = methodsLease - time.Second
	// methodsWait is how long a removal waits for another of the same
	// user's to end before it gives up (ErrMethodsBusy).
	methodsWait = 5 * time.Second
)

// methodLocks queues one process's removals of one user's ways to sign in
// in memory, so that only one of them at a time polls the user's lock in
// the database (a queue there slows the holder down).
type methodLocks struct {
	mu sync.Mutex
	m  map[string]*methodLock
}

type methodLock struct {
	ch   chan struct{} // holds a token while a removal of this process runs
	refs int
}

// acquire waits for userID's turn in this process until deadline.
func (l *methodLocks) acquire(ctx context.Context, userID string, deadline time.Time) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*methodLock{}
	}
	e := l.m[userID]
	if e == nil {
		e = &methodLock{ch: make(chan struct{}, 1)}
		l.m[userID] = e
	}
	e.refs++
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, userID)
		}
		l.mu.Unlock()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; done() }, nil
	case <-timer.C:
		done()
		return nil, ErrMethodsBusy
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// ErrMethodsBusy: another removal of one of the user's ways to sign in
// held the lock for all of methodsWait.
var ErrMethodsBusy = errors.New("another change to the account's ways to sign in is under way")

// signInMethods are the ways a user has to sign in.
type signInMethods struct {
	password   bool
	identities []Identity // linked (invitations are not ways in)
	passkeys   []Passkey
}

func (m signInMethods) count() int {
	n := len(m.identities) + len(m.passkeys)
	if m.password {
		n++
	}
	return n
}

// canRemoveOne reports whether one of the methods may go: another stays.
func (m signInMethods) canRemoveOne() bool { return m.count() > 1 }

// methodsOf reads u's ways to sign in.
func (s *Service) methodsOf(ctx context.Context, u User) (signInMethods, error) {
	m := signInMethods{password: u.PasswordHash != ""}
	if s.identities != nil {
		list, err := s.identities.ListByUser(ctx, u.ID)
		if err != nil {
			return m, err
		}
		for _, i := range list {
			if !i.Pending {
				m.identities = append(m.identities, i)
			}
		}
	}
	if s.passkeys != nil {
		list, err := s.passkeys.store.ListByUser(ctx, u.ID)
		if err != nil {
			return m, err
		}
		m.passkeys = list
	}
	return m, nil
}

// removeMethod runs remove under userID's removal lock, with the user and
// their ways to sign in as they are once the lock is held; remove decides
// (ErrLastSignInMethod) and deletes. ErrUserGone when the user no longer
// exists, ErrMethodsBusy when another removal held the lock too long.
func (s *Service) removeMethod(ctx context.Context, userID string, remove func(ctx context.Context, u User, m signInMethods) error) error {
	holder := hex.EncodeToString(randomBytes(16))
	deadline := time.Now().Add(methodsWait)
	unlock, err := s.methodLocks.acquire(ctx, userID, deadline)
	if err != nil {
		return err
	}
	defer unlock()
	pause := 5 * time.Millisecond
	for {
		now := s.now()
		ok, err := s.users.LockMethods(ctx, userID, holder, now, now.Add(methodsLease))
		if errors.Is(err, ErrUserNotFound) {
			return ErrUserGone
		}
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if !time.Now().Before(deadline) {
			return ErrMethodsBusy
		}
		// A random pause up to twice the last (at most 200 ms), so that
		// waiting removals do not poll in step.
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(pause)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause/2 + time.Duration(n.Int64())):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
	defer func() {
		if err := s.users.UnlockMethods(context.WithoutCancel(ctx), userID, holder); err != nil {
			s.log.WarnContext(ctx, "release the sign-in methods lock (it ends with its lease)", "user", userID, "err", err)
		}
	}()
	// The removal ends before its lease does: no other removal of this
	// user's can start while it may still delete.
	wctx, cancel := context.WithTimeout(ctx, methodsWork)
	defer cancel()
	u, err := s.users.ByID(wctx, userID)
	if errors.Is(err, ErrUserNotFound) {
		return ErrUserGone
	}
	if err != nil {
		return err
	}
	m, err := s.methodsOf(wctx, u)
	if err != nil {
		return err
	}
	return remove(wctx, u, m)
}
