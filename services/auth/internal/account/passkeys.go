package account

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"
)

// Token purposes of the WebAuthn ceremonies: the token keeps the
// ceremony's session data between its begin and its finish.
const (
	PurposePasskeyRegister = "passkey-register"
	PurposePasskeySignIn   = "passkey-signin"
)

const maxPasskeyName = 64

// Passkey errors.
var (
	ErrPasskeysDisabled = errors.New("passkeys are not available")
	ErrPasskeyNotFound  = errors.New("no passkey with this id")
	ErrPasskeyExists    = errors.New("this passkey is already registered")
	ErrInvalidCeremony  = errors.New("the ceremony is unknown, expired or was already used")
	ErrTooManyPasskeys  = errors.New("too many passkeys")
	// ErrPasskeyMoved: the passkey's sign count changed between reading
	// and writing it (two sign-ins with one passkey at once).
	ErrPasskeyMoved = errors.New("the passkey was used concurrently")
)

// PasskeyError is a WebAuthn response that was refused: malformed, signed
// for another origin or challenge, an unknown credential. SignIn tells a
// sign-in (401) from a registration (400); Code is the API's error code
// and Detail says what was wrong, in words a client may show.
type PasskeyError struct {
	SignIn bool
	Code   string
	Detail string
	Err    error
}

func (e *PasskeyError) Error() string { return e.Code + ": " + e.Detail }
func (e *PasskeyError) Unwrap() error { return e.Err }

// Passkey is a user's registered WebAuthn credential. ID is the
// credential id in unpadded base64url; Credential is the library's record
// (public key, sign count, flags). LastUsedAt is zero until the first
// sign-in; CloneWarning is set when a sign-in presented a sign count that
// did not advance (a copy of the key may exist).
type Passkey struct {
	ID           string
	UserID       string
	Name         string
	Credential   webauthn.Credential
	CloneWarning bool
	CreatedAt    time.Time
	LastUsedAt   time.Time
}

// PasskeyStore keeps passkeys, each findable by its credential id.
type PasskeyStore interface {
	// Create stores p; ErrPasskeyExists if its id is taken.
	Create(ctx context.Context, p Passkey) error
	// ByID returns ErrPasskeyNotFound.
	ByID(ctx context.Context, id string) (Passkey, error)
	// ListByUser returns the user's passkeys, oldest first.
	ListByUser(ctx context.Context, userID string) ([]Passkey, error)
	// Used records a sign-in: the credential (its new sign count and
	// flags) and when. It applies only while the stored sign count is still
	// prev; ErrPasskeyMoved otherwise, ErrPasskeyNotFound if it is gone.
	Used(ctx context.Context, id string, prev uint32, cred webauthn.Credential, at time.Time) error
	// MarkCloned sets the clone warning.
	MarkCloned(ctx context.Context, id string) error
	// Delete removes one of userID's passkeys; ErrPasskeyNotFound.
	Delete(ctx context.Context, userID, id string) error
	// DeleteByUser removes every passkey of userID and says how many.
	DeleteByUser(ctx context.Context, userID string) (int64, error)
}

// PasskeyConfig is the relying party.
type PasskeyConfig struct {
	RPID        string   // the registrable domain credentials are bound to, e.g. example.com
	RPName      string   // shown by authenticators
	Origins     []string // the console's origins, e.g. https://app.example.com
	CeremonyTTL time.Duration
	MaxPerUser  int
	// StartAddress limits sign-in ceremonies begun per client address
	// (anonymous: every begin counts); Max <= 0 is off.
	StartAddress ThrottleRule
	// MaxPending caps the sign-in ceremonies begun and not finished in
	// each CeremonyTTL window, from every address together (so at most
	// twice this many are stored at once); <= 0 is no cap.
	MaxPending int
}

// ValidatePasskeyConfig checks that the origins are http(s) origins on the
// relying party's domain (browsers refuse anything else: an IP address is
// not a valid relying-party id).
func ValidatePasskeyConfig(cfg PasskeyConfig) error {
	id := cfg.RPID
	if id == "" || strings.ContainsAny(id, ":/ ") || strings.Trim(id, "0123456789.") == "" {
		return fmt.Errorf("the relying-party id %q must be a domain name (no scheme, port or IP address)", id)
	}
	if len(cfg.Origins) == 0 {
		return errors.New("no WebAuthn origin")
	}
	for _, o := range cfg.Origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("the origin %q must be scheme://host[:port]", o)
		}
		if h := strings.ToLower(u.Hostname()); h != id && !strings.HasSuffix(h, "."+id) {
			return fmt.Errorf("the origin %q is not on the relying party's domain %q", o, id)
		}
	}
	return nil
}

type passkeyState struct {
	store  PasskeyStore
	tokens TokenStore
	wa     *webauthn.WebAuthn
	cfg    PasskeyConfig
}

// SetPasskeys turns on passkeys. tokens keeps the ceremonies (the same
// store as mailed links, other purposes). Set it before serving.
func (s *Service) SetPasskeys(store PasskeyStore, tokens TokenStore, cfg PasskeyConfig) error {
	if cfg.CeremonyTTL <= 0 {
		cfg.CeremonyTTL = 5 * time.Minute
	}
	if cfg.MaxPerUser <= 0 {
		cfg.MaxPerUser = 20
	}
	if cfg.RPName == "" {
		cfg.RPName = "ACME Platform"
	}
	if err := ValidatePasskeyConfig(cfg); err != nil {
		return err
	}
	origins := make([]string, len(cfg.Origins))
	for i, o := range cfg.Origins {
		origins[i] = strings.TrimRight(o, "/")
	}
	wa, err := webauthn.New(&webauthn.Config{
		RPID: cfg.RPID, RPDisplayName: cfg.RPName, RPOrigins: origins,
		AttestationPreference: protocol.PreferNoAttestation,
		Timeouts: webauthn.TimeoutsConfig{
			Login:        webauthn.TimeoutConfig{Timeout: cfg.CeremonyTTL, TimeoutUVD: cfg.CeremonyTTL},
			Registration: webauthn.TimeoutConfig{Timeout: cfg.CeremonyTTL, TimeoutUVD: cfg.CeremonyTTL},
		},
	})
	if err != nil {
		return err
	}
	s.passkeys = &passkeyState{store: store, tokens: tokens, wa: wa, cfg: cfg}
	return nil
}

// PasskeysOn reports whether passkeys are available.
func (s *Service) PasskeysOn() bool { return s.passkeys != nil }

// passkeyUser is a User as the WebAuthn library sees it. The user handle
// is the user id: opaque, stable, no personal data.
type passkeyUser struct {
	u     User
	creds []webauthn.Credential
}

func (p passkeyUser) WebAuthnID() []byte                         { return []byte(p.u.ID) }
func (p passkeyUser) WebAuthnName() string                       { return p.u.Email }
func (p passkeyUser) WebAuthnDisplayName() string                { return p.u.FullName }
func (p passkeyUser) WebAuthnCredentials() []webauthn.Credential { return p.creds }

// PasskeyID names a credential id as the API and the store do.
func PasskeyID(raw []byte) string { return base64.RawURLEncoding.EncodeToString(raw) }

// PasskeyCeremony is a begun ceremony: ID is presented with the
// authenticator's response before ExpiresAt; Options are the
// publicKey options for navigator.credentials (JSON-encodable).
type PasskeyCeremony struct {
	ID        string
	ExpiresAt time.Time
	Options   any
}

// newCeremony stores a ceremony's session data as a single-use token;
// slot is the throttle slot the ceremony holds until it is finished.
func (s *Service) newCeremony(ctx context.Context, purpose, userID string, sd *webauthn.SessionData, options any, slot string) (PasskeyCeremony, error) {
	data, err := json.Marshal(sd)
	if err != nil {
		return PasskeyCeremony{}, err
	}
	secret := base64.RawURLEncoding.EncodeToString(randomBytes(32))
	t := s.now()
	exp := t.Add(s.passkeys.cfg.CeremonyTTL)
	if err := s.passkeys.tokens.Create(ctx, Token{ID: HashSecret(secret), Purpose: purpose, UserID: userID, CreatedAt: t, ExpiresAt: exp, Data: data, Slot: slot}); err != nil {
		return PasskeyCeremony{}, err
	}
	return PasskeyCeremony{ID: secret, ExpiresAt: exp, Options: options}, nil
}

// takeCeremony spends a ceremony (whatever happens next: a WebAuthn
// response answers one challenge once).
func (s *Service) takeCeremony(ctx context.Context, id, purpose string) (Token, webauthn.SessionData, error) {
	var sd webauthn.SessionData
	if !validSecret(id) {
		return Token{}, sd, ErrInvalidCeremony
	}
	tok, err := s.passkeys.tokens.Take(ctx, HashSecret(id), purpose, s.now())
	if errors.Is(err, ErrInvalidToken) {
		return Token{}, sd, ErrInvalidCeremony
	}
	if err != nil {
		return Token{}, sd, err
	}
	s.releaseSlot(ctx, tok.Slot) // finished: the ceremony no longer counts as pending
	if err := json.Unmarshal(tok.Data, &sd); err != nil {
		return Token{}, sd, ErrInvalidCeremony
	}
	return tok, sd, nil
}

func credentialsOf(list []Passkey) []webauthn.Credential {
	out := make([]webauthn.Credential, len(list))
	for i, p := range list {
		out[i] = p.Credential
	}
	return out
}

// passkeyRefused turns a WebAuthn library error into a PasskeyError.
func passkeyRefused(signIn bool, code string, err error) error {
	detail := err.Error()
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Details != "" {
		detail = pe.Details
	}
	return &PasskeyError{SignIn: signIn, Code: code, Detail: detail, Err: err}
}

// BeginPasskeyRegistration starts adding a passkey to the caller's account:
// a discoverable credential with user verification (so that it alone
// signs in, as two factors).
func (s *Service) BeginPasskeyRegistration(ctx context.Context, c Caller) (PasskeyCeremony, error) {
	if s.passkeys == nil {
		return PasskeyCeremony{}, ErrPasskeysDisabled
	}
	u, err := s.users.ByID(ctx, c.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return PasskeyCeremony{}, ErrUserGone
	}
	if err != nil {
		return PasskeyCeremony{}, err
	}
	list, err := s.passkeys.store.ListByUser(ctx, u.ID)
	if err != nil {
		return PasskeyCeremony{}, err
	}
	if len(list) >= s.passkeys.cfg.MaxPerUser {
		return PasskeyCeremony{}, ErrTooManyPasskeys
	}
	pu := passkeyUser{u: u, creds: credentialsOf(list)}
	creation, sd, err := s.passkeys.wa.BeginRegistration(pu,
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired),
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementRequired, RequireResidentKey: protocol.ResidentKeyRequired(),
			UserVerification: protocol.VerificationRequired,
		}),
		webauthn.WithExclusions(webauthn.Credentials(pu.creds).CredentialDescriptors()),
	)
	if err != nil {
		return PasskeyCeremony{}, err
	}
	return s.newCeremony(ctx, PurposePasskeyRegister, u.ID, sd, creation.Response, "")
}

// FinishPasskeyRegistration verifies the authenticator's answer (response
// is the PublicKeyCredential as JSON) to the caller's ceremony and stores
// the passkey. name may be empty ("Passkey N").
func (s *Service) FinishPasskeyRegistration(ctx context.Context, c Caller, ceremony, name string, response []byte) (Passkey, error) {
	if s.passkeys == nil {
		return Passkey{}, ErrPasskeysDisabled
	}
	if ceremony == "" {
		return Passkey{}, invalid("ceremony", "missing_field", "ceremony is required")
	}
	name, err := validateText("name", name, maxPasskeyName, false, displayText)
	if err != nil {
		return Passkey{}, err
	}
	tok, sd, err := s.takeCeremony(ctx, ceremony, PurposePasskeyRegister)
	if err != nil {
		return Passkey{}, err
	}
	if tok.UserID != c.UserID {
		return Passkey{}, ErrInvalidCeremony // another user's ceremony
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(response)
	if err != nil {
		return Passkey{}, passkeyRefused(false, "invalid_passkey_response", err)
	}
	u, err := s.users.ByID(ctx, c.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return Passkey{}, ErrUserGone
	}
	if err != nil {
		return Passkey{}, err
	}
	list, err := s.passkeys.store.ListByUser(ctx, u.ID)
	if err != nil {
		return Passkey{}, err
	}
	if len(list) >= s.passkeys.cfg.MaxPerUser {
		return Passkey{}, ErrTooManyPasskeys
	}
	cred, err := s.passkeys.wa.CreateCredential(passkeyUser{u: u, creds: credentialsOf(list)}, sd, parsed)
	if err != nil {
		return Passkey{}, passkeyRefused(false, "passkey_rejected", err)
	}
	if name == "" {
		name = fmt.Sprintf("Passkey %d", len(list)+1)
	}
	p := Passkey{ID: PasskeyID(cred.ID), UserID: u.ID, Name: name, Credential: *cred, CreatedAt: s.now()}
	if err := s.passkeys.store.Create(ctx, p); err != nil {
		return Passkey{}, err
	}
	s.event(ctx, Event{Type: EventPasskeyAdded, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c.Client,
		Detail: map[string]any{"passkey": p.ID, "name": p.Name}})
	return p, nil
}

// Passkeys lists the user's passkeys, oldest first.
func (s *Service) Passkeys(ctx context.Context, userID string) ([]Passkey, error) {
	if s.passkeys == nil {
		return nil, ErrPasskeysDisabled
	}
	return s.passkeys.store.ListByUser(ctx, userID)
}

// RemovePasskey deletes one of the caller's passkeys, unless it is their
// last way to sign in (no password, no identity, no other passkey):
// ErrLastSignInMethod. It runs under the user's removal lock
// (removeMethod), so concurrent removals cannot together remove the last.
func (s *Service) RemovePasskey(ctx context.Context, c Caller, id string) error {
	if s.passkeys == nil {
		return ErrPasskeysDisabled
	}
	if id == "" || len(id) > 1400 {
		return ErrPasskeyNotFound
	}
	err := s.removeMethod(ctx, c.UserID, func(ctx context.Context, u User, m signInMethods) error {
		if !slices.ContainsFunc(m.passkeys, func(p Passkey) bool { return p.ID == id }) {
			return ErrPasskeyNotFound
		}
		if !m.canRemoveOne() {
			return ErrLastSignInMethod
		}
		return s.passkeys.store.Delete(ctx, u.ID, id)
	})
	if err != nil {
		return err
	}
	s.event(ctx, Event{Type: EventPasskeyRemoved, Actor: c.UserID, Target: c.UserID, Client: c.Client, Detail: map[string]any{"passkey": id}})
	return nil
}

// BeginPasskeySignIn starts a sign-in with a discoverable credential: no
// user is named, the authenticator offers the passkeys it holds for the
// relying party. Anyone may begin one and each is stored until it is
// finished or expires, so begins are limited per client address
// (StartAddress) and the unfinished ones are capped (MaxPending):
// *ThrottledError past either.
func (s *Service) BeginPasskeySignIn(ctx context.Context, c Client) (PasskeyCeremony, error) {
	if s.passkeys == nil {
		return PasskeyCeremony{}, ErrPasskeysDisabled
	}
	cfg := s.passkeys.cfg
	adm, slot, err := s.admitBegin(ctx, c.IP, cfg.StartAddress,
		throttleKey{pendingCeremoniesKey, ThrottleRule{Max: cfg.MaxPending, Window: cfg.CeremonyTTL}}, "too many passkey sign-ins begun")
	if err != nil {
		return PasskeyCeremony{}, err
	}
	assertion, sd, err := s.passkeys.wa.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	if err == nil {
		var pc PasskeyCeremony
		if pc, err = s.newCeremony(ctx, PurposePasskeySignIn, "", sd, assertion.Response, slot); err == nil {
			return pc, nil
		}
	}
	s.release(ctx, adm)
	return PasskeyCeremony{}, err
}

// pendingCeremoniesKey is the throttle key whose slots are the unfinished
// passkey sign-in ceremonies (PasskeyConfig.MaxPending).
const pendingCeremoniesKey = "ceremony-pending"

// FinishPasskeySignIn verifies a sign-in ceremony's assertion (response is
// the PublicKeyCredential as JSON) and opens a session, as a password and a
// second factor would (the passkey is something owned, and its user
// verification something known or been). The ceremony is spent by any
// attempt. Refused assertions count against the client address, and the
// account once the passkey is known, like failed sign-ins; a sign count that
// did not advance marks the passkey (a copy may exist) and refuses it.
func (s *Service) FinishPasskeySignIn(ctx context.Context, ceremony string, response []byte, c Client) (string, Session, User, Passkey, error) {
	// The attempt is admitted (address, then account once the passkey
	// names it) before the assertion is checked; a refused assertion keeps
	// its tickets (they count), anything undecided gives them back.
	var adm admission
	fail := func(u User, p Passkey, err error) (string, Session, User, Passkey, error) {
		s.release(ctx, adm)
		return "", Session{}, u, p, err
	}
	if s.passkeys == nil {
		return fail(User{}, Passkey{}, ErrPasskeysDisabled)
	}
	if ceremony == "" {
		return fail(User{}, Passkey{}, invalid("ceremony", "missing_field", "ceremony is required"))
	}
	if c.IP != "" {
		a, err := s.admit(ctx, throttleKey{addressKey(c.IP), s.cfg.Address})
		if err != nil {
			return fail(User{}, Passkey{}, err)
		}
		adm = a
	}
	_, sd, err := s.takeCeremony(ctx, ceremony, PurposePasskeySignIn)
	if err != nil {
		return fail(User{}, Passkey{}, err)
	}
	refused := func(u User, p Passkey, _ string, e error) (string, Session, User, Passkey, error) {
		return "", Session{}, u, p, e
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(response)
	if err != nil {
		return refused(User{}, Passkey{}, "", passkeyRefused(true, "invalid_passkey_response", err))
	}
	p, err := s.passkeys.store.ByID(ctx, PasskeyID(parsed.RawID))
	if errors.Is(err, ErrPasskeyNotFound) {
		return refused(User{}, Passkey{}, "", &PasskeyError{SignIn: true, Code: "passkey_unknown", Detail: "this passkey is not registered here (it may have been removed)", Err: err})
	}
	if err != nil {
		return fail(User{}, Passkey{}, err)
	}
	u, err := s.users.ByID(ctx, p.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return refused(User{}, p, "", &PasskeyError{SignIn: true, Code: "passkey_unknown", Detail: "this passkey's account no longer exists", Err: err})
	}
	if err != nil {
		return fail(User{}, p, err)
	}
	acct := accountKey(NormalizeEmail(u.Email))
	a, err := s.admit(ctx, throttleKey{acct, s.cfg.Account})
	if err != nil {
		return fail(u, p, err)
	}
	adm = append(adm, a...)
	prev := p.Credential.Authenticator.SignCount
	// The warning is this attempt's: an earlier one stays on the passkey
	// (CloneWarning, shown in its list) while later sign-ins that advance
	// the count pass.
	p.Credential.Authenticator.CloneWarning = false
	pu := passkeyUser{u: u, creds: []webauthn.Credential{p.Credential}}
	_, cred, err := s.passkeys.wa.ValidatePasskeyLogin(func(rawID, userHandle []byte) (webauthn.User, error) {
		if !bytes.Equal(userHandle, pu.WebAuthnID()) {
			return nil, errors.New("the user handle does not match the passkey's account")
		}
		return pu, nil
	}, sd, parsed)
	if err != nil {
		return refused(u, p, acct, passkeyRefused(true, "passkey_failed", err))
	}
	if cred.Authenticator.CloneWarning {
		if err := s.passkeys.store.MarkCloned(ctx, p.ID); err != nil {
			return fail(u, p, err)
		}
		s.event(ctx, Event{Type: EventPasskeyCloneWarning, Target: u.ID, TargetEmail: u.Email, Client: c,
			Detail: map[string]any{"passkey": p.ID, "stored": prev, "presented": parsed.Response.AuthenticatorData.Counter}})
		return refused(u, p, acct, &PasskeyError{SignIn: true, Code: "passkey_cloned",
			Detail: "this passkey's signature counter went backwards: a copy of it may exist; remove it and register a new one"})
	}
	at := s.now()
	if err := s.passkeys.store.Used(ctx, p.ID, prev, *cred, at); err != nil {
		if errors.Is(err, ErrPasskeyMoved) || errors.Is(err, ErrPasskeyNotFound) {
			return refused(u, p, acct, &PasskeyError{SignIn: true, Code: "passkey_failed", Detail: "the passkey was used by another sign-in at the same time; try again", Err: err})
		}
		return fail(u, p, err)
	}
	p.Credential, p.LastUsedAt = *cred, at
	s.succeeded(ctx, adm, acct)
	if s.mail != nil && s.mail.cfg.RequireVerify && !u.EmailVerified {
		return "", Session{}, u, p, ErrEmailUnverified
	}
	secret, sess, err := s.newSession(ctx, u.ID, c, true)
	return secret, sess, u, p, err
}
