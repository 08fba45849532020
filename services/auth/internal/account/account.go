// Package account is the auth service's domain: users, their password
// hashes, sessions, sign-in throttling and the revocation events that tell
// gateways to forget cached identities. It declares the stores it needs and
// knows nothing of HTTP or MongoDB.
package account

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Roles a user can have.
const (
	RoleUser  = "user"
	RoleAdmin = "admin"
)

// User is an account. PasswordHash is a PHC argon2id string and never leaves
// the service.
type User struct {
	ID           string
	Email        string
	FullName     string
	Sector       *string
	EDV          string
	AvatarURL    *string
	Role         string
	PasswordHash string
	// EmailVerified: the user has opened a verification (or password
	// reset) link sent to Email.
	EmailVerified bool
	// MFAEnabled: sign-in needs a second factor (a confirmed TOTP).
	MFAEnabled bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Session is a signed-in browser or client. The secret (the cookie value) is
// never stored: ID is the hex SHA-256 of it. PublicID names the session in
// listings and identity tokens.
type Session struct {
	ID         string
	PublicID   string
	UserID     string
	CreatedAt  time.Time
	LastSeenAt time.Time
	ExpiresAt  time.Time // absolute expiry
	UserAgent  string
	IP         string
	// TwoFactor: the session was opened with two factors (a password and
	// a TOTP or recovery code, or a passkey with user verification).
	TwoFactor bool
}

// UserPatch lists the fields to change; nil means unchanged. An empty string
// in Sector or AvatarURL clears the field.
type UserPatch struct {
	Email         *string
	FullName      *string
	Sector        *string
	EDV           *string
	AvatarURL     *string
	Role          *string
	PasswordHash  *string
	EmailVerified *bool
	MFAEnabled    *bool
}

// Empty reports whether the patch changes nothing.
func (p UserPatch) Empty() bool {
	return p.Email == nil && p.FullName == nil && p.Sector == nil && p.EDV == nil &&
		p.AvatarURL == nil && p.Role == nil && p.PasswordHash == nil && p.EmailVerified == nil && p.MFAEnabled == nil
}

// UserStore keeps users. E-mails are unique case-insensitively.
type UserStore interface {
	// Create stores u (ID empty) and returns it with its ID; ErrEmailTaken.
	Create(ctx context.Context, u User) (User, error)
	// ByID returns ErrUserNotFound for unknown or malformed ids.
	ByID(ctx context.Context, id string) (User, error)
	// ByEmail looks the e-mail up case-insensitively; ErrUserNotFound.
	ByEmail(ctx context.Context, email string) (User, error)
	// Update applies p and sets updatedAt; ErrUserNotFound, ErrEmailTaken.
	Update(ctx context.Context, id string, p UserPatch, now time.Time) (User, error)
	// ReplaceHash swaps the password hash only if it is still old (re-hash
	// at sign-in must not undo a concurrent password change).
	ReplaceHash(ctx context.Context, id, old, new string) error
	// Delete removes the user; ErrUserNotFound.
	Delete(ctx context.Context, id string) error
	// List returns a page in creation order and the total count.
	List(ctx context.Context, skip, limit int) ([]User, int64, error)
	// LockMethods takes the user's lock on removing ways to sign in for
	// holder until until, by one conditional write: false when another
	// holder has it and its lease has not ended by now; ErrUserNotFound.
	LockMethods(ctx context.Context, id, holder string, now, until time.Time) (bool, error)
	// UnlockMethods releases holder's lock (nothing when another holds it).
	UnlockMethods(ctx context.Context, id, holder string) error
}

// SessionStore keeps sessions.
type SessionStore interface {
	Create(ctx context.Context, s Session) error
	// ByID finds a session by the hash of its secret; ErrSessionNotFound.
	ByID(ctx context.Context, id string) (Session, error)
	// ByPublicID finds one of userID's sessions; ErrSessionNotFound.
	ByPublicID(ctx context.Context, userID, publicID string) (Session, error)
	// Touch sets lastSeenAt to now if it is still prev (one writer per minute).
	Touch(ctx context.Context, id string, prev, now time.Time) error
	// Delete removes a session; ErrSessionNotFound if it was not there.
	Delete(ctx context.Context, id string) error
	ListByUser(ctx context.Context, userID string) ([]Session, error)
	// DeleteByUser removes userID's sessions except the one whose ID is
	// except (may be empty) and returns the IDs removed.
	DeleteByUser(ctx context.Context, userID, except string) ([]string, error)
	// DeleteExpired removes sessions past their absolute expiry or idle
	// since before idleBefore.
	DeleteExpired(ctx context.Context, now, idleBefore time.Time) (int64, error)
	// CountLive counts sessions neither past their absolute expiry nor idle
	// since before idleBefore (for the sessions-active metric).
	CountLive(ctx context.Context, now, idleBefore time.Time) (int64, error)
}

// ThrottleRule limits attempts of one key: at most Max attempts are
// admitted in each fixed window of Window; the attempt that finds them all
// taken locks the key for Lock, doubling with each further lock up to
// LockMax (Lock <= 0: refused until the window ends). Max <= 0 is off.
type ThrottleRule struct {
	Max     int
	Window  time.Duration
	Lock    time.Duration
	LockMax time.Duration
}

// ThrottleRequest is one key to admit an attempt of, under its rule.
type ThrottleRequest struct {
	Key  string
	Rule ThrottleRule
}

// Ticket is one admitted attempt of a throttle key: it counts until it is
// released (the attempt did not fail). Fresh: the key had no other attempt
// and no lock when it was admitted (a success then needs no Reset).
type Ticket struct {
	Key   string
	Slot  string
	Nonce string // the store's mark of this attempt's hold on Slot
	Fresh bool
}

// ThrottleStore admits attempts per key, shared by every replica. Attempts
// are admitted before the work they guard (a password hash, a code check, a
// mail), so that N concurrent attempts never do the work more than Max
// times in a window, on every server the store runs on.
type ThrottleStore interface {
	// Admit reserves one attempt of each request's key under its rule, all
	// or none: a Ticket per request, in order, or *ThrottledError (Key
	// naming the key refused) when a key is locked or its attempts are used
	// up, and then no attempt is counted.
	Admit(ctx context.Context, now time.Time, reqs ...ThrottleRequest) ([]Ticket, error)
	// Release gives admitted attempts back (they did not fail).
	Release(ctx context.Context, tickets ...Ticket) error
	// Check returns, for each key with state, the time its lock ends (zero
	// or past when not locked). It reserves nothing.
	Check(ctx context.Context, keys []string) (map[string]time.Time, error)
	// Reset forgets key's attempts and locks.
	Reset(ctx context.Context, key string, now time.Time) error
	// Succeed ends a successful attempt: tickets of keys other than reset
	// are given back (Release), and reset's attempts and lock are
	// forgotten (Reset), in as few round trips as the store can.
	Succeed(ctx context.Context, reset string, tickets ...Ticket) error
	// Forget removes attempts whose window ended by now, and keys with no
	// attempt and no lock since before.
	Forget(ctx context.Context, now, before time.Time) error
}

// Revocation names what cached identities must be dropped: sessions by the
// hash of their secret (Session.ID) and users by id.
type Revocation struct {
	Sessions []string `json:"sessions"`
	Users    []string `json:"users"`
}

// UserCache keeps users read by id and the address each was last found by
// (services/auth/internal/usercache). Get serves a cached user only when
// that is exact (the fence passed), else calls load; Invalidate drops
// users after a write.
type UserCache interface {
	Get(ctx context.Context, id string, load func(context.Context, string) (User, error)) (User, error)
	Invalidate(ids ...string)
	// UserIDByEmail returns the id of the user last found by this
	// normalised address. It is a hint: the caller checks the user's
	// current address, read through Get.
	UserIDByEmail(email string) (string, bool)
	RememberEmail(email, id string)
}

// Publisher announces revocations. It must not fail the request: gateways
// also expire their caches quickly.
type Publisher interface {
	Revoked(ctx context.Context, r Revocation)
}

// Errors.
var (
	ErrUserNotFound       = errors.New("user not found")
	ErrEmailTaken         = errors.New("e-mail already in use")
	ErrInvalidCredentials = errors.New("invalid e-mail or password")
	ErrInvalidSession     = errors.New("invalid or expired session")
	ErrSessionNotFound    = errors.New("session not found")
	ErrWrongPassword      = errors.New("current password does not match")
	ErrUserGone           = errors.New("the signed-in user no longer exists")
	ErrEmptyPatch         = errors.New("at least one property must be sent")
	ErrSelfDelete         = errors.New("administrators cannot delete themselves")
	ErrSelfDemote         = errors.New("administrators cannot remove their own admin role")
	ErrInvalidToken       = errors.New("the link is invalid, has expired or was already used")
	ErrMailDisabled       = errors.New("mail is not configured")
	ErrBusy               = errors.New("too much work queued")
	ErrEmailUnverified    = errors.New("the e-mail address is not verified")
	ErrAlreadyVerified    = errors.New("the e-mail address is already verified")
)

// ThrottledError says sign-in (or, with What set, another action) is
// locked for RetryAfter.
type ThrottledError struct {
	RetryAfter time.Duration
	What       string // "" is "too many failed sign-ins"
	Key        string // the key refused, when the store knows it (never shown)
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("%s, retry after %s", e.Message(), e.RetryAfter)
}

// Message is the client-facing text.
func (e *ThrottledError) Message() string {
	if e.What != "" {
		return e.What
	}
	return "too many failed sign-ins"
}

// ValidationError is bad input in one field.
type ValidationError struct {
	Field, Code, Message string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Message }

func invalid(field, code, msg string) error {
	return &ValidationError{Field: field, Code: code, Message: msg}
}
