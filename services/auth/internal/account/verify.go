package account

import (
	"context"
	"errors"

	"github.com/acme/platform/services/auth/internal/mailer"
)

// MailOn reports whether the mail flows are configured.
func (s *Service) MailOn() bool { return s.mail != nil }

// sendVerification mails u a link that verifies address (u's own, or the
// one u asked to change to) in the background. Earlier verification links
// of u stop working. Failures are logged: the user can ask again.
func (s *Service) sendVerification(ctx context.Context, u User, address string) error {
	return s.background(ctx, func(ctx context.Context) {
		if err := s.mail.tokens.DeleteByUser(ctx, u.ID, PurposeVerify); err != nil {
			s.log.WarnContext(ctx, "verification: drop older links", "user", u.ID, "err", err)
			return
		}
		if err := s.sendLink(ctx, u, address, PurposeVerify, mailer.Verify, "verify", s.mail.cfg.VerifyTTL); err != nil {
			s.log.WarnContext(ctx, "verification: send the link", "user", u.ID, "err", err)
		}
	})
}

// ResendVerification mails the signed-in user a new link for their current
// address; ErrMailDisabled, ErrAlreadyVerified, or ThrottledError past the
// account's or the address's limit of such mails (EmailAccount,
// EmailTarget, shared with address changes).
func (s *Service) ResendVerification(ctx context.Context, userID string) error {
	if s.mail == nil {
		return ErrMailDisabled
	}
	u, err := s.users.ByID(ctx, userID)
	if errors.Is(err, ErrUserNotFound) {
		return ErrUserGone
	}
	if err != nil {
		return err
	}
	if u.EmailVerified {
		return ErrAlreadyVerified
	}
	keys := s.emailThrottleKeys(u.ID, u.Email)
	if err := s.checkEmailThrottle(ctx, keys); err != nil {
		return err
	}
	if err := s.countEmail(ctx, keys); err != nil {
		return err
	}
	return s.sendVerification(ctx, u, u.Email)
}

// VerifyEmail spends a verification link: the address it was sent to
// becomes the user's verified address (which is how an address change
// proven by the password takes effect; done). A link bound to a pending
// change confirms its new side instead (confirmChange): done only once the
// current address confirmed too. ErrEmailTaken if another account took
// the address since.
func (s *Service) VerifyEmail(ctx context.Context, secret string, c Client) (User, bool, error) {
	tok, cur, err := s.takeLink(ctx, secret, PurposeVerify)
	if err != nil {
		return User{}, false, err
	}
	if tok.Change != "" {
		return s.confirmChange(ctx, cur, tok.Change, ChangeSideNew, c)
	}
	u, err := s.setVerifiedAddress(ctx, cur, tok.Email, c)
	return u, err == nil, err
}

// setVerifiedAddress makes email, which a mailed link proved, cur's
// verified address: the user's cached views end on every replica, and the
// trail records a change of address, or the verification of the one cur
// has. ErrInvalidToken when the user is gone.
func (s *Service) setVerifiedAddress(ctx context.Context, cur User, email string, c Client) (User, error) {
	yes := true
	up := UserPatch{EmailVerified: &yes}
	changed := cur.Email != email
	if changed {
		up.Email = &email
	}
	u, err := s.users.Update(ctx, cur.ID, up, s.now())
	if err != nil {
		s.userWriteFailed(ctx, cur.ID, err)
		if errors.Is(err, ErrUserNotFound) {
			return User{}, ErrInvalidToken
		}
		return User{}, err
	}
	s.revoke(ctx, Revocation{Users: []string{u.ID}})
	if changed {
		s.event(ctx, Event{Type: EventEmailChanged, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c, Detail: map[string]any{"from": cur.Email}})
	} else {
		s.event(ctx, Event{Type: EventEmailVerified, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c})
	}
	return u, nil
}
