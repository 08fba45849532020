package account

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/acme/platform/services/auth/internal/mailer"
)

// Address changes and verification mails. A change needs the current
// password (UpdateSelf), answers the same whether or not the new address
// belongs to another account, and every such mail is counted per account
// and per address written to (Config.EmailAccount, Config.EmailTarget), so
// a signed-in user can neither probe which addresses have accounts nor
// flood a mailbox.

// sendEmailChange does, in the background, what an address change of u to
// newEmail asks for, so that the request is answered alike (and after the
// same work) whether or not the address is taken: u's earlier verification
// links stop working; if another account has newEmail, that address is told
// someone asked for it (email_in_use) and nothing else happens, otherwise a
// verification link goes to it; in both cases u's current address is told
// of the request (email_changed).
func (s *Service) sendEmailChange(ctx context.Context, u User, newEmail string) error {
	return s.background(ctx, func(ctx context.Context) {
		if err := s.mail.tokens.DeleteByUser(ctx, u.ID, PurposeVerify); err != nil {
			s.log.WarnContext(ctx, "address change: drop older links", "user", u.ID, "err", err)
			return
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
			if err := s.sendLink(ctx, u, newEmail, PurposeVerify, mailer.Verify, "verify", s.mail.cfg.VerifyTTL); err != nil {
				s.log.WarnContext(ctx, "address change: send the link", "user", u.ID, "err", err)
			}
		}
		if err := s.mail.mailer.Send(ctx, mailer.EmailChanged, u.Email, mailer.Data{Name: u.FullName, Email: u.Email, NewEmail: newEmail}); err != nil {
			s.log.WarnContext(ctx, "address change: tell the old address", "user", u.ID, "err", err)
		}
	})
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
