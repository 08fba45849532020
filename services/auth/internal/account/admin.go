package account

import (
	"context"
	"encoding/base64"
	"errors"
	"time"
)

// NewUserInput is an administrator's request to create a user.
type NewUserInput struct {
	Email     string
	Password  string
	FullName  string
	EDV       string
	Sector    *string
	AvatarURL *string
	Role      string // "" means user
	// Verified marks the address verified (the bootstrap administrator's,
	// set by the operator); otherwise, with mail on, a link is sent.
	Verified bool
}

// CreateUser validates and stores a new user; ErrEmailTaken.
func (s *Service) CreateUser(ctx context.Context, in NewUserInput) (User, error) {
	var up UserPatch
	if err := s.validatePatch(&up, &in.Email, &in.FullName, in.Sector, in.AvatarURL, &in.EDV); err != nil {
		return User{}, err
	}
	if in.Role == "" {
		in.Role = RoleUser
	}
	if err := validateRole("roleName", in.Role); err != nil {
		return User{}, err
	}
	if err := validatePassword("password", in.Password); err != nil {
		return User{}, err
	}
	h, err := s.hasher.Hash(ctx, in.Password)
	if err != nil {
		return User{}, err
	}
	t := s.now()
	u := User{
		Email:         *up.Email,
		FullName:      *up.FullName,
		EDV:           *up.EDV,
		Sector:        emptyToNil(up.Sector),
		AvatarURL:     emptyToNil(up.AvatarURL),
		Role:          in.Role,
		PasswordHash:  h,
		EmailVerified: in.Verified,
		CreatedAt:     t,
		UpdatedAt:     t,
	}
	u, err = s.users.Create(ctx, u)
	if err != nil {
		return User{}, err
	}
	if s.mail != nil && !u.EmailVerified {
		if err := s.sendVerification(ctx, u, u.Email); err != nil {
			s.log.WarnContext(ctx, "new user: verification link not sent", "user", u.ID, "err", err)
		}
	}
	return u, nil
}

func emptyToNil(p *string) *string {
	if p == nil || *p == "" {
		return nil
	}
	return p
}

// User returns a user by id; ErrUserNotFound.
func (s *Service) User(ctx context.Context, id string) (User, error) {
	return s.users.ByID(ctx, id)
}

// ListUsers returns page (from 1) of limit users and the total.
func (s *Service) ListUsers(ctx context.Context, page, limit int) ([]User, int64, error) {
	if page < 1 {
		return nil, 0, invalid("page", "invalid_value", "page must be a whole number of at least 1")
	}
	if limit < 1 || limit > maxPageSize {
		return nil, 0, invalid("limit", "invalid_value", "limit must be a whole number from 1 to 100")
	}
	if page > (1<<31)/limit {
		return nil, 0, invalid("page", "invalid_value", "page is too large")
	}
	return s.users.List(ctx, (page-1)*limit, limit)
}

// AdminPatch is what an administrator may change; nil is unchanged.
type AdminPatch struct {
	Email       *string
	FullName    *string
	Sector      *string
	EDV         *string
	AvatarURL   *string
	Role        *string
	NewPassword *string
}

// UpdateUser edits any user. A new password ends all of that user's
// sessions. Cached identities of the user are revoked in every case.
func (s *Service) UpdateUser(ctx context.Context, actorID, id string, p AdminPatch) (User, error) {
	up, err := s.checkAdminPatch(actorID, id, p)
	if err != nil {
		return User{}, err
	}
	before, err := s.users.ByID(ctx, id)
	if err != nil {
		return User{}, err
	}
	// An administrator's change of address applies at once; the new
	// address is unverified until its owner opens the link sent to it, and
	// the old address is told.
	emailChanged := up.Email != nil && *up.Email != before.Email
	if emailChanged && NormalizeEmail(*up.Email) != NormalizeEmail(before.Email) {
		no := false
		up.EmailVerified = &no
	}
	if p.NewPassword != nil {
		h, err := s.hasher.Hash(ctx, *p.NewPassword)
		if err != nil {
			return User{}, err
		}
		up.PasswordHash = &h
	}
	u, err := s.users.Update(ctx, id, up, s.now())
	if err != nil {
		s.userWriteFailed(ctx, id, err)
		return User{}, err
	}
	// The user changed: every cache learns it before the answer, whatever
	// fails below.
	rev := Revocation{Users: []string{u.ID}}
	if up.PasswordHash != nil {
		ended, err := s.sessions.DeleteByUser(ctx, u.ID, "")
		rev.Sessions = ended
		if err != nil {
			s.revoke(ctx, rev)
			return User{}, err
		}
	}
	s.revoke(ctx, rev)
	if emailChanged && s.mail != nil && up.EmailVerified != nil {
		if err := s.sendVerification(ctx, u, u.Email); err != nil {
			s.log.WarnContext(ctx, "changed address: verification link not sent", "user", u.ID, "err", err)
		}
		s.notifyEmailChange(ctx, before, u.Email)
	}
	return u, nil
}

// checkAdminPatch validates an administrator's edit of user id (before
// any store is read) and returns the changes to the shared fields and the
// role.
func (s *Service) checkAdminPatch(actorID, id string, p AdminPatch) (UserPatch, error) {
	var up UserPatch
	if p.Email == nil && p.FullName == nil && p.Sector == nil && p.EDV == nil && p.AvatarURL == nil && p.Role == nil && p.NewPassword == nil {
		return up, ErrEmptyPatch
	}
	if err := s.validatePatch(&up, p.Email, p.FullName, p.Sector, p.AvatarURL, p.EDV); err != nil {
		return up, err
	}
	if p.Role != nil {
		if err := validateRole("roleName", *p.Role); err != nil {
			return up, err
		}
		if id == actorID && *p.Role != RoleAdmin {
			return up, ErrSelfDemote
		}
		up.Role = p.Role
	}
	if p.NewPassword != nil {
		if err := validatePassword("password.new", *p.NewPassword); err != nil {
			return up, err
		}
	}
	return up, nil
}

// DeleteUser removes a user and ends their sessions.
func (s *Service) DeleteUser(ctx context.Context, actorID, id string) error {
	if id == actorID {
		return ErrSelfDelete
	}
	u, err := s.users.ByID(ctx, id)
	if err != nil {
		return err
	}
	if err := s.users.Delete(ctx, u.ID); err != nil {
		s.userWriteFailed(ctx, u.ID, err)
		return err
	}
	ended, err := s.sessions.DeleteByUser(ctx, u.ID, "")
	if s.keys != nil && err == nil {
		var keys []string
		keys, err = s.keys.DeleteByUser(ctx, u.ID)
		ended = append(ended, keys...)
	}
	s.revoke(ctx, Revocation{Sessions: ended, Users: []string{u.ID}})
	if s.passkeys != nil {
		if _, err := s.passkeys.store.DeleteByUser(ctx, u.ID); err != nil {
			s.log.WarnContext(ctx, "delete the user's passkeys", "user", u.ID, "err", err)
		}
	}
	if s.mfa != nil {
		if err := s.mfa.factors.Delete(ctx, u.ID); err != nil {
			s.log.WarnContext(ctx, "delete the user's second factor", "user", u.ID, "err", err)
		}
	}
	if s.userEvents != nil {
		// The user is gone whatever happens here: a failure is logged for
		// the operators (the event can be published again by hand).
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if perr := s.userEvents.Deleted(ectx, u.ID); perr != nil {
			s.log.ErrorContext(ctx, "announcing a user's deletion failed: their files stay until it is published", "user", u.ID, "err", perr)
		}
	}
	return err
}

// EnsureAdmin creates the first administrator when no user has email. If pw
// is empty a random password is generated and returned (and must be shown
// once). created is false when the user exists, also when another replica
// created it at the same moment.
func (s *Service) EnsureAdmin(ctx context.Context, email, pw string) (created bool, generated string, err error) {
	if _, err := s.users.ByEmail(ctx, NormalizeEmail(email)); err == nil {
		return false, "", nil
	} else if !errors.Is(err, ErrUserNotFound) {
		return false, "", err
	}
	if pw == "" {
		// 15 random bytes are exactly 20 base64 characters.
		pw = base64.RawURLEncoding.EncodeToString(randomBytes(15))
		generated = pw
	}
	_, err = s.CreateUser(ctx, NewUserInput{Email: email, Password: pw, FullName: "Administrator", EDV: "admin", Role: RoleAdmin, Verified: true})
	if errors.Is(err, ErrEmailTaken) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	return true, generated, nil
}
