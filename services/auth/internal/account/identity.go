package account

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
)

// Identity links a user to an account at an identity provider. The
// provider's subject (Issuer + Subject) is what names the person there:
// an identity is found by it, never by an e-mail address.
type Identity struct {
	ID         string
	UserID     string
	Provider   string // the configured provider's name ("keycloak", "github")
	Issuer     string
	Subject    string
	Email      string // the address the provider gave when it was linked or last used
	CreatedAt  time.Time
	LastUsedAt time.Time
	// Pending: an administrator's invitation, not yet claimed: the first
	// sign-in with Provider whose verified address is Email (the user's)
	// links its subject to UserID. Issuer and Subject are empty.
	Pending bool
}

// IdentityStore keeps linked identities; Issuer + Subject is unique.
type IdentityStore interface {
	// Create stores i (ID empty) and returns it with its ID;
	// ErrIdentityTaken when the subject is linked already.
	Create(ctx context.Context, i Identity) (Identity, error)
	// BySubject finds the identity of a provider's subject; ErrIdentityNotFound.
	BySubject(ctx context.Context, issuer, subject string) (Identity, error)
	// ListByUser returns the user's identities, oldest first.
	ListByUser(ctx context.Context, userID string) ([]Identity, error)
	// Used records a sign-in with the identity (time and current address).
	Used(ctx context.Context, id, email string, at time.Time) error
	// Delete removes one of userID's identities or invitations;
	// ErrIdentityNotFound.
	Delete(ctx context.Context, userID, id string) error
	// Invite stores a pending identity (i.Pending) for i.Provider and
	// i.Email; ErrIdentityTaken when that address has one for the
	// provider already.
	Invite(ctx context.Context, i Identity) (Identity, error)
	// Invitation finds the pending identity of provider for a normalised
	// address; ErrIdentityNotFound.
	Invitation(ctx context.Context, provider, email string) (Identity, error)
}

// ExternalIdentity is what a provider asserted about the person who just
// signed in there, after its answer was verified.
type ExternalIdentity struct {
	Provider      string
	Issuer        string
	Subject       string
	Email         string
	EmailVerified bool
	FullName      string
	// MFA: the provider asserted a sign-in with more than one factor
	// (its `amr` claim named one the provider's configuration counts).
	MFA bool
}

// ProviderPolicy is the administrator's choice for one provider.
type ProviderPolicy struct {
	// SignUp: a subject no account is linked to gets a new account (its
	// e-mail verified by the provider and in AllowedDomains). Without it,
	// only identities that signed-in users linked can sign in.
	SignUp bool
	// AllowedDomains limits sign-up to these e-mail domains; empty: any.
	AllowedDomains []string
}

// Errors of signing in with an identity provider.
var (
	ErrIdentityNotFound   = errors.New("no linked identity of yours with this id")
	ErrIdentityTaken      = errors.New("this identity is linked to another account")
	ErrIdentityNotLinked  = errors.New("no account is linked to this identity and sign-up is off")
	ErrIdentityUnverified = errors.New("the provider did not confirm the e-mail address")
	ErrIdentityDomain     = errors.New("the e-mail domain is not allowed")
	ErrIdentityEmailTaken = errors.New("an account with this e-mail exists; sign in to it and link the provider")
	ErrLastSignInMethod   = errors.New("the last way to sign in cannot be removed")
)

// Security events of identity providers.
const (
	EventIdentityLinked   = "identity.linked"
	EventIdentityUnlinked = "identity.unlinked"
	EventIdentityInvited  = "identity.invited"
)

// Identities signs users in with identity providers and manages the
// identities linked to them. It uses the Service's sessions, throttling
// and second factors, so that a provider sign-in opens the same session a
// password sign-in does.
type Identities struct {
	svc    *Service
	store  IdentityStore
	limits FlowLimits
}

// FlowLimits bound the provider flows begun and not finished, whose state
// is stored until then (Identities.Begin).
type FlowLimits struct {
	// StartAddress limits the sign-ins begun per client address; it is
	// the rule of passkey sign-in ceremonies (PasskeyConfig.StartAddress),
	// and both kinds count under one key. Max <= 0 is off.
	StartAddress ThrottleRule
	// MaxPending caps the flows begun and not finished in each TTL window,
	// from every address together; <= 0 is no cap.
	MaxPending int
	TTL        time.Duration
}

// NewIdentities wires provider sign-in to svc; svc then also counts the
// identities among a user's ways to sign in (the last is never removed).
func NewIdentities(svc *Service, store IdentityStore) *Identities {
	svc.identities = store
	return &Identities{svc: svc, store: store}
}

// SetLimits bounds the flows begun (Begin). Set it before serving.
func (x *Identities) SetLimits(l FlowLimits) { x.limits = l }

// pendingFlowsKey is the throttle key whose slots are the unfinished
// provider flows (FlowLimits.MaxPending).
const pendingFlowsKey = "idp-pending"

// Begin admits a provider flow begun by c, then runs start with the
// pending slot its stored state keeps until the flow is finished
// (Finished gives it back). A sign-in (anonymous) counts against the
// client address like a passkey sign-in begun; a link, begun by a
// signed-in user, takes a pending slot only. Past either limit
// *ThrottledError, and start is not run; when start fails, the attempt
// is given back.
func (x *Identities) Begin(ctx context.Context, c Client, anonymous bool, start func(slot string) error) error {
	ip := c.IP
	if !anonymous {
		ip = ""
	}
	l := x.limits
	adm, slot, err := x.svc.admitBegin(ctx, ip, l.StartAddress,
		throttleKey{pendingFlowsKey, ThrottleRule{Max: l.MaxPending, Window: l.TTL}}, "too many sign-ins begun")
	if err != nil {
		return err
	}
	if err := start(slot); err != nil {
		x.svc.release(ctx, adm)
		return err
	}
	return nil
}

// Finished gives back the pending slot of a flow whose state was taken
// (by its callback, whatever the outcome).
func (x *Identities) Finished(ctx context.Context, slot string) { x.svc.releaseSlot(ctx, slot) }

// EmailDomainAllowed reports whether email's domain is in domains (any
// domain when domains is empty), case-insensitively.
func EmailDomainAllowed(email string, domains []string) bool {
	if len(domains) == 0 {
		return true
	}
	at := strings.LastIndexByte(email, '@')
	if at < 0 {
		return false
	}
	d := strings.ToLower(email[at+1:])
	return slices.ContainsFunc(domains, func(a string) bool { return strings.EqualFold(strings.TrimSpace(a), d) })
}

// Failed counts a provider sign-in that failed before the provider's
// answer named anyone (wrong state, a refused token) against the client
// address, like a failed password; *ThrottledError once the address is
// locked.
func (x *Identities) Failed(ctx context.Context, c Client) error {
	if c.IP == "" {
		return nil
	}
	return x.svc.throttleFail(ctx, throttleKey{addressKey(c.IP), x.svc.cfg.Address})
}

// Check refuses (*ThrottledError) when the client address is locked, before
// a provider sign-in begins.
func (x *Identities) Check(ctx context.Context, c Client) error {
	if c.IP == "" {
		return nil
	}
	_, err := x.svc.checkThrottle(ctx, []string{addressKey(c.IP)})
	return err
}

// SignIn opens a session for the account linked to ext, creating it first
// when pol allows. An account with a second factor gets *MFARequired (the
// challenge of POST /signin/mfa) unless the provider asserted MFA.
// Refusals count against the client address like failed sign-ins.
func (x *Identities) SignIn(ctx context.Context, ext ExternalIdentity, pol ProviderPolicy, c Client) (string, Session, User, error) {
	s := x.svc
	var keys []throttleKey
	if c.IP != "" {
		keys = append(keys, throttleKey{addressKey(c.IP), s.cfg.Address})
	}
	adm, err := s.admit(ctx, keys...)
	if err != nil {
		return "", Session{}, User{}, err
	}
	u, err := x.account(ctx, ext, pol)
	if err != nil {
		if isRefusal(err) {
			return "", Session{}, u, err // the tickets count
		}
		s.release(ctx, adm)
		return "", Session{}, u, err
	}
	s.release(ctx, adm)
	if u.MFAEnabled && s.mfa != nil && !ext.MFA {
		ch, err := s.newChallenge(ctx, u)
		if err != nil {
			return "", Session{}, u, err
		}
		return "", Session{}, u, ch
	}
	if s.mail != nil && s.mail.cfg.RequireVerify && !u.EmailVerified {
		return "", Session{}, u, ErrEmailUnverified
	}
	secret, sess, err := s.newSession(ctx, u.ID, c, ext.MFA)
	return secret, sess, u, err
}

func isRefusal(err error) bool {
	for _, e := range []error{ErrIdentityNotLinked, ErrIdentityUnverified, ErrIdentityDomain, ErrIdentityEmailTaken} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// account finds the user linked to ext, or signs one up.
func (x *Identities) account(ctx context.Context, ext ExternalIdentity, pol ProviderPolicy) (User, error) {
	s := x.svc
	id, err := x.store.BySubject(ctx, ext.Issuer, ext.Subject)
	switch {
	case err == nil:
		u, err := s.users.ByID(ctx, id.UserID)
		if errors.Is(err, ErrUserNotFound) {
			// The user was deleted: the identity is stale.
			if err := x.store.Delete(ctx, id.UserID, id.ID); err != nil && !errors.Is(err, ErrIdentityNotFound) {
				return User{}, err
			}
			return x.signUp(ctx, ext, pol)
		}
		if err != nil {
			return User{}, err
		}
		if err := x.store.Used(ctx, id.ID, clip(ext.Email, maxEmail), s.now()); err != nil {
			s.log.WarnContext(ctx, "record identity use", "identity", id.ID, "err", err)
		}
		return u, nil
	case errors.Is(err, ErrIdentityNotFound):
		u, err := x.claim(ctx, ext)
		if errors.Is(err, ErrIdentityNotFound) {
			return x.signUp(ctx, ext, pol)
		}
		return u, err
	default:
		return User{}, err
	}
}

// claim links ext to the user an administrator invited for ext's provider
// and verified address (ErrIdentityNotFound when there is no such
// invitation): the administrator's choice, not the address alone, links
// the account.
func (x *Identities) claim(ctx context.Context, ext ExternalIdentity) (User, error) {
	s := x.svc
	email := NormalizeEmail(ext.Email)
	if !ext.EmailVerified || email == "" {
		return User{}, ErrIdentityNotFound
	}
	inv, err := x.store.Invitation(ctx, ext.Provider, email)
	if err != nil {
		return User{}, err
	}
	u, err := s.users.ByID(ctx, inv.UserID)
	if errors.Is(err, ErrUserNotFound) || (err == nil && NormalizeEmail(u.Email) != email) {
		// Deleted, or the address changed since: the invitation is void.
		if err := x.store.Delete(ctx, inv.UserID, inv.ID); err != nil && !errors.Is(err, ErrIdentityNotFound) {
			return User{}, err
		}
		return User{}, ErrIdentityNotFound
	}
	if err != nil {
		return User{}, err
	}
	t := s.now()
	id, err := x.store.Create(ctx, Identity{UserID: u.ID, Provider: ext.Provider, Issuer: ext.Issuer, Subject: ext.Subject,
		Email: email, CreatedAt: t, LastUsedAt: t})
	if err != nil {
		return User{}, err
	}
	if err := x.store.Delete(ctx, inv.UserID, inv.ID); err != nil && !errors.Is(err, ErrIdentityNotFound) {
		s.log.WarnContext(ctx, "remove a claimed invitation", "identity", inv.ID, "err", err)
	}
	s.event(ctx, Event{Type: EventIdentityLinked, Actor: u.ID, Target: u.ID, TargetEmail: u.Email,
		Detail: map[string]any{"provider": ext.Provider, "identity": id.ID, "invitation": inv.ID}})
	return u, nil
}

// Invite lets the first sign-in with provider whose verified address is
// the user's link to the user (an administrator's act, actor).
func (x *Identities) Invite(ctx context.Context, actor Caller, userID, provider string) (Identity, error) {
	s := x.svc
	u, err := s.users.ByID(ctx, userID)
	if err != nil {
		return Identity{}, err
	}
	id, err := x.store.Invite(ctx, Identity{UserID: u.ID, Provider: provider, Email: NormalizeEmail(u.Email),
		CreatedAt: s.now(), Pending: true})
	if err != nil {
		return Identity{}, err
	}
	s.event(ctx, Event{Type: EventIdentityInvited, Actor: actor.UserID, Target: u.ID, TargetEmail: u.Email, Client: actor.Client,
		Detail: map[string]any{"provider": provider, "identity": id.ID}})
	return id, nil
}

// Remove deletes one of a user's identities or invitations (an
// administrator's act, actor: the last way to sign in is not kept).
func (x *Identities) Remove(ctx context.Context, actor Caller, userID, id string) error {
	s := x.svc
	u, err := s.users.ByID(ctx, userID)
	if err != nil {
		return err
	}
	if err := x.store.Delete(ctx, u.ID, id); err != nil {
		return err
	}
	s.event(ctx, Event{Type: EventIdentityUnlinked, Actor: actor.UserID, Target: u.ID, TargetEmail: u.Email, Client: actor.Client,
		Detail: map[string]any{"identity": id}})
	return nil
}

// signUp creates an account for a subject no account is linked to. The
// address must be verified by the provider, in an allowed domain, and
// unused: an existing account is never taken over by an address.
func (x *Identities) signUp(ctx context.Context, ext ExternalIdentity, pol ProviderPolicy) (User, error) {
	s := x.svc
	if !pol.SignUp {
		return User{}, ErrIdentityNotLinked
	}
	email, err := validateEmail("email", ext.Email)
	if err != nil || !ext.EmailVerified {
		return User{}, ErrIdentityUnverified
	}
	if !EmailDomainAllowed(email, pol.AllowedDomains) {
		return User{}, ErrIdentityDomain
	}
	name := strings.TrimSpace(ext.FullName)
	if v, err := validateText("fullName", name, maxName, true, displayText); err == nil {
		name = v
	} else {
		name = email[:strings.LastIndexByte(email, '@')]
	}
	t := s.now()
	u, err := s.users.Create(ctx, User{
		Email: email, FullName: name, Role: RoleUser, EmailVerified: true, CreatedAt: t, UpdatedAt: t,
	})
	if errors.Is(err, ErrEmailTaken) {
		return User{}, ErrIdentityEmailTaken
	}
	if err != nil {
		return User{}, err
	}
	if _, err := x.store.Create(ctx, Identity{
		UserID: u.ID, Provider: ext.Provider, Issuer: ext.Issuer, Subject: ext.Subject,
		Email: email, CreatedAt: t, LastUsedAt: t,
	}); err != nil {
		// Another sign-in of the same subject won the race: keep its
		// account, drop this one.
		if derr := s.users.Delete(context.WithoutCancel(ctx), u.ID); derr != nil {
			s.log.WarnContext(ctx, "remove account of a lost sign-up race", "user", u.ID, "err", derr)
		}
		return User{}, err
	}
	s.event(ctx, Event{Type: EventUserCreated, Target: u.ID, TargetEmail: u.Email,
		Detail: map[string]any{"provider": ext.Provider}})
	return u, nil
}

// Link links ext to the signed-in user c. Linking an identity the user has
// already is a no-op; one linked to another account is ErrIdentityTaken.
func (x *Identities) Link(ctx context.Context, c Caller, ext ExternalIdentity) (Identity, error) {
	s := x.svc
	u, err := s.users.ByID(ctx, c.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return Identity{}, ErrUserGone
	}
	if err != nil {
		return Identity{}, err
	}
	cur, err := x.store.BySubject(ctx, ext.Issuer, ext.Subject)
	switch {
	case err == nil && cur.UserID == u.ID:
		return cur, nil
	case err == nil:
		return Identity{}, ErrIdentityTaken
	case !errors.Is(err, ErrIdentityNotFound):
		return Identity{}, err
	}
	t := s.now()
	id, err := x.store.Create(ctx, Identity{
		UserID: u.ID, Provider: ext.Provider, Issuer: ext.Issuer, Subject: ext.Subject,
		Email: clip(ext.Email, maxEmail), CreatedAt: t, LastUsedAt: t,
	})
	if err != nil {
		return Identity{}, err
	}
	s.event(ctx, Event{Type: EventIdentityLinked, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c.Client,
		Detail: map[string]any{"provider": ext.Provider, "identity": id.ID}})
	return id, nil
}

// List returns a user's linked identities.
func (x *Identities) List(ctx context.Context, userID string) ([]Identity, error) {
	return x.store.ListByUser(ctx, userID)
}

// Unlink removes one of the caller's identities or invitations, unless it
// is their last way to sign in (no password, no passkey, no other
// identity): ErrLastSignInMethod. It runs under the user's removal lock
// (removeMethod), so concurrent removals cannot together remove the last.
func (x *Identities) Unlink(ctx context.Context, c Caller, id string) error {
	s := x.svc
	var removed Identity
	var email string
	err := s.removeMethod(ctx, c.UserID, func(ctx context.Context, u User, m signInMethods) error {
		list, err := x.store.ListByUser(ctx, u.ID)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(list, func(v Identity) bool { return v.ID == id })
		if i < 0 {
			return ErrIdentityNotFound
		}
		if !list[i].Pending && !m.canRemoveOne() {
			return ErrLastSignInMethod
		}
		if err := x.store.Delete(ctx, u.ID, id); err != nil {
			return err
		}
		removed, email = list[i], u.Email
		return nil
	})
	if err != nil {
		return err
	}
	s.event(ctx, Event{Type: EventIdentityUnlinked, Actor: c.UserID, Target: c.UserID, TargetEmail: email, Client: c.Client,
		Detail: map[string]any{"provider": removed.Provider, "identity": id}})
	return nil
}
