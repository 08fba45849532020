// Enrolling, reviewing and removing a second factor (TOTP and recovery
// codes); mfa.go has the sign-in with one.

package account

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"strings"

	"github.com/acme/platform/services/auth/internal/password"
	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"
)

// TOTPEnrolment is a started enrolment: the secret in text, as an
// otpauth:// URI and as a QR code (PNG) of the URI.
type TOTPEnrolment struct {
	Secret string
	URI    string
	QRCode []byte
}

// MFAStatus describes a user's second factor.
type MFAStatus struct {
	Enabled           bool
	RecoveryCodesLeft int
	Passkeys          int  // registered passkeys
	Required          bool // an administrator who must enrol (TOTP or a passkey)
	Password          bool // the account has a password (else it may set one by a mailed code)
}

// MFAStatus returns the caller's second factor state.
func (s *Service) MFAStatus(ctx context.Context, userID string) (MFAStatus, error) {
	if s.mfa == nil {
		return MFAStatus{}, ErrMFADisabled
	}
	u, err := s.users.ByID(ctx, userID)
	if errors.Is(err, ErrUserNotFound) {
		return MFAStatus{}, ErrUserGone
	}
	if err != nil {
		return MFAStatus{}, err
	}
	st := MFAStatus{Enabled: u.MFAEnabled, Required: s.AdminNeedsMFA(u), Password: u.PasswordHash != ""}
	if u.MFAEnabled {
		f, err := s.mfa.factors.Get(ctx, userID)
		if err != nil && !errors.Is(err, ErrFactorNotFound) {
			return MFAStatus{}, err
		}
		st.RecoveryCodesLeft = len(f.Recovery)
	}
	if s.passkeys != nil {
		list, err := s.passkeys.store.ListByUser(ctx, userID)
		if err != nil {
			return MFAStatus{}, err
		}
		st.Passkeys = len(list)
		st.Required = st.Required && st.Passkeys == 0
	}
	return st, nil
}

// ErrMFADisabled: the second factor is not configured.
var ErrMFADisabled = errors.New("second factors are not available")

// StartTOTP begins (or restarts) the caller's enrolment.
func (s *Service) StartTOTP(ctx context.Context, c Caller) (TOTPEnrolment, error) {
	if s.mfa == nil {
		return TOTPEnrolment{}, ErrMFADisabled
	}
	u, err := s.users.ByID(ctx, c.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return TOTPEnrolment{}, ErrUserGone
	}
	if err != nil {
		return TOTPEnrolment{}, err
	}
	if u.MFAEnabled {
		return TOTPEnrolment{}, ErrMFAEnabled
	}
	key, err := totp.Generate(totp.GenerateOpts{Issuer: s.mfa.cfg.Issuer, AccountName: u.Email, Period: totpPeriod, Digits: totpDigits, Algorithm: otp.AlgorithmSHA1, SecretSize: 20})
	if err != nil {
		return TOTPEnrolment{}, err
	}
	img, err := key.Image(qrCodePixels, qrCodePixels)
	if err != nil {
		return TOTPEnrolment{}, err
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return TOTPEnrolment{}, err
	}
	if err := s.mfa.factors.Begin(ctx, Factor{UserID: u.ID, Secret: s.mfa.seal(u.ID, key.Secret()), CreatedAt: s.now()}); err != nil {
		return TOTPEnrolment{}, err
	}
	return TOTPEnrolment{Secret: key.Secret(), URI: key.URL(), QRCode: buf.Bytes()}, nil
}

// ConfirmTOTP ends the enrolment with a first code and returns the
// recovery codes (shown once: only their hashes are kept).
func (s *Service) ConfirmTOTP(ctx context.Context, c Caller, code string) ([]string, error) {
	if s.mfa == nil {
		return nil, ErrMFADisabled
	}
	if code == "" {
		return nil, invalid("code", "missing_field", "code is required")
	}
	f, err := s.mfa.factors.Get(ctx, c.UserID)
	if errors.Is(err, ErrFactorNotFound) {
		return nil, ErrNoEnrolment
	}
	if err != nil {
		return nil, err
	}
	if f.Confirmed {
		return nil, ErrMFAEnabled
	}
	secret, err := s.mfa.open(c.UserID, f.Secret)
	if err != nil {
		return nil, err
	}
	step, ok := s.matchTOTP(secret, strings.TrimSpace(code))
	if !ok {
		return nil, ErrInvalidCode
	}
	codes := make([]string, recoveryCount)
	hashes := make([]string, recoveryCount)
	for i := range codes {
		codes[i] = newRecoveryCode()
		hashes[i] = hashRecovery(codes[i])
	}
	if err := s.mfa.factors.Confirm(ctx, c.UserID, hashes, step); err != nil {
		return nil, err
	}
	yes := true
	u, err := s.users.Update(ctx, c.UserID, UserPatch{MFAEnabled: &yes}, s.now())
	if err != nil {
		s.userWriteFailed(ctx, c.UserID, err)
		if errors.Is(err, ErrUserNotFound) {
			return nil, ErrUserGone
		}
		return nil, err
	}
	s.revoke(ctx, Revocation{Users: []string{u.ID}})
	s.event(ctx, Event{Type: EventMFAEnabled, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c.Client})
	return codes, nil
}

// DisableTOTP removes the caller's factor; it needs the password and a
// code (TOTP or recovery). Failures count against the account's sign-in
// throttle.
func (s *Service) DisableTOTP(ctx context.Context, c Caller, pw, code string) error {
	if s.mfa == nil {
		return ErrMFADisabled
	}
	if pw == "" {
		return invalid("password", "missing_field", "password is required")
	}
	if code == "" {
		return invalid("code", "missing_field", "code is required")
	}
	u, err := s.users.ByID(ctx, c.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return ErrUserGone
	}
	if err != nil {
		return err
	}
	if !u.MFAEnabled {
		return ErrMFANotEnabled
	}
	// Admitted before the hash (see SignIn): a wrong password or code
	// keeps the ticket (it counts), anything else gives it back.
	acct := accountKey(NormalizeEmail(u.Email))
	adm, err := s.admit(ctx, throttleKey{acct, s.cfg.Account})
	if err != nil {
		return err
	}
	ok := false
	if len(pw) <= password.MaxLength {
		ok, _, err = s.hasher.Verify(ctx, pw, u.PasswordHash)
		if err != nil && !errors.Is(err, password.ErrMalformedHash) {
			s.release(ctx, adm)
			return err
		}
	}
	if !ok {
		return ErrWrongPassword
	}
	if _, err := s.useCode(ctx, u.ID, code); err != nil {
		if !errors.Is(err, ErrInvalidCode) {
			s.release(ctx, adm)
		}
		return err
	}
	s.release(ctx, adm)
	return s.dropFactor(ctx, u, Event{Type: EventMFADisabled, Actor: u.ID, Client: c.Client})
}

// ResetMFA removes userID's TOTP factor and passkeys (an administrator's
// act, audited): the user signs in with the password alone and may enrol
// again.
func (s *Service) ResetMFA(ctx context.Context, actor Caller, userID string) error {
	if s.mfa == nil {
		return ErrMFADisabled
	}
	u, err := s.users.ByID(ctx, userID)
	if err != nil {
		return err
	}
	var removed int64
	if s.passkeys != nil {
		if removed, err = s.passkeys.store.DeleteByUser(ctx, u.ID); err != nil {
			return err
		}
	}
	return s.dropFactor(ctx, u, Event{Type: EventMFAReset, Actor: actor.UserID, Client: actor.Client,
		Detail: map[string]any{"hadFactor": u.MFAEnabled, "passkeysRemoved": removed}})
}

// dropFactor clears the user's flag first (sign-in stops asking for a
// code), then the factor.
func (s *Service) dropFactor(ctx context.Context, u User, ev Event) error {
	if u.MFAEnabled {
		no := false
		if _, err := s.users.Update(ctx, u.ID, UserPatch{MFAEnabled: &no}, s.now()); err != nil {
			s.userWriteFailed(ctx, u.ID, err)
			return err
		}
		s.revoke(ctx, Revocation{Users: []string{u.ID}})
	}
	if err := s.mfa.factors.Delete(ctx, u.ID); err != nil {
		return err
	}
	ev.Target, ev.TargetEmail = u.ID, u.Email
	s.event(ctx, ev)
	return nil
}
