package account

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"

	"github.com/acme/platform/services/auth/internal/password"
)

// Config are the service's policies.
type Config struct {
	SessionTTL     time.Duration // absolute lifetime
	SessionIdle    time.Duration // idle timeout
	TouchInterval  time.Duration // lastSeenAt is written at most this often
	Account        ThrottleRule  // failures per e-mail
	Address        ThrottleRule  // failures per client address
	ThrottleForget time.Duration // a quiet key is forgotten after this
	// EmailAccount and EmailTarget limit address changes and verification
	// mails (every request counts): per account, and per address written
	// to, whoever asks.
	EmailAccount ThrottleRule
	EmailTarget  ThrottleRule
}

// Service implements the use cases.
type Service struct {
	users      UserStore
	sessions   SessionStore
	throttle   ThrottleStore
	hasher     *password.Hasher
	pub        Publisher
	cache      UserCache      // nil: every read goes to the store
	mail       *mailState     // nil: mail is off
	events     EventSink      // nil: events are not recorded
	keys       APIKeyStore    // nil: API keys are off
	mfa        *mfaState      // nil: no second factor
	passkeys   *passkeyState  // nil: no passkeys
	identities IdentityStore  // nil: no identity providers (NewIdentities sets it)
	codes      EmailCodeStore // nil: no mailed codes (SetEmailSignIn sets it)
	codeCfg    EmailSignInConfig
	// methodLocks queues this process's removals of ways to sign in.
	methodLocks methodLocks
	userEvents  UserEvents // nil: deletions are not announced
	cfg         Config
	log         *slog.Logger
	now         func() time.Time
}

// NewService wires a Service.
func NewService(users UserStore, sessions SessionStore, throttle ThrottleStore, hasher *password.Hasher, pub Publisher, cfg Config, log *slog.Logger) *Service {
	if cfg.TouchInterval <= 0 {
		cfg.TouchInterval = time.Minute
	}
	if cfg.ThrottleForget <= 0 {
		cfg.ThrottleForget = 24 * time.Hour
	}
	return &Service{users: users, sessions: sessions, throttle: throttle, hasher: hasher, pub: pub, cfg: cfg, log: log, now: now}
}

// SetUserCache makes GET /me and session resolution read users through c.
// Every write that changes a user invalidates it in c and, through the
// Publisher, in every other replica's cache. Set it before serving.
func (s *Service) SetUserCache(c UserCache) { s.cache = c }

// UserEvents announces user deletions durably (pkg/userevents), so that
// other services erase what the user owned.
type UserEvents interface {
	Deleted(ctx context.Context, userID string) error
}

// SetUserEvents makes DeleteUser announce each deletion on e. Set it
// before serving.
func (s *Service) SetUserEvents(e UserEvents) { s.userEvents = e }

// userByID reads a user through the cache: exact, since the cache serves
// only what no write before this request changed.
func (s *Service) userByID(ctx context.Context, id string) (User, error) {
	if s.cache == nil {
		return s.users.ByID(ctx, id)
	}
	return s.cache.Get(ctx, id, s.users.ByID)
}

// signInUser finds the user behind a normalised address for a sign-in:
// through the cache when it knows the address (the user is then read
// through Get, and must still have this address), else from the store.
func (s *Service) signInUser(ctx context.Context, email string) (User, error) {
	if s.cache == nil {
		return s.users.ByEmail(ctx, email)
	}
	if id, ok := s.cache.UserIDByEmail(email); ok {
		u, err := s.cache.Get(ctx, id, s.users.ByID)
		switch {
		case err == nil && NormalizeEmail(u.Email) == email:
			return u, nil
		case err != nil && !errors.Is(err, ErrUserNotFound):
			return User{}, err
		}
		// Deleted, or the address moved: ask the store who has it now.
	}
	u, err := s.users.ByEmail(ctx, email)
	if err == nil {
		s.cache.RememberEmail(email, u.ID)
	}
	return u, err
}

// revoke announces r: first in this replica's caches, then on NATS
// (flushed before it returns), so every replica's fence sees it before the
// request that made the change is answered.
func (s *Service) revoke(ctx context.Context, r Revocation) {
	if s.cache != nil {
		s.cache.Invalidate(r.Users...)
	}
	if s.pub != nil {
		s.pub.Revoked(ctx, r)
	}
}

// userWriteFailed announces a user change whose outcome is unknown (the
// store failed in a way that may still have applied it): caches must not
// keep the old user.
func (s *Service) userWriteFailed(ctx context.Context, id string, err error) {
	if errors.Is(err, ErrUserNotFound) || errors.Is(err, ErrEmailTaken) {
		return // nothing changed
	}
	s.revoke(ctx, Revocation{Users: []string{id}})
}

// now is UTC truncated to milliseconds, the precision MongoDB keeps, so that
// a value returned at creation equals the one read back later.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// Config returns the policies in force.
func (s *Service) Config() Config { return s.cfg }

// Client describes where a request comes from.
type Client struct {
	IP        string
	UserAgent string
}

// cleaned is c as it is stored (in a session, in the audit trail): the
// text comes from request headers, so characters the text check refuses
// are removed rather than refused (CleanText).
func (c Client) cleaned() Client {
	return Client{IP: CleanText(c.IP), UserAgent: CleanText(c.UserAgent)}
}

// Caller is a signed-in user as the identity token describes them.
type Caller struct {
	UserID    string
	SessionID string // public id
	Client
}

// SecretLength is the length of a session secret as sent in the cookie.
const SecretLength = 43

// HashSecret is how a session secret is stored and named in revocations:
// hex SHA-256 of the cookie value.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func validSecret(secret string) bool {
	if len(secret) != SecretLength {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(secret)
	return err == nil && len(b) == 32
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return b
}

// newSession creates and stores a session; it returns the secret for the cookie.
// twoFactor marks a session opened with two factors (AUTH_MFA_REQUIRE_ADMIN).
func (s *Service) newSession(ctx context.Context, userID string, c Client, twoFactor bool) (string, Session, error) {
	secret := base64.RawURLEncoding.EncodeToString(randomBytes(32))
	t := s.now()
	sess := Session{
		ID:         HashSecret(secret),
		PublicID:   hex.EncodeToString(randomBytes(16)),
		UserID:     userID,
		CreatedAt:  t,
		LastSeenAt: t,
		ExpiresAt:  t.Add(s.cfg.SessionTTL),
		UserAgent:  clip(CleanText(c.UserAgent), maxUA),
		IP:         clip(CleanText(c.IP), maxIP),
		TwoFactor:  twoFactor,
	}
	if err := s.sessions.Create(ctx, sess); err != nil {
		return "", Session{}, err
	}
	return secret, sess, nil
}

// ExpiresAt is when the session ends if it is not used again: the earlier of
// its absolute expiry and its idle expiry.
func (s *Service) ExpiresAt(sess Session) time.Time {
	idle := sess.LastSeenAt.Add(s.cfg.SessionIdle)
	if idle.Before(sess.ExpiresAt) {
		return idle
	}
	return sess.ExpiresAt
}

func (s *Service) expired(sess Session, t time.Time) bool {
	return !t.Before(sess.ExpiresAt) || !t.Before(sess.LastSeenAt.Add(s.cfg.SessionIdle))
}

// SignInInput is a sign-in attempt.
type SignInInput struct {
	Email    string
	Password string
	Client
}

func accountKey(emailLower string) string {
	sum := sha256.Sum256([]byte(emailLower))
	return "account:" + hex.EncodeToString(sum[:16])
}

func addressKey(ip string) string { return "address:" + clip(ip, maxIP) }

// SignIn checks credentials and opens a new session. Unknown e-mails and
// wrong passwords fail alike (ErrInvalidCredentials) and take the same time.
func (s *Service) SignIn(ctx context.Context, in SignInInput) (string, Session, User, error) {
	if in.Email == "" || len(in.Email) > maxEmail {
		return "", Session{}, User{}, invalid("email", "invalid_email", "email must be a non-empty string of at most 254 bytes")
	}
	// The address is recorded in the audit trail even when unknown.
	if err := checkChars("email", in.Email); err != nil {
		return "", Session{}, User{}, err
	}
	if err := validatePassword("password", in.Password); err != nil {
		return "", Session{}, User{}, err
	}
	email := NormalizeEmail(in.Email)
	acct := accountKey(email)
	// The attempt is admitted (one slot per key) before the hash: past
	// the limit it is refused without hashing, and concurrent guesses
	// cannot hash more than the limit between them.
	adm, err := s.admit(ctx, s.signInKeys(acct, in.IP)...)
	if err != nil {
		return "", Session{}, User{}, err
	}

	u, err := s.signInUser(ctx, email)
	ok, rehash, err := s.verifySignIn(ctx, u, err, in.Password)
	if err != nil {
		s.release(ctx, adm) // undecided: not a failure
		return "", Session{}, User{}, err
	}
	if !ok {
		return "", Session{}, User{}, ErrInvalidCredentials // the tickets stay: they count
	}

	// With a second factor, the right password only earns a challenge: the
	// account's failures are forgotten once the code is right too.
	if u.MFAEnabled && s.mfa != nil && (s.mail == nil || !s.mail.cfg.RequireVerify || u.EmailVerified) {
		s.release(ctx, adm)
		ch, err := s.newChallenge(ctx, u)
		if err != nil {
			return "", Session{}, User{}, err
		}
		return "", Session{}, u, ch
	}
	s.succeeded(ctx, adm, acct)
	if s.mail != nil && s.mail.cfg.RequireVerify && !u.EmailVerified {
		return "", Session{}, u, ErrEmailUnverified
	}
	if rehash {
		if h, err := s.hasher.Hash(ctx, in.Password); err != nil {
			s.log.WarnContext(ctx, "re-hash password", "user", u.ID, "err", err)
		} else {
			if err := s.users.ReplaceHash(ctx, u.ID, u.PasswordHash, h); err != nil {
				s.log.WarnContext(ctx, "store re-hashed password", "user", u.ID, "err", err)
			}
			s.revoke(ctx, Revocation{Users: []string{u.ID}}) // cached users carry the hash
		}
	}
	secret, sess, err := s.newSession(ctx, u.ID, in.Client, false)
	return secret, sess, u, err
}

// verifySignIn checks pw against u, the user lookupErr did not fail to
// find: an unknown user, and one without a password (an account an identity
// provider made), are refused like a wrong password, in the same time.
func (s *Service) verifySignIn(ctx context.Context, u User, lookupErr error, pw string) (ok, rehash bool, err error) {
	switch {
	case errors.Is(lookupErr, ErrUserNotFound) || (lookupErr == nil && u.PasswordHash == ""):
		return false, false, s.hasher.VerifyDummy(ctx, pw)
	case lookupErr != nil:
		return false, false, lookupErr
	}
	ok, rehash, err = s.hasher.Verify(ctx, pw, u.PasswordHash)
	if errors.Is(err, password.ErrMalformedHash) {
		s.log.ErrorContext(ctx, "stored password hash is malformed", "user", u.ID)
		return false, false, nil
	}
	return ok, rehash, err
}

// Resolve returns the user and session behind a session secret, enforcing
// both expiries and recording use. Anything unusable is ErrInvalidSession.
func (s *Service) Resolve(ctx context.Context, secret string) (User, Session, error) {
	if !validSecret(secret) {
		return User{}, Session{}, ErrInvalidSession
	}
	sess, err := s.sessions.ByID(ctx, HashSecret(secret))
	if errors.Is(err, ErrSessionNotFound) {
		return User{}, Session{}, ErrInvalidSession
	}
	if err != nil {
		return User{}, Session{}, err
	}
	t := s.now()
	if s.expired(sess, t) {
		if err := s.sessions.Delete(ctx, sess.ID); err != nil && !errors.Is(err, ErrSessionNotFound) {
			s.log.WarnContext(ctx, "delete expired session", "err", err)
		}
		return User{}, Session{}, ErrInvalidSession
	}
	if t.Sub(sess.LastSeenAt) >= s.cfg.TouchInterval {
		if err := s.sessions.Touch(ctx, sess.ID, sess.LastSeenAt, t); err != nil {
			return User{}, Session{}, err
		}
		sess.LastSeenAt = t
	}
	u, err := s.userByID(ctx, sess.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return User{}, Session{}, ErrInvalidSession
	}
	return u, sess, err
}

// validatePatch checks and normalises the shared editable fields into up.
func (s *Service) validatePatch(up *UserPatch, email, fullName, sector, avatarURL, edv *string) error {
	if email != nil {
		v, err := validateEmail("email", *email)
		if err != nil {
			return err
		}
		up.Email = &v
	}
	if fullName != nil {
		v, err := validateText("fullName", *fullName, maxName, true, displayText)
		if err != nil {
			return err
		}
		up.FullName = &v
	}
	if sector != nil {
		v, err := validateText("sector", *sector, maxSector, false, displayText)
		if err != nil {
			return err
		}
		up.Sector = &v
	}
	if avatarURL != nil {
		v, err := validateURL("avatarUrl", *avatarURL)
		if err != nil {
			return err
		}
		up.AvatarURL = &v
	}
	if edv != nil {
		v, err := validateText("edv", *edv, maxEDV, true, codeText)
		if err != nil {
			return err
		}
		up.EDV = &v
	}
	return nil
}

// SignOut ends the caller's session.
func (s *Service) SignOut(ctx context.Context, c Caller) error {
	return s.EndSession(ctx, c.UserID, c.SessionID)
}

// Sessions lists a user's live sessions, newest first.
func (s *Service) Sessions(ctx context.Context, userID string) ([]Session, error) {
	all, err := s.sessions.ListByUser(ctx, userID)
	if err != nil {
		return nil, err
	}
	t := s.now()
	live := all[:0]
	for _, sess := range all {
		if !s.expired(sess, t) {
			live = append(live, sess)
		}
	}
	return live, nil
}

// EndSession ends one of userID's sessions by public id; ErrSessionNotFound.
func (s *Service) EndSession(ctx context.Context, userID, publicID string) error {
	if publicID == "" {
		return ErrSessionNotFound
	}
	sess, err := s.sessions.ByPublicID(ctx, userID, publicID)
	if err != nil {
		return err
	}
	if err := s.sessions.Delete(ctx, sess.ID); err != nil {
		return err
	}
	s.revoke(ctx, Revocation{Sessions: []string{sess.ID}})
	return nil
}

// EndOtherSessions ends every session of the caller but the current one.
func (s *Service) EndOtherSessions(ctx context.Context, c Caller) (int, error) {
	var keep string
	if c.SessionID != "" {
		sess, err := s.sessions.ByPublicID(ctx, c.UserID, c.SessionID)
		switch {
		case err == nil:
			keep = sess.ID
		case !errors.Is(err, ErrSessionNotFound):
			return 0, err
		}
	}
	ended, err := s.sessions.DeleteByUser(ctx, c.UserID, keep)
	if err != nil {
		return 0, err
	}
	if len(ended) > 0 {
		s.revoke(ctx, Revocation{Sessions: ended})
	}
	return len(ended), nil
}

// LiveSessions counts the sessions that are still usable, of every user and
// every replica (the store is shared).
func (s *Service) LiveSessions(ctx context.Context) (int64, error) {
	t := s.now()
	return s.sessions.CountLive(ctx, t, t.Add(-s.cfg.SessionIdle))
}

// Sweep deletes expired sessions and forgotten throttle state. Every replica
// may run it: deletes are idempotent.
func (s *Service) Sweep(ctx context.Context) error {
	t := s.now()
	n, err := s.sessions.DeleteExpired(ctx, t, t.Add(-s.cfg.SessionIdle))
	if err != nil {
		return err
	}
	if err := s.sweepTokens(ctx); err != nil {
		return err
	}
	if s.mail == nil { // with mail on, sweepTokens swept the same store
		var tokens TokenStore
		switch {
		case s.mfa != nil:
			tokens = s.mfa.tokens
		case s.passkeys != nil:
			tokens = s.passkeys.tokens
		}
		if tokens != nil {
			if err := tokens.DeleteExpired(ctx, t); err != nil {
				return err
			}
		}
	}
	if n > 0 {
		s.log.Info("expired sessions swept", "count", n)
	}
	return s.throttle.Forget(ctx, t, t.Add(-s.cfg.ThrottleForget))
}
