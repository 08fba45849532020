package account

import "context"

// Security events the audit trail records (see services/auth/internal/audit).
const (
	EventSignIn             = "signin.succeeded"
	EventSignInFailed       = "signin.failed"
	EventSignInThrottled    = "signin.throttled"
	EventSignInUnverified   = "signin.unverified"
	EventSignOut            = "signout"
	EventSessionEnded       = "session.ended"
	EventPasswordChanged    = "password.changed"
	EventPasswordResetAsked = "password.reset_requested"
	EventPasswordReset      = "password.reset"
	EventEmailVerified      = "email.verified"
	EventEmailChangeAsked   = "email.change_requested"
	EventEmailChanged       = "email.changed"
	// EventEmailChangeConfirmed: one side of a pending address change
	// confirmed (Detail side: "current" or "new"), the other not yet.
	EventEmailChangeConfirmed = "email.change_confirmed"
	EventUserCreated          = "user.created"
	EventUserChanged          = "user.changed"
	EventUserDeleted          = "user.deleted"
	EventAPIKeyCreated        = "apikey.created"
	EventAPIKeyFirstUsed      = "apikey.first_used"
	EventAPIKeyRevoked        = "apikey.revoked"
	EventMFAEnabled           = "mfa.enabled"
	EventMFADisabled          = "mfa.disabled"
	EventMFAReset             = "mfa.reset"
	EventMFAFailed            = "mfa.failed"
	EventPasskeyAdded         = "passkey.added"
	EventPasskeyRemoved       = "passkey.removed"
	EventPasskeyFailed        = "passkey.failed"
	// EventPasskeyCloneWarning: a passkey's sign count did not advance.
	EventPasskeyCloneWarning = "passkey.clone_warning"
)

// Event is one security event. Actor and Target are user ids (Actor empty
// when nobody is signed in); TargetEmail names the target for readers of the
// trail. Detail holds further facts, never a secret.
type Event struct {
	Type        string
	Actor       string
	Target      string
	TargetEmail string
	Client      Client
	Detail      map[string]any
}

// EventSink records events. It must not fail or block the request.
type EventSink interface {
	Record(ctx context.Context, e Event)
}

// SetEvents makes the service report security events to sink. Set it
// before serving.
func (s *Service) SetEvents(sink EventSink) { s.events = sink }

// Record reports an event decided outside the service (by the HTTP layer,
// which knows the outcome of a request).
func (s *Service) Record(ctx context.Context, e Event) { s.event(ctx, e) }

func (s *Service) event(ctx context.Context, e Event) {
	if s.events != nil {
		e.Client = e.Client.cleaned()
		s.events.Record(ctx, e)
	}
}
