package account

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"

	"github.com/acme/platform/services/auth/internal/mailer"
)

// Address changes and verification mails. A change answers the same
// whether or not the new address belongs to another account, and every such
// mail is counted per account and per address written to
// (Config.EmailAccount, Config.EmailTarget), so a signed-in user can
// neither probe which addresses have accounts nor flood a mailbox.
//
// A change takes effect once confirmed by mail. Proven by the current
// password (UpdateSelf), only the new address confirms (VerifyEmail).
// Without it, the change is pending until both the current and the new
// address confirm (ConfirmEmailChange, VerifyEmail), in either order: a
// stolen session alone cannot move the account, since its thief does not
// read the current mailbox. One pending change per user: a token
// (PurposeEmailChange, ID changeKey(user)) holding the new address and a
// random nonce; each side's link is a one-time token bound to the nonce,
// and a new request replaces the pending change, so older links confirm
// nothing.

// The sides of a pending address change.
const (
	ChangeSideCurrent = "current"
	ChangeSideNew     = "new"
)

var changeSides = []string{ChangeSideCurrent, ChangeSideNew}

// changeKey is the ID of userID's pending address change.
func changeKey(userID string) string { return "email-change:" + userID }

// sendEmailChange does, in the background, what an address change of u to
// newEmail asks for, so that the request is answered alike (and after the
// same work) whether or not the address is taken: u's earlier verification
// links and pending change stop working; if another account has newEmail,
// that address is told someone asked for it (email_in_use) and gets no
// link, otherwise a verification link goes to it. u's current address is
// told of the change (email_changed) when the password proved it
// (proven), and otherwise gets the link that confirms the change from it
// (email_change_confirm), whichever the new address is: the change then
// waits for both links.
//
// The pending change itself is stored (or, proven, removed) before the
// request is answered, the same work whichever the address, so that
// requests replace each other in the order they were answered whatever
// their background work's order.
func (s *Service) sendEmailChange(ctx context.Context, u User, newEmail string, proven bool) error {
	var change string
	ttl := s.mail.cfg.VerifyTTL
	if proven {
		if err := s.mail.tokens.DeleteByUser(ctx, u.ID, PurposeEmailChange); err != nil {
			return err
		}
	} else {
		change = hex.EncodeToString(randomBytes(16))
		t := s.now()
		if err := s.mail.tokens.Put(ctx, Token{ID: changeKey(u.ID), Purpose: PurposeEmailChange, UserID: u.ID, Email: newEmail,
			Data: []byte(u.Email), Change: change, CreatedAt: t, ExpiresAt: t.Add(ttl)}); err != nil {
			return err
		}
	}
	return s.background(ctx, func(ctx context.Context) {
		for _, p := range []string{PurposeVerify, PurposeEmailChangeCurrent} {
			if err := s.mail.tokens.DeleteByUser(ctx, u.ID, p); err != nil {
				s.log.WarnContext(ctx, "address change: drop older links", "user", u.ID, "err", err)
				return
			}
		}
		other, err := s.users.ByEmail(ctx, NormalizeEmail(newEmail))
		switch {
		case err == nil && other.ID != u.ID:
			s.log.InfoContext(ctx, "address change: the address belongs to another account", "user", u.ID)
			if err := s.mail.mailer.Send(ctx, mailer.EmailInUse, other.Email, mailer.Data{Name: other.FullName, Email: other.Email}); err != nil {
				s.log.WarnContext(ctx, "address change: tell the address's owner", "user", u.ID, "err", err)
			}
		case err != nil && !errors.Is(err, ErrUserNotFound):
			s.log.WarnContext(ctx, "address change: look the address up", "user", u.ID, "err", err)
			return
		default:
			if err := s.sendChangeLink(ctx, u, newEmail, PurposeVerify, mailer.Verify, "verify", ttl, change, ""); err != nil {
				s.log.WarnContext(ctx, "address change: send the link", "user", u.ID, "err", err)
			}
		}
		if proven {
			if err := s.mail.mailer.Send(ctx, mailer.EmailChanged, u.Email, mailer.Data{Name: u.FullName, Email: u.Email, NewEmail: newEmail}); err != nil {
				s.log.WarnContext(ctx, "address change: tell the old address", "user", u.ID, "err", err)
			}
			return
		}
		if err := s.sendChangeLink(ctx, u, u.Email, PurposeEmailChangeCurrent, mailer.ConfirmEmailChange, "confirm-email-change", ttl, change, newEmail); err != nil {
			s.log.WarnContext(ctx, "address change: send the link to the current address", "user", u.ID, "err", err)
		}
	})
}

// ConfirmEmailChange spends the link sent to the current address of a
// pending address change: that side is confirmed, and the change takes
// effect if the new address confirmed already (done). ErrInvalidToken if
// the link is unknown, used, expired, or its change was replaced or the
// account's address changed since; ErrEmailTaken if the change was to
// take effect but another account has the address.
func (s *Service) ConfirmEmailChange(ctx context.Context, secret string, c Client) (u User, done bool, err error) {
	tok, cur, err := s.takeLink(ctx, secret, PurposeEmailChangeCurrent)
	if err != nil {
		return User{}, false, err
	}
	if NormalizeEmail(cur.Email) != NormalizeEmail(tok.Email) {
		return User{}, false, ErrInvalidToken // sent to an address the account no longer has
	}
	return s.confirmChange(ctx, cur, tok.Change, ChangeSideCurrent, c)
}

// confirmChange records that side of cur's pending change (nonce change)
// is confirmed; once both are, the one confirmation that saw both takes
// the change and applies it: the new address becomes cur's, verified.
func (s *Service) confirmChange(ctx context.Context, cur User, change, side string, c Client) (User, bool, error) {
	if change == "" {
		return User{}, false, ErrInvalidToken
	}
	key := changeKey(cur.ID)
	p, err := s.mail.tokens.Confirm(ctx, key, PurposeEmailChange, change, side, s.now())
	if err != nil {
		return User{}, false, err
	}
	if p.UserID != cur.ID {
		return User{}, false, ErrInvalidToken
	}
	for _, sd := range changeSides {
		if !slices.Contains(p.Confirmed, sd) {
			s.event(ctx, Event{Type: EventEmailChangeConfirmed, Actor: cur.ID, Target: cur.ID, TargetEmail: cur.Email, Client: c, Detail: map[string]any{"side": side}})
			return cur, false, nil
		}
	}
	p, err = s.mail.tokens.TakeConfirmed(ctx, key, PurposeEmailChange, change, changeSides, s.now())
	if err != nil {
		return User{}, false, err
	}
	if NormalizeEmail(string(p.Data)) != NormalizeEmail(cur.Email) {
		return User{}, false, ErrInvalidToken // the account's address changed since the request
	}
	u, err := s.setVerifiedAddress(ctx, cur, p.Email, c)
	return u, err == nil, err
}

// notifyEmailChange tells u's current address that newEmail was asked for
// (an administrator's change).
func (s *Service) notifyEmailChange(ctx context.Context, u User, newEmail string) {
	err := s.background(ctx, func(ctx context.Context) {
		if err := s.mail.mailer.Send(ctx, mailer.EmailChanged, u.Email, mailer.Data{Name: u.FullName, Email: u.Email, NewEmail: newEmail}); err != nil {
			s.log.WarnContext(ctx, "address change: tell the old address", "user", u.ID, "err", err)
		}
	})
	if err != nil {
		s.log.WarnContext(ctx, "address change: notice not sent", "user", u.ID, "err", err)
	}
}

// emailThrottleKeys are the throttle keys of a mail about userID's address
// to target: the account's and the target address's.
func (s *Service) emailThrottleKeys(userID, target string) []throttleKey {
	sum := sha256.Sum256([]byte(NormalizeEmail(target)))
	return []throttleKey{
		{"email-user:" + userID, s.cfg.EmailAccount},
		{"email-to:" + hex.EncodeToString(sum[:16]), s.cfg.EmailTarget},
	}
}

// checkEmailThrottle returns ThrottledError if any of keys is locked; it
// counts nothing (countEmail does), so a request refused for another reason
// (a wrong password) spends no mail.
func (s *Service) checkEmailThrottle(ctx context.Context, keys []throttleKey) error {
	var names []string
	for _, k := range keys {
		if k.rule.Max > 0 {
			names = append(names, k.key)
		}
	}
	if len(names) == 0 {
		return nil
	}
	_, err := s.checkThrottle(ctx, names)
	return emailThrottled(err)
}

// countEmail counts one mail request under each of keys; ThrottledError
// when one is used up.
func (s *Service) countEmail(ctx context.Context, keys []throttleKey) error {
	return emailThrottled(s.throttleFail(ctx, keys...))
}

func emailThrottled(err error) error {
	var te *ThrottledError
	if errors.As(err, &te) {
		te.What = "too many e-mail address changes or verification mails"
	}
	return err
}
