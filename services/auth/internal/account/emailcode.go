package account

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/services/auth/internal/mailer"
)

// Sign-in by a code mailed to the address (and a link holding a token, for
// a browser), and a first password set by a code from the profile.
//
// One request is one EmailCode document, whose ID names the address (or,
// for a password, the user): a new request replaces it, so the older code
// and link stop working. The code and the link's token are stored hashed.
// A code is checked only after a try was counted on its document by one
// conditional update (Try: tries < MaxCodeTries), so however many guesses
// race, at most MaxCodeTries of them are compared; the right one then
// takes the document by one conditional find-and-delete (Take), and the
// link takes it the same way (TakeLink): of any number of concurrent uses
// of one request, exactly one gets it.

// Purposes of EmailCode.
const (
	PurposeSignInCode   = "signin-email"
	PurposePasswordCode = "password-code"
)

// MaxCodeTries is how many codes are compared against one request; then
// it is void (code and link).
const MaxCodeTries = 5

// Code lengths allowed (EmailSignInConfig.Digits).
const (
	MinCodeDigits = 6
	MaxCodeDigits = 8
)

// linkTokenLength is the length of a sign-in link's token: base64url of
// the request's 16-byte key and 32 random bytes.
const linkTokenLength = 64

// EmailCode is one pending request for a mailed code.
type EmailCode struct {
	ID       string // signInCodeID(address) or passwordCodeID(user)
	Purpose  string
	UserID   string // PurposePasswordCode: the user
	Email    string // the address as typed (sign-in) or the user's (password)
	CodeHash string // codeHash(Nonce, code)
	LinkHash string // HashSecret(token); empty when no link was made
	Nonce    string // random per request; binds the code's hash and Take
	Tries    int    // codes compared so far
	// CreatedAt and ExpiresAt bound its life.
	CreatedAt time.Time
	ExpiresAt time.Time
}

// EmailCodeStore keeps pending mailed codes. Every method is one operation
// on one document by its ID, atomic on MongoDB and on the embedded
// FerretDB.
type EmailCodeStore interface {
	// Put stores c, replacing the request with its ID.
	Put(ctx context.Context, c EmailCode) error
	// Try counts one try of the request id of purpose if it has not
	// expired and has had fewer than max tries, and returns it as it is
	// after; ErrEmailCodeVoid otherwise.
	Try(ctx context.Context, id, purpose string, max int, now time.Time) (EmailCode, error)
	// Take deletes and returns the request id of purpose if its nonce is
	// nonce and it has not expired; ErrEmailCodeVoid otherwise.
	Take(ctx context.Context, id, purpose, nonce string, now time.Time) (EmailCode, error)
	// TakeLink deletes and returns the sign-in request id if its link
	// hash is linkHash, it has not expired and it has had fewer than max
	// tries; ErrEmailCodeVoid otherwise.
	TakeLink(ctx context.Context, id, linkHash string, max int, now time.Time) (EmailCode, error)
}

// EmailSignInConfig are the policies of sign-in by mailed code.
type EmailSignInConfig struct {
	On      bool          // the method is offered (mail must be on too)
	TTL     time.Duration // how long a code and its link work
	Digits  int           // the code's length, MinCodeDigits..MaxCodeDigits
	Account ThrottleRule  // requests per address (every request counts)
	Address ThrottleRule  // requests per client address
	// SignUp: an address without an account, in AllowedDomains, gets a
	// code too, and the code creates its account (verified, no password).
	SignUp         bool
	AllowedDomains []string
}

// Errors of mailed codes.
var (
	ErrEmailSignInDisabled = errors.New("sign-in by e-mail code is turned off")
	ErrWrongEmailCode      = errors.New("the code is wrong")
	ErrEmailCodeVoid       = errors.New("no code is pending: it expired, was used, was replaced by a newer one or was tried too often")
	ErrPasswordSet         = errors.New("the account has a password already")
)

// Events of mailed codes.
const (
	// EventEmailCodeRequested: a code was mailed (Detail purpose, signUp).
	EventEmailCodeRequested = "signin.email.requested"
	// EventEmailCodeFailed: a wrong code, or a code or link that was void
	// (Detail reason: wrong_code, void, invalid_link; triesLeft).
	EventEmailCodeFailed = "signin.email.failed"
	// EventEmailCodeVoided: the last try a request allows was wrong.
	EventEmailCodeVoided = "signin.email.voided"
)

// SetEmailSignIn configures sign-in by mailed code, and the codes that
// set a first password (those need mail only). Set it after SetMail,
// before serving.
func (s *Service) SetEmailSignIn(codes EmailCodeStore, cfg EmailSignInConfig) {
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Minute
	}
	if cfg.Digits < MinCodeDigits || cfg.Digits > MaxCodeDigits {
		cfg.Digits = MinCodeDigits
	}
	s.codes, s.codeCfg = codes, cfg
}

// EmailSignIn says what the sign-in page offers: whether sign-in by code
// is on, whether unknown addresses may sign up with it, and the code's
// length.
func (s *Service) EmailSignIn() (on, signUp bool, digits int) {
	on = s.emailSignInOn()
	digits = s.codeCfg.Digits
	if digits == 0 { // not configured (mail off)
		digits = MinCodeDigits
	}
	return on, on && s.codeCfg.SignUp, digits
}

func (s *Service) emailSignInOn() bool { return s.mail != nil && s.codes != nil && s.codeCfg.On }

// addressHash is the first 16 bytes of SHA-256 of a normalised address.
func addressHash(lower string) []byte {
	sum := sha256.Sum256([]byte(lower))
	return sum[:16]
}

func signInCodeID(key []byte) string { return PurposeSignInCode + ":" + hex.EncodeToString(key) }
func passwordCodeID(userID string) string {
	return PurposePasswordCode + ":" + userID
}

func codeHash(nonce, code string) string {
	sum := sha256.Sum256([]byte(nonce + ":" + code))
	return hex.EncodeToString(sum[:])
}

// newCode is n decimal digits from crypto/rand, uniformly.
func newCode(n int) string {
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
	v, err := rand.Int(rand.Reader, limit)
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	s := v.String()
	return strings.Repeat("0", n-len(s)) + s
}

// cleanCode is a typed code without the spaces and dashes people add,
// or an error when it is not digits digits.
func cleanCode(code string, digits int) (string, error) {
	c := strings.Map(func(r rune) rune {
		if r == ' ' || r == '-' {
			return -1
		}
		return r
	}, code)
	if len(c) != digits || strings.Trim(c, "0123456789") != "" {
		return "", invalid("code", "invalid_code_format", "code must be the "+strconv.Itoa(digits)+" digits from the message")
	}
	return c, nil
}

func signInRequestAccountKey(lower string) string { return "signin-email-" + accountKey(lower) }
func signInRequestAddressKey(ip string) string    { return "signin-email-" + addressKey(ip) }

// codeRequestThrottled names what a refused request of a code limits.
func codeRequestThrottled(err error) error {
	var te *ThrottledError
	if errors.As(err, &te) {
		te.What = "too many sign-in codes asked for"
	}
	return err
}

// RequestSignInCode mails a code and a link to email. It answers the same
// for every well-formed address, after the same work: the checks, the
// throttle (per address and per client, every request counts), and the
// new request stored in place of the address's earlier one; looking the
// account up and sending happen in the background, and nothing is sent to
// an address without an account unless sign-up by code allows it.
func (s *Service) RequestSignInCode(ctx context.Context, email string, c Client) error {
	if s.mail == nil {
		return ErrMailDisabled
	}
	if !s.emailSignInOn() {
		return ErrEmailSignInDisabled
	}
	e, err := validateEmail("email", email)
	if err != nil {
		return err
	}
	lower := NormalizeEmail(e)
	keys := []throttleKey{{signInRequestAccountKey(lower), s.codeCfg.Account}}
	if c.IP != "" {
		keys = append(keys, throttleKey{signInRequestAddressKey(c.IP), s.codeCfg.Address})
	}
	if err := s.throttleFail(ctx, keys...); err != nil {
		return codeRequestThrottled(err)
	}
	key := addressHash(lower)
	code := newCode(s.codeCfg.Digits)
	token := base64.RawURLEncoding.EncodeToString(append(append([]byte{}, key...), randomBytes(32)...))
	nonce := hex.EncodeToString(randomBytes(16))
	t := s.now()
	req := EmailCode{ID: signInCodeID(key), Purpose: PurposeSignInCode, Email: e, CodeHash: codeHash(nonce, code),
		LinkHash: HashSecret(token), Nonce: nonce, CreatedAt: t, ExpiresAt: t.Add(s.codeCfg.TTL)}
	if err := s.codes.Put(ctx, req); err != nil {
		return err
	}
	return s.background(ctx, func(ctx context.Context) {
		u, err := s.users.ByEmail(ctx, lower)
		signUp := false
		switch {
		case errors.Is(err, ErrUserNotFound):
			if !s.codeSignUpAllowed(lower) {
				s.log.InfoContext(ctx, "sign-in code asked for an address without an account")
				return
			}
			signUp, u = true, User{Email: e}
		case err != nil:
			s.log.WarnContext(ctx, "sign-in code: look the user up", "err", err)
			return
		}
		s.event(ctx, Event{Type: EventEmailCodeRequested, Target: u.ID, TargetEmail: u.Email, Client: c,
			Detail: map[string]any{"purpose": PurposeSignInCode, "signUp": signUp}})
		link := strings.TrimRight(s.mail.cfg.PublicURL, "/") + "/console/#/signin-email?" + url.Values{"token": {token}}.Encode()
		name := mailer.SignInCode
		if signUp {
			name = mailer.SignUpCode
		}
		if err := s.mail.mailer.Send(ctx, name, u.Email, mailer.Data{Name: u.FullName, Email: u.Email, Code: code, Link: link, Valid: humanDuration(s.codeCfg.TTL)}); err != nil {
			s.log.WarnContext(ctx, "sign-in code: send", "user", u.ID, "err", err)
		}
	})
}

// codeSignUpAllowed: an address without an account may sign up by code.
func (s *Service) codeSignUpAllowed(lower string) bool {
	return s.codeCfg.SignUp && len(s.codeCfg.AllowedDomains) > 0 && EmailDomainAllowed(lower, s.codeCfg.AllowedDomains)
}

// EmailCodeWrong is ErrWrongEmailCode with the tries the request has left.
type EmailCodeWrong struct{ TriesLeft int }

func (e *EmailCodeWrong) Error() string { return ErrWrongEmailCode.Error() }

// Unwrap makes errors.Is(err, ErrWrongEmailCode) hold.
func (e *EmailCodeWrong) Unwrap() error { return ErrWrongEmailCode }

// checkCode counts a try of request id and compares code with it: the
// request, taken (spent), when code is right; *EmailCodeWrong when wrong;
// ErrEmailCodeVoid when there is no request to try.
func (s *Service) checkCode(ctx context.Context, id, purpose, code string) (EmailCode, error) {
	t := s.now()
	r, err := s.codes.Try(ctx, id, purpose, MaxCodeTries, t)
	if err != nil {
		return EmailCode{}, err
	}
	if subtle.ConstantTimeCompare([]byte(codeHash(r.Nonce, code)), []byte(r.CodeHash)) != 1 {
		return r, &EmailCodeWrong{TriesLeft: max(0, MaxCodeTries-r.Tries)}
	}
	return s.codes.Take(ctx, id, purpose, r.Nonce, t)
}

// SignInResult is how a sign-in by code ended: the user, whether the
// account was made by it, and which proof was used ("email-code" or
// "email-link").
type SignInResult struct {
	User    User
	Created bool
	Method  string
}

// SignInWithCode completes a sign-in with the code mailed to email. The
// code is checked once a try was counted on its request (at most
// MaxCodeTries per request) and once the attempt was admitted by the
// account's and the client address's sign-in throttle, as a password is:
// a wrong code is a failed sign-in. It ends like a password sign-in: a
// session, or *MFARequired when the account has TOTP.
func (s *Service) SignInWithCode(ctx context.Context, email, code string, c Client) (string, Session, SignInResult, error) {
	if s.mail == nil {
		return "", Session{}, SignInResult{}, ErrMailDisabled
	}
	if !s.emailSignInOn() {
		return "", Session{}, SignInResult{}, ErrEmailSignInDisabled
	}
	e, err := validateEmail("email", email)
	if err != nil {
		return "", Session{}, SignInResult{}, err
	}
	code, err = cleanCode(code, s.codeCfg.Digits)
	if err != nil {
		return "", Session{}, SignInResult{}, err
	}
	lower := NormalizeEmail(e)
	res := SignInResult{User: User{Email: e}, Method: "email-code"}
	acct := accountKey(lower)
	adm, err := s.admit(ctx, s.signInKeys(acct, c.IP)...)
	if err != nil {
		return "", Session{}, res, err
	}
	req, err := s.checkCode(ctx, signInCodeID(addressHash(lower)), PurposeSignInCode, code)
	if err != nil {
		if !errors.Is(err, ErrWrongEmailCode) {
			s.release(ctx, adm) // nothing was compared
		}
		return "", Session{}, res, err
	}
	return s.finishCodeSignIn(ctx, req, adm, res, c)
}

// SignInWithLink completes a sign-in with the token of the mailed link.
// The link is the same request as the code: whichever is used first
// spends both. A token that is not the link's is refused without
// counting; the link needs no throttle (256 random bits are not guessed).
func (s *Service) SignInWithLink(ctx context.Context, token string, c Client) (string, Session, SignInResult, error) {
	res := SignInResult{Method: "email-link"}
	if s.mail == nil {
		return "", Session{}, res, ErrMailDisabled
	}
	if !s.emailSignInOn() {
		return "", Session{}, res, ErrEmailSignInDisabled
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if token == "" || len(token) != linkTokenLength || err != nil || len(raw) != 48 {
		return "", Session{}, res, invalid("token", "invalid_token", "token must be the 64-character value from the link")
	}
	req, err := s.codes.TakeLink(ctx, signInCodeID(raw[:16]), HashSecret(token), MaxCodeTries, s.now())
	if errors.Is(err, ErrEmailCodeVoid) {
		return "", Session{}, res, ErrInvalidToken
	}
	if err != nil {
		return "", Session{}, res, err
	}
	res.User.Email = req.Email
	lower := NormalizeEmail(req.Email)
	// Not a guess, but the account's earlier failures end with a
	// complete sign-in, as with a password.
	adm, err := s.admit(ctx, s.signInKeys(accountKey(lower), c.IP)...)
	if err != nil {
		return "", Session{}, res, err
	}
	return s.finishCodeSignIn(ctx, req, adm, res, c)
}

// finishCodeSignIn signs in (or up) the owner of the address req was
// mailed to, whose proof was right.
func (s *Service) finishCodeSignIn(ctx context.Context, req EmailCode, adm admission, res SignInResult, c Client) (string, Session, SignInResult, error) {
	lower := NormalizeEmail(req.Email)
	u, created, err := s.codeAccount(ctx, req.Email, lower)
	if err != nil {
		s.release(ctx, adm)
		return "", Session{}, res, err
	}
	res.User, res.Created = u, created
	if !u.EmailVerified {
		yes := true
		if v, err := s.users.Update(ctx, u.ID, UserPatch{EmailVerified: &yes}, s.now()); err != nil {
			s.userWriteFailed(ctx, u.ID, err)
			s.log.WarnContext(ctx, "sign-in code: mark the address verified", "user", u.ID, "err", err)
		} else {
			s.revoke(ctx, Revocation{Users: []string{u.ID}})
			u, res.User = v, v
		}
	}
	if u.MFAEnabled && s.mfa != nil {
		// As after a password: the account's failures are forgotten once
		// the second factor is right too.
		s.release(ctx, adm)
		ch, err := s.newChallenge(ctx, u)
		if err != nil {
			return "", Session{}, res, err
		}
		return "", Session{}, res, ch
	}
	s.succeeded(ctx, adm, accountKey(lower))
	secret, sess, err := s.newSession(ctx, u.ID, c, false)
	return secret, sess, res, err
}

// codeAccount is the account of the address a right code was mailed to,
// made now when sign-up by code allows it (verified, no password).
func (s *Service) codeAccount(ctx context.Context, typed, lower string) (User, bool, error) {
	u, err := s.signInUser(ctx, lower)
	if err == nil || !errors.Is(err, ErrUserNotFound) {
		return u, false, err
	}
	if !s.codeSignUpAllowed(lower) {
		return User{}, false, ErrEmailCodeVoid // sign-up turned off, or the account deleted, since
	}
	name := typed[:strings.LastIndexByte(typed, '@')]
	if v, err := validateText("fullName", name, maxName, true, displayText); err == nil {
		name = v
	}
	t := s.now()
	u, err = s.users.Create(ctx, User{Email: typed, FullName: name, Role: RoleUser, EmailVerified: true, CreatedAt: t, UpdatedAt: t})
	if errors.Is(err, ErrEmailTaken) {
		u, err = s.users.ByEmail(ctx, lower) // made meanwhile: the code proves this address
		return u, false, err
	}
	if err != nil {
		return User{}, false, err
	}
	s.event(ctx, Event{Type: EventUserCreated, Target: u.ID, TargetEmail: u.Email, Detail: map[string]any{"method": "email-code"}})
	return u, true, nil
}

// RequestPasswordCode mails a code to the signed-in caller's address, the
// proof SetFirstPassword needs. Only an account without a password asks
// (ErrPasswordSet otherwise); requests count as requests of sign-in
// codes for the address and the client.
func (s *Service) RequestPasswordCode(ctx context.Context, c Caller) error {
	if s.mail == nil || s.codes == nil {
		return ErrMailDisabled
	}
	u, err := s.users.ByID(ctx, c.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return ErrUserGone
	}
	if err != nil {
		return err
	}
	if u.PasswordHash != "" {
		return ErrPasswordSet
	}
	lower := NormalizeEmail(u.Email)
	keys := []throttleKey{{signInRequestAccountKey(lower), s.codeCfg.Account}}
	if c.IP != "" {
		keys = append(keys, throttleKey{signInRequestAddressKey(c.IP), s.codeCfg.Address})
	}
	if err := s.throttleFail(ctx, keys...); err != nil {
		return codeRequestThrottled(err)
	}
	code := newCode(s.codeCfg.Digits)
	nonce := hex.EncodeToString(randomBytes(16))
	t := s.now()
	if err := s.codes.Put(ctx, EmailCode{ID: passwordCodeID(u.ID), Purpose: PurposePasswordCode, UserID: u.ID, Email: u.Email,
		CodeHash: codeHash(nonce, code), Nonce: nonce, CreatedAt: t, ExpiresAt: t.Add(s.codeCfg.TTL)}); err != nil {
		return err
	}
	return s.background(ctx, func(ctx context.Context) {
		s.event(ctx, Event{Type: EventEmailCodeRequested, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c.Client,
			Detail: map[string]any{"purpose": PurposePasswordCode}})
		if err := s.mail.mailer.Send(ctx, mailer.PasswordCode, u.Email, mailer.Data{Name: u.FullName, Email: u.Email, Code: code, Valid: humanDuration(s.codeCfg.TTL)}); err != nil {
			s.log.WarnContext(ctx, "password code: send", "user", u.ID, "err", err)
		}
	})
}

// SetFirstPassword gives an account without a password one, proven by a
// fresh code mailed to its address (RequestPasswordCode): a session alone
// does not add a way in. A wrong code counts as a failed sign-in of the
// account, as in SignInWithCode. Sessions stay: nothing was taken away.
func (s *Service) SetFirstPassword(ctx context.Context, c Caller, code, newPassword string) (User, error) {
	if s.mail == nil || s.codes == nil {
		return User{}, ErrMailDisabled
	}
	code, err := cleanCode(code, s.codeCfg.Digits)
	if err != nil {
		return User{}, err
	}
	if err := validatePassword("password", newPassword); err != nil {
		return User{}, err
	}
	u, err := s.users.ByID(ctx, c.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return User{}, ErrUserGone
	}
	if err != nil {
		return User{}, err
	}
	if u.PasswordHash != "" {
		return User{}, ErrPasswordSet
	}
	// Hash first: a busy hasher must not spend the code.
	h, err := s.hasher.Hash(ctx, newPassword)
	if err != nil {
		return User{}, err
	}
	acct := accountKey(NormalizeEmail(u.Email))
	adm, err := s.admit(ctx, s.signInKeys(acct, c.IP)...)
	if err != nil {
		return User{}, err
	}
	if _, err := s.checkCode(ctx, passwordCodeID(u.ID), PurposePasswordCode, code); err != nil {
		if !errors.Is(err, ErrWrongEmailCode) {
			s.release(ctx, adm)
		}
		return User{}, err
	}
	s.succeeded(ctx, adm, acct)
	v, err := s.users.Update(ctx, u.ID, UserPatch{PasswordHash: &h}, s.now())
	if err != nil {
		s.userWriteFailed(ctx, u.ID, err)
		if errors.Is(err, ErrUserNotFound) {
			return User{}, ErrUserGone
		}
		return User{}, err
	}
	s.revoke(ctx, Revocation{Users: []string{u.ID}})
	s.event(ctx, Event{Type: EventPasswordChanged, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c.Client,
		Detail: map[string]any{"first": true, "proof": "email-code"}})
	return v, nil
}
