package account

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/hotp"
)

// PurposeMFA is the token purpose of a sign-in's MFA challenge.
const PurposeMFA = "mfa"

// TOTP parameters (RFC 6238 defaults, what every authenticator app reads).
const (
	totpPeriod     = 30
	totpDigits     = otp.DigitsSix
	recoveryCount  = 10
	maxCodeLength  = 64
	qrCodePixels   = 240
	sealedPrefix   = "aesgcm:"
	plainPrefix    = "plain:"
	recoveryGroups = 5
)

// MFA errors.
var (
	ErrMFAEnabled       = errors.New("a second factor is already enabled")
	ErrMFANotEnabled    = errors.New("no second factor is enabled")
	ErrNoEnrolment      = errors.New("no enrolment was started")
	ErrInvalidCode      = errors.New("the code is wrong or was already used")
	ErrInvalidChallenge = errors.New("the challenge is unknown, expired or was already used")
	ErrFactorNotFound   = errors.New("no factor stored")
	ErrCodeUsed         = errors.New("code already used")
)

// MFARequired is SignIn's answer when the password was right and the user
// has a second factor: no session yet, Challenge is presented with a code
// to SignInMFA before ExpiresAt.
type MFARequired struct {
	Challenge string
	ExpiresAt time.Time
}

func (e *MFARequired) Error() string { return "a second factor is required" }

// Factor is a user's TOTP factor. Secret is as stored (sealed when a key
// is configured); Recovery holds the hex SHA-256 of the unspent recovery
// codes; LastStep is the last TOTP time step accepted (no replay).
type Factor struct {
	UserID    string
	Secret    string
	Confirmed bool
	Recovery  []string
	LastStep  int64
	CreatedAt time.Time
}

// FactorStore keeps one TOTP factor per user.
type FactorStore interface {
	// Begin stores f unconfirmed, replacing an unconfirmed one;
	// ErrMFAEnabled if a confirmed factor exists.
	Begin(ctx context.Context, f Factor) error
	// Get returns the user's factor; ErrFactorNotFound.
	Get(ctx context.Context, userID string) (Factor, error)
	// Confirm marks the unconfirmed factor confirmed with its recovery
	// hashes and first used step; ErrNoEnrolment if there is none.
	Confirm(ctx context.Context, userID string, recovery []string, step int64) error
	// UseStep records step as used if it is later than the last one;
	// ErrCodeUsed otherwise. Atomic.
	UseStep(ctx context.Context, userID string, step int64) error
	// UseRecovery removes the recovery hash; ErrCodeUsed if absent. Atomic.
	UseRecovery(ctx context.Context, userID, hash string) error
	// Delete removes the user's factor (none: no error).
	Delete(ctx context.Context, userID string) error
}

// MFAConfig are the second factor's policies.
type MFAConfig struct {
	Issuer       string        // shown by authenticator apps
	ChallengeTTL time.Duration // how long a sign-in challenge works
	// Key seals TOTP secrets at rest (AES-256-GCM); nil stores them plain.
	Key []byte
	// RequireAdmin: an administrator without a second factor acts as a
	// plain user until they enrol.
	RequireAdmin bool
}

type mfaState struct {
	factors FactorStore
	tokens  TokenStore
	cfg     MFAConfig
	aead    cipher.AEAD // nil: secrets are stored plain
}

// SetMFA turns on the second factor. tokens keeps sign-in challenges (the
// same store as mailed links, another purpose). Set it before serving.
func (s *Service) SetMFA(factors FactorStore, tokens TokenStore, cfg MFAConfig) error {
	if cfg.ChallengeTTL <= 0 {
		cfg.ChallengeTTL = 5 * time.Minute
	}
	if cfg.Issuer == "" {
		cfg.Issuer = "ACME Platform"
	}
	m := &mfaState{factors: factors, tokens: tokens, cfg: cfg}
	if len(cfg.Key) > 0 {
		k := sha256.Sum256(cfg.Key)
		b, err := aes.NewCipher(k[:])
		if err != nil {
			return err
		}
		if m.aead, err = cipher.NewGCM(b); err != nil {
			return err
		}
	}
	s.mfa = m
	return nil
}

// MFAOn reports whether the second factor is available.
func (s *Service) MFAOn() bool { return s.mfa != nil }

// EffectiveRole is the role a user acts with: while the platform requires
// MFA of administrators, an administrator acts as a plain user unless they
// have a TOTP factor (every sign-in asks for a code) or the session was
// opened with two factors (twoFactor: a passkey sign-in).
func (s *Service) EffectiveRole(u User, twoFactor bool) string {
	if u.Role == RoleAdmin && s.AdminNeedsMFA(u) && !twoFactor {
		return RoleUser
	}
	return u.Role
}

// AdminNeedsMFA: u is an administrator who must enrol a second factor.
func (s *Service) AdminNeedsMFA(u User) bool {
	return s.mfa != nil && s.mfa.cfg.RequireAdmin && u.Role == RoleAdmin && !u.MFAEnabled
}

func (m *mfaState) seal(userID, secret string) string {
	if m.aead == nil {
		return plainPrefix + secret
	}
	nonce := randomBytes(m.aead.NonceSize())
	ct := m.aead.Seal(nonce, nonce, []byte(secret), []byte(userID))
	return sealedPrefix + base64.RawStdEncoding.EncodeToString(ct)
}

var errSealed = errors.New("the stored TOTP secret cannot be opened (AUTH_MFA_KEY changed?)")

func (m *mfaState) open(userID, stored string) (string, error) {
	if v, ok := strings.CutPrefix(stored, plainPrefix); ok {
		return v, nil
	}
	v, ok := strings.CutPrefix(stored, sealedPrefix)
	if !ok || m.aead == nil {
		return "", errSealed
	}
	ct, err := base64.RawStdEncoding.DecodeString(v)
	if err != nil || len(ct) < m.aead.NonceSize() {
		return "", errSealed
	}
	pt, err := m.aead.Open(nil, ct[:m.aead.NonceSize()], ct[m.aead.NonceSize():], []byte(userID))
	if err != nil {
		return "", errSealed
	}
	return string(pt), nil
}

// matchTOTP returns the time step code is valid for (now and one step
// either side, for clock drift), or false.
func (s *Service) matchTOTP(secret, code string) (int64, bool) {
	if len(code) != 6 {
		return 0, false
	}
	for _, r := range code {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	cur := s.now().Unix() / totpPeriod
	for _, step := range []int64{cur - 1, cur, cur + 1} {
		want, err := hotp.GenerateCodeCustom(secret, uint64(step), hotp.ValidateOpts{Digits: totpDigits, Algorithm: otp.AlgorithmSHA1})
		if err == nil && subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			return step, true
		}
	}
	return 0, false
}

// normalizeRecovery makes a typed recovery code comparable: no dashes or
// spaces, lower case.
func normalizeRecovery(code string) string {
	code = strings.ToLower(code)
	return strings.Map(func(r rune) rune {
		if r == '-' || r == ' ' {
			return -1
		}
		return r
	}, code)
}

func hashRecovery(code string) string {
	sum := sha256.Sum256([]byte(normalizeRecovery(code)))
	return hex.EncodeToString(sum[:])
}

// newRecoveryCode is 128 random bits in lower-case base32, in dashed groups.
func newRecoveryCode() string {
	raw := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(randomBytes(16)))
	var b strings.Builder
	for i := 0; i < len(raw); i += recoveryGroups {
		if i > 0 {
			b.WriteByte('-')
		}
		b.WriteString(raw[i:min(i+recoveryGroups, len(raw))])
	}
	return b.String()
}

// useCode spends a TOTP code (one step, once) or a recovery code of u's
// confirmed factor; ErrInvalidCode if neither matches. It returns "totp"
// or "recovery".
func (s *Service) useCode(ctx context.Context, userID, code string) (string, error) {
	if code == "" || len(code) > maxCodeLength {
		return "", ErrInvalidCode
	}
	f, err := s.mfa.factors.Get(ctx, userID)
	if errors.Is(err, ErrFactorNotFound) || (err == nil && !f.Confirmed) {
		return "", ErrMFANotEnabled
	}
	if err != nil {
		return "", err
	}
	secret, err := s.mfa.open(userID, f.Secret)
	if err != nil {
		return "", err
	}
	code = strings.TrimSpace(code)
	if step, ok := s.matchTOTP(secret, code); ok {
		if err := s.mfa.factors.UseStep(ctx, userID, step); err != nil {
			if errors.Is(err, ErrCodeUsed) {
				return "", ErrInvalidCode
			}
			return "", err
		}
		return "totp", nil
	}
	if len(normalizeRecovery(code)) != 26 {
		return "", ErrInvalidCode
	}
	if err := s.mfa.factors.UseRecovery(ctx, userID, hashRecovery(code)); err != nil {
		if errors.Is(err, ErrCodeUsed) {
			return "", ErrInvalidCode
		}
		return "", err
	}
	return "recovery", nil
}

// newChallenge stores a sign-in challenge for u.
func (s *Service) newChallenge(ctx context.Context, u User) (*MFARequired, error) {
	secret := base64.RawURLEncoding.EncodeToString(randomBytes(32))
	t := s.now()
	exp := t.Add(s.mfa.cfg.ChallengeTTL)
	if err := s.mfa.tokens.Create(ctx, Token{ID: HashSecret(secret), Purpose: PurposeMFA, UserID: u.ID, Email: u.Email, CreatedAt: t, ExpiresAt: exp}); err != nil {
		return nil, err
	}
	return &MFARequired{Challenge: secret, ExpiresAt: exp}, nil
}

// SignInMFA completes a sign-in with the challenge SignIn returned and a
// TOTP or recovery code, and opens the session. The challenge is spent by
// success only: a wrong code leaves it usable until it expires, and counts
// against the account and the client address like a failed sign-in. The
// returned string says which kind of code was used.
func (s *Service) SignInMFA(ctx context.Context, challenge, code string, c Client) (string, Session, User, string, error) {
	if s.mfa == nil {
		return "", Session{}, User{}, "", ErrMFADisabled
	}
	if challenge == "" {
		return "", Session{}, User{}, "", invalid("challenge", "missing_field", "challenge is required")
	}
	if code == "" {
		return "", Session{}, User{}, "", invalid("code", "missing_field", "code is required")
	}
	if !validSecret(challenge) {
		return "", Session{}, User{}, "", ErrInvalidChallenge
	}
	tok, err := s.mfa.tokens.Take(ctx, HashSecret(challenge), PurposeMFA, s.now())
	if errors.Is(err, ErrInvalidToken) {
		return "", Session{}, User{}, "", ErrInvalidChallenge
	}
	if err != nil {
		return "", Session{}, User{}, "", err
	}
	// Put the challenge back (same id and expiry) when the attempt fails.
	restore := func() {
		if err := s.mfa.tokens.Create(context.WithoutCancel(ctx), tok); err != nil {
			s.log.WarnContext(ctx, "restore mfa challenge", "err", err)
		}
	}
	u, err := s.users.ByID(ctx, tok.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return "", Session{}, User{}, "", ErrInvalidChallenge
	}
	if err != nil {
		restore()
		return "", Session{}, User{}, "", err
	}
	// Admitted before the code is checked (see SignIn): concurrent
	// guesses cannot check more codes than the limit between them.
	acct := accountKey(NormalizeEmail(u.Email))
	adm, err := s.admit(ctx, s.signInKeys(acct, c.IP)...)
	if err != nil {
		restore()
		return "", Session{}, u, "", err
	}
	kind, err := s.useCode(ctx, u.ID, code)
	if errors.Is(err, ErrMFANotEnabled) {
		s.release(ctx, adm)
		return "", Session{}, u, "", ErrInvalidChallenge // reset meanwhile: sign in again
	}
	if err != nil {
		restore()
		if !errors.Is(err, ErrInvalidCode) {
			s.release(ctx, adm) // undecided; a wrong code keeps its tickets
		}
		return "", Session{}, u, "", err
	}
	// A complete sign-in forgets the account's failures.
	s.succeeded(ctx, adm, acct)
	secret, sess, err := s.newSession(ctx, u.ID, c, true)
	return secret, sess, u, kind, err
}
