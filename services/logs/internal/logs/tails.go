package logs

import (
	"errors"
	"sync"
)

// Refusals of TailSlots.Acquire.
var (
	// ErrTooManyTails: the user already has TailSlots.PerUser live tails
	// open on this replica. The user's own doing (or their API key's), so
	// it is answered to them alone and never reaches other viewers.
	ErrTooManyTails = errors.New("too many live tails open for this user")
	// ErrTailsBusy: the replica already has TailSlots.Max live tails open.
	ErrTailsBusy = errors.New("too many live tails open on this replica")
)

// TailSlots bounds the live tails open at once on one replica: Max in all
// and PerUser for any one user (every session and API key of the user
// counts against the same PerUser). The per-user bound sits well below
// Max, so one user, or one leaked key, can hold at most PerUser of the
// replica's Max slots and the others stay open to everyone else.
//
// Both counts change under one mutex: a check and its increment are one
// step, so parallel requests never pass a bound between them.
type TailSlots struct {
	max, perUser int

	mu     sync.Mutex
	open   int
	byUser map[string]int // only users with a tail open
}

// NewTailSlots returns slots for max tails in all, perUser for one user.
func NewTailSlots(max, perUser int) *TailSlots {
	return &TailSlots{max: max, perUser: perUser, byUser: map[string]int{}}
}

// Acquire takes a slot for user, or answers ErrTooManyTails (the user is
// at PerUser, checked first: it is the precise answer) or ErrTailsBusy.
// release gives the slot back; calling it more than once is harmless.
func (s *TailSlots) Acquire(user string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byUser[user] >= s.perUser {
		return nil, ErrTooManyTails
	}
	if s.open >= s.max {
		return nil, ErrTailsBusy
	}
	s.open++
	s.byUser[user]++
	var once sync.Once
	return func() { once.Do(func() { s.release(user) }) }, nil
}

func (s *TailSlots) release(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if s.byUser[user]--; s.byUser[user] <= 0 {
		delete(s.byUser, user)
	}
}

// Open returns the tails open in all and those of user.
func (s *TailSlots) Open(user string) (all, ofUser int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open, s.byUser[user]
}
