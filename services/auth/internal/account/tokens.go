package account

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/services/auth/internal/mailer"
)

// Token purposes.
const (
	PurposeReset  = "reset"
	PurposeVerify = "verify"
	// PurposeEmailChange is a pending address change confirmed by mail
	// from both addresses (ID changeKey(user), Email the new address, Data
	// the address it replaces, Change its nonce, Confirmed the sides).
	PurposeEmailChange = "email-change"
	// PurposeEmailChangeCurrent is the link sent to the current address of
	// a pending change (Email that address, Change the change's nonce).
	PurposeEmailChangeCurrent = "email-change-current"
)

// Token is a one-time link secret. Like a session, only the hash of the
// secret is stored (ID). Email is the address the link was sent to: for
// verification, the address that becomes verified (and the user's address,
// if it was a change).
type Token struct {
	ID        string
	Purpose   string
	UserID    string
	Email     string
	CreatedAt time.Time
	ExpiresAt time.Time
	// Data is what the purpose keeps with the token (a WebAuthn
	// ceremony's session data); nil for links.
	Data []byte
	// Slot is the throttle slot a ceremony holds while it is pending
	// (ThrottleStore.Release gives it back when it is taken).
	Slot string
	// Change binds a link to the pending address change it confirms (the
	// change's random nonce; on the change itself, its own).
	Change string
	// Confirmed are the sides of a pending address change confirmed so
	// far (ChangeSideCurrent, ChangeSideNew).
	Confirmed []string
}

// TokenStore keeps one-time tokens.
type TokenStore interface {
	Create(ctx context.Context, t Token) error
	// Take deletes and returns the token if it exists with this purpose
	// and has not expired; ErrInvalidToken otherwise. Atomic: a token is
	// taken once.
	Take(ctx context.Context, id, purpose string, now time.Time) (Token, error)
	// Put stores t, replacing the token with its ID if there is one.
	Put(ctx context.Context, t Token) error
	// Confirm adds side to the token's Confirmed if it exists with this
	// purpose and change and has not expired, and returns the token as it
	// is after; ErrInvalidToken otherwise. Atomic (one find-and-modify):
	// of two sides confirmed at once, exactly one sees both.
	Confirm(ctx context.Context, id, purpose, change, side string, now time.Time) (Token, error)
	// TakeConfirmed deletes and returns the token if it exists with this
	// purpose and change, has every one of sides confirmed and has not
	// expired; ErrInvalidToken otherwise. Atomic (one find-and-delete).
	TakeConfirmed(ctx context.Context, id, purpose, change string, sides []string, now time.Time) (Token, error)
	// DeleteByUser removes the user's tokens of one purpose.
	DeleteByUser(ctx context.Context, userID, purpose string) error
	// DeleteExpired removes tokens past their expiry.
	DeleteExpired(ctx context.Context, now time.Time) error
}

// Mailer delivers a templated message (services/auth/internal/mailer).
type Mailer interface {
	Send(ctx context.Context, name, to string, d mailer.Data) error
}

// MailConfig are the policies of the mail flows.
type MailConfig struct {
	PublicURL     string        // where the console is reached; links point at PublicURL + "/console/#/..."
	ResetTTL      time.Duration // how long a reset link works
	VerifyTTL     time.Duration // how long a verification link works
	ResetAccount  ThrottleRule  // reset requests per e-mail address
	ResetAddress  ThrottleRule  // reset requests per client address
	RequireVerify bool          // unverified users may not sign in
	SendTimeout   time.Duration // one background delivery, database work included
	MaxPending    int           // deliveries in flight at once; more: ErrBusy
}

// mailState is the Service's background delivery.
type mailState struct {
	mailer Mailer // nil: mail is off
	cfg    MailConfig
	tokens TokenStore
	slots  chan struct{}
	wg     sync.WaitGroup
	ctx    context.Context
	stop   context.CancelFunc
}

// SetMail turns on the mail flows (password reset, address verification).
// Without it, ForgotPassword answers ErrMailDisabled, new users are not
// sent links, and address changes apply at once. Set it before serving.
func (s *Service) SetMail(m Mailer, tokens TokenStore, cfg MailConfig) {
	if cfg.MaxPending < 1 {
		cfg.MaxPending = 64
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = time.Minute
	}
	s.mail = &mailState{mailer: m, cfg: cfg, tokens: tokens, slots: make(chan struct{}, cfg.MaxPending)}
}

// Close waits for background deliveries (they end within SendTimeout).
func (s *Service) Close() {
	if s.mail != nil {
		s.mail.wg.Wait()
	}
}

// background runs job outside the request, so that what the caller sees
// (and how long it takes) does not depend on what the job finds. The job's
// context keeps the request's values (its request id, for logs and the
// audit trail) but not its cancellation. ErrBusy when too many jobs are
// pending.
func (s *Service) background(req context.Context, job func(ctx context.Context)) error {
	m := s.mail
	select {
	case m.slots <- struct{}{}:
	default:
		return ErrBusy
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer func() { <-m.slots }()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(req), m.cfg.SendTimeout)
		defer cancel()
		job(ctx)
	}()
	return nil
}

func resetAccountKey(emailLower string) string { return "reset-" + accountKey(emailLower) }
func resetAddressKey(ip string) string         { return "reset-" + addressKey(ip) }

// ForgotPassword asks for a reset link for email. It answers the same for
// known and unknown addresses, after the same work: input checks and the
// throttle (per address and per client, counting every request); looking
// the user up, storing the token and sending happen in the background.
func (s *Service) ForgotPassword(ctx context.Context, email string, c Client) error {
	if s.mail == nil {
		return ErrMailDisabled
	}
	e, err := validateEmail("email", email)
	if err != nil {
		return err
	}
	lower := NormalizeEmail(e)
	keys := []throttleKey{{resetAccountKey(lower), s.mail.cfg.ResetAccount}}
	if c.IP != "" {
		keys = append(keys, throttleKey{resetAddressKey(c.IP), s.mail.cfg.ResetAddress})
	}
	// Every request counts, admitted atomically (one slot per key).
	if err := s.throttleFail(ctx, keys...); err != nil {
		var te *ThrottledError
		if errors.As(err, &te) {
			te.What = "too many password reset requests"
		}
		return err
	}
	return s.background(ctx, func(ctx context.Context) {
		u, err := s.users.ByEmail(ctx, lower)
		if errors.Is(err, ErrUserNotFound) {
			s.log.InfoContext(ctx, "password reset asked for an unknown address")
			return
		}
		if err != nil {
			s.log.WarnContext(ctx, "password reset: look the user up", "err", err)
			return
		}
		if err := s.mail.tokens.DeleteByUser(ctx, u.ID, PurposeReset); err != nil {
			s.log.WarnContext(ctx, "password reset: drop older links", "user", u.ID, "err", err)
			return
		}
		s.event(ctx, Event{Type: EventPasswordResetAsked, Target: u.ID, TargetEmail: u.Email, Client: c})
		if err := s.sendLink(ctx, u, u.Email, PurposeReset, mailer.Reset, "reset", s.mail.cfg.ResetTTL); err != nil {
			s.log.WarnContext(ctx, "password reset: send the link", "user", u.ID, "err", err)
		}
	})
}

// sendLink stores a new token of purpose for u and mails a link with it to
// address (template name, console page).
func (s *Service) sendLink(ctx context.Context, u User, address, purpose, template, page string, ttl time.Duration) error {
	return s.sendChangeLink(ctx, u, address, purpose, template, page, ttl, "", "")
}

// sendChangeLink is sendLink for a link bound to the pending address
// change change (none when ""), whose new address the mail names.
func (s *Service) sendChangeLink(ctx context.Context, u User, address, purpose, template, page string, ttl time.Duration, change, newEmail string) error {
	secret := base64.RawURLEncoding.EncodeToString(randomBytes(32))
	t := s.now()
	if err := s.mail.tokens.Create(ctx, Token{ID: HashSecret(secret), Purpose: purpose, UserID: u.ID, Email: address, CreatedAt: t, ExpiresAt: t.Add(ttl), Change: change}); err != nil {
		return err
	}
	link := strings.TrimRight(s.mail.cfg.PublicURL, "/") + "/console/#/" + page + "?" + url.Values{"token": {secret}}.Encode()
	return s.mail.mailer.Send(ctx, template, address, mailer.Data{Name: u.FullName, Email: address, NewEmail: newEmail, Link: link, Valid: humanDuration(ttl)})
}

func humanDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0 && d >= time.Hour:
		n := int(d / time.Hour)
		if n == 1 {
			return "1 hour"
		}
		return fmt.Sprintf("%d hours", n)
	case d%time.Minute == 0 && d >= time.Minute:
		n := int(d / time.Minute)
		if n == 1 {
			return "1 minute"
		}
		return fmt.Sprintf("%d minutes", n)
	}
	return d.String()
}

// takeToken validates the format of a link's secret and takes its token.
func (s *Service) takeToken(ctx context.Context, secret, purpose string) (Token, error) {
	if secret == "" {
		return Token{}, invalid("token", "missing_field", "token is required")
	}
	if !validSecret(secret) {
		return Token{}, invalid("token", "invalid_token", "token must be the 43-character value from the link")
	}
	return s.mail.tokens.Take(ctx, HashSecret(secret), purpose, s.now())
}

// takeLink spends a mailed link of purpose and returns it with the user it
// was sent to: ErrMailDisabled without mail, ErrInvalidToken for an
// unknown, used or expired link or a user who is gone.
func (s *Service) takeLink(ctx context.Context, secret, purpose string) (Token, User, error) {
	if s.mail == nil {
		return Token{}, User{}, ErrMailDisabled
	}
	tok, err := s.takeToken(ctx, secret, purpose)
	if err != nil {
		return Token{}, User{}, err
	}
	u, err := s.users.ByID(ctx, tok.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return Token{}, User{}, ErrInvalidToken
	}
	return tok, u, err
}

// ResetPassword sets the password of the user a reset link was sent to,
// ends every session of the user (revoked on every gateway at once) and
// spends the token. The link also proves the address: it becomes verified.
func (s *Service) ResetPassword(ctx context.Context, secret, newPassword string, c Client) (User, error) {
	if s.mail == nil {
		return User{}, ErrMailDisabled
	}
	if secret == "" || !validSecret(secret) {
		_, err := s.takeToken(ctx, secret, PurposeReset)
		return User{}, err
	}
	if err := validatePassword("password", newPassword); err != nil {
		return User{}, err
	}
	// Hash first: a busy hasher must not spend the token.
	h, err := s.hasher.Hash(ctx, newPassword)
	if err != nil {
		return User{}, err
	}
	tok, err := s.takeToken(ctx, secret, PurposeReset)
	if err != nil {
		return User{}, err
	}
	up := UserPatch{PasswordHash: &h}
	cur, err := s.users.ByID(ctx, tok.UserID)
	if err != nil {
		if errors.Is(err, ErrUserNotFound) {
			return User{}, ErrInvalidToken
		}
		return User{}, err
	}
	if NormalizeEmail(cur.Email) == NormalizeEmail(tok.Email) && !cur.EmailVerified {
		yes := true
		up.EmailVerified = &yes
	}
	u, err := s.users.Update(ctx, tok.UserID, up, s.now())
	if err != nil {
		s.userWriteFailed(ctx, tok.UserID, err)
		if errors.Is(err, ErrUserNotFound) {
			return User{}, ErrInvalidToken
		}
		return User{}, err
	}
	rev := Revocation{Users: []string{u.ID}}
	ended, err := s.sessions.DeleteByUser(ctx, u.ID, "")
	rev.Sessions = ended
	s.revoke(ctx, rev)
	if err != nil {
		return User{}, err
	}
	if err := s.mail.tokens.DeleteByUser(ctx, u.ID, PurposeReset); err != nil {
		s.log.WarnContext(ctx, "password reset: drop other links", "user", u.ID, "err", err)
	}
	// Whoever holds the mailbox may sign in again at once.
	if err := s.throttleReset(ctx, accountKey(NormalizeEmail(u.Email))); err != nil {
		s.log.WarnContext(ctx, "password reset: reset the sign-in throttle", "user", u.ID, "err", err)
	}
	s.event(ctx, Event{Type: EventPasswordReset, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c, Detail: map[string]any{"sessionsEnded": len(ended)}})
	return u, nil
}

// SweepTokens deletes expired tokens.
func (s *Service) sweepTokens(ctx context.Context) error {
	if s.mail == nil {
		return nil
	}
	return s.mail.tokens.DeleteExpired(ctx, s.now())
}
