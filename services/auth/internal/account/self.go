package account

import (
	"context"
	"errors"

	"github.com/acme/platform/services/auth/internal/password"
)

// Me returns the signed-in user; ErrUserGone if the account was deleted.
// It may come from the user cache (without its password hash).
func (s *Service) Me(ctx context.Context, userID string) (User, error) {
	u, err := s.userByID(ctx, userID)
	if errors.Is(err, ErrUserNotFound) {
		return User{}, ErrUserGone
	}
	return u, err
}

// PasswordChange is the password property of a self-edit.
type PasswordChange struct {
	Old *string
	New *string
}

// SelfPatch is what a user may change about themselves; nil is unchanged.
// CurrentPassword, optional, proves an address change (Password.Old does
// too); without it the change is confirmed by mail from both addresses.
type SelfPatch struct {
	Email           *string
	FullName        *string
	Sector          *string
	AvatarURL       *string
	Password        *PasswordChange
	CurrentPassword *string
}

// NewSession is a session opened by an operation other than sign-in.
type NewSession struct {
	Secret  string
	Session Session
}

// UpdateSelf edits the caller. A password change needs the old password,
// ends every session of the user and opens a new one for the caller, which
// is returned. An address change is throttled per account and per new
// address; with mail on it answers the same whether or not the address is
// taken (the outcome goes by mail) and takes effect once confirmed: from
// the new address if the current password was sent (and right), from both
// the current and the new address otherwise. With mail off it applies at
// once and needs the current password.
func (s *Service) UpdateSelf(ctx context.Context, c Caller, p SelfPatch) (User, *NewSession, error) {
	up, err := s.checkSelfPatch(p)
	if err != nil {
		return User{}, nil, err
	}
	// From the store, not the cache: the password hash is needed.
	u, err := s.users.ByID(ctx, c.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return User{}, nil, ErrUserGone
	}
	if err != nil {
		return User{}, nil, err
	}
	emailChange := up.Email != nil && *up.Email != u.Email
	proof, err := selfProof(p, emailChange, s.mail != nil)
	if err != nil {
		return User{}, nil, err
	}
	var emailKeys []throttleKey
	if emailChange {
		emailKeys = s.emailThrottleKeys(u.ID, *up.Email)
	}
	if proof != nil {
		if err := s.verifyProof(ctx, u, *proof, emailKeys); err != nil {
			return User{}, nil, err
		}
	}
	if p.Password != nil {
		h, err := s.hasher.Hash(ctx, *p.Password.New)
		if err != nil {
			return User{}, nil, err
		}
		up.PasswordHash = &h
	}
	if emailChange {
		if err := s.countEmail(ctx, emailKeys); err != nil {
			return User{}, nil, err
		}
	}
	if s.mail != nil && up.Email != nil {
		done, err := s.deferEmailChange(ctx, c, u, &up, emailChange, proof != nil)
		if err != nil {
			return User{}, nil, err
		}
		if done {
			return u, nil, nil
		}
	}
	return s.saveSelf(ctx, c, u.ID, up)
}

// checkSelfPatch validates a self-edit's fields (before any store is
// read) and returns the changes to the shared fields.
func (s *Service) checkSelfPatch(p SelfPatch) (UserPatch, error) {
	var up UserPatch
	if p.Email == nil && p.FullName == nil && p.Sector == nil && p.AvatarURL == nil && p.Password == nil {
		return up, ErrEmptyPatch
	}
	if p.CurrentPassword != nil && len(*p.CurrentPassword) > password.MaxLength {
		return up, invalid("currentPassword", "invalid_password", "currentPassword must be at most 1024 bytes")
	}
	if err := s.validatePatch(&up, p.Email, p.FullName, p.Sector, p.AvatarURL, nil); err != nil {
		return up, err
	}
	if p.Password != nil {
		return up, checkPasswordChange(*p.Password)
	}
	return up, nil
}

// checkPasswordChange validates the password property of a self-edit.
func checkPasswordChange(pc PasswordChange) error {
	if pc.Old == nil || *pc.Old == "" {
		return invalid("password.old", "missing_field", "password.old is required to change the password")
	}
	if pc.New == nil {
		return invalid("password.new", "missing_field", "password.new is required to change the password")
	}
	if err := validatePassword("password.new", *pc.New); err != nil {
		return err
	}
	if len(*pc.Old) > password.MaxLength {
		return ErrWrongPassword
	}
	return nil
}

// selfProof is the password a self-edit must prove, nil when none. An
// address change (any difference from the stored address) may be proven by
// the current password (currentPassword, or password.old in a request
// that changes the password too; an empty one counts as not sent). With
// mail on it need not be: the change then waits for a confirmation from
// the current address as well as the new one, which a stolen session
// cannot give. With mail off nothing could confirm it, so the password is
// required.
func selfProof(p SelfPatch, emailChange, mailOn bool) (*string, error) {
	if !emailChange {
		if p.Password != nil {
			return p.Password.Old, nil
		}
		return nil, nil
	}
	proof := p.CurrentPassword
	if p.Password != nil {
		if proof != nil && *proof != "" && *proof != *p.Password.Old {
			return nil, invalid("currentPassword", "invalid_value", "currentPassword and password.old must be the same password")
		}
		proof = p.Password.Old
	}
	if proof == nil || *proof == "" {
		if mailOn {
			return nil, nil
		}
		return nil, invalid("currentPassword", "missing_field", "currentPassword is required to change the e-mail address: this platform sends no e-mail, so nothing else can confirm the change")
	}
	return proof, nil
}

// verifyProof checks the current password of u. Guessing it through a
// stolen session counts against the account like failed sign-ins: the
// attempt is admitted before the hash (see SignIn); a wrong password keeps
// its ticket (it counts), anything else gives it back. An address change
// (emailKeys) must also be within its own limits.
func (s *Service) verifyProof(ctx context.Context, u User, proof string, emailKeys []throttleKey) error {
	acct := accountKey(NormalizeEmail(u.Email))
	adm, err := s.admit(ctx, throttleKey{acct, s.cfg.Account})
	if err != nil {
		return err
	}
	if err := s.checkEmailThrottle(ctx, emailKeys); err != nil {
		s.release(ctx, adm)
		return err
	}
	ok, _, err := s.hasher.Verify(ctx, proof, u.PasswordHash)
	if err != nil && !errors.Is(err, password.ErrMalformedHash) {
		s.release(ctx, adm)
		return err
	}
	if !ok {
		return ErrWrongPassword
	}
	s.release(ctx, adm)
	return nil
}

// deferEmailChange takes the address out of up when mail is on: the new
// address takes effect only once confirmed by mail (sendEmailChange; from
// both addresses unless proven by the password). Whether the new address
// belongs to another account is found out in the background: the answer
// is the same either way. It reports whether nothing is left to change.
func (s *Service) deferEmailChange(ctx context.Context, c Caller, u User, up *UserPatch, emailChange, proven bool) (bool, error) {
	pending := *up.Email
	up.Email = nil
	if emailChange {
		if err := s.sendEmailChange(ctx, u, pending, proven); err != nil {
			return false, err
		}
		confirm := "both"
		if proven {
			confirm = "new"
		}
		s.event(ctx, Event{Type: EventEmailChangeAsked, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c.Client, Detail: map[string]any{"to": pending, "confirm": confirm}})
	}
	return up.Empty(), nil
}

// saveSelf writes a checked self-edit of user id, records it, and after a
// password change ends every session of the user and opens a new one for
// the caller.
func (s *Service) saveSelf(ctx context.Context, c Caller, id string, up UserPatch) (User, *NewSession, error) {
	u, err := s.users.Update(ctx, id, up, s.now())
	if err != nil {
		s.userWriteFailed(ctx, id, err)
		if errors.Is(err, ErrUserNotFound) {
			return User{}, nil, ErrUserGone
		}
		return User{}, nil, err
	}
	if up.PasswordHash != nil {
		s.event(ctx, Event{Type: EventPasswordChanged, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c.Client})
	}
	if up.Email != nil && *up.Email != "" {
		s.event(ctx, Event{Type: EventEmailChanged, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c.Client})
	}
	// The user changed: every cache (this replica's, the other replicas',
	// the gateways') learns it before the answer, whatever fails below.
	rev := Revocation{Users: []string{u.ID}}
	var ns *NewSession
	if up.PasswordHash != nil {
		ended, err := s.sessions.DeleteByUser(ctx, u.ID, "")
		rev.Sessions = ended
		if err != nil {
			s.revoke(ctx, rev)
			return User{}, nil, err
		}
		secret, sess, err := s.newSession(ctx, u.ID, c.Client, false)
		if err != nil {
			s.revoke(ctx, rev)
			return User{}, nil, err
		}
		ns = &NewSession{Secret: secret, Session: sess}
	}
	s.revoke(ctx, rev)
	return u, ns, nil
}
