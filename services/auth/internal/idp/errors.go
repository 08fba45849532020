package idp

import (
	"errors"
	"fmt"
)

// Error is a refused flow: Code for programs (and the console's sentence),
// Message for people. It never carries a secret or a provider's token.
type Error struct {
	Code    string
	Message string
	Err     error // the cause, for the log
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Codes of refused flows.
const (
	CodeUnknownProvider     = "unknown_provider"
	CodeState               = "invalid_state"
	CodeProviderRefused     = "provider_refused"
	CodeNoCode              = "missing_code"
	CodeCodeRejected        = "code_rejected"
	CodeTokenInvalid        = "invalid_id_token"
	CodeProviderUnavailable = "provider_unavailable"
)

// ErrUnknownProvider: no provider of this name is configured.
var ErrUnknownProvider error = errUnknownProvider

var (
	errUnknownProvider = &Error{Code: CodeUnknownProvider, Message: "no identity provider with this name is configured"}
	errState           = &Error{Code: CodeState, Message: "the sign-in did not start in this browser, took too long or was already finished: start again"}
	errNoCode          = &Error{Code: CodeNoCode, Message: "the provider sent no authorization code: start again"}
	// errUnbound: the callback carries no state cookie, or one that is not
	// its state's. Any page can make a browser send such a callback (an
	// image), so it names no flow and proves nothing about the client.
	errUnbound = &Error{Code: CodeState, Message: errState.Message, Err: errors.New("no state cookie, or another state's")}
)

// IsUnbound reports whether err refused a callback that was not bound to
// the browser sending it (no state cookie, or another state's): no flow
// was touched, and the client proved nothing, so it counts as no attempt.
func IsUnbound(err error) bool { return errors.Is(err, errUnbound) }

// IsUnknownProvider reports whether err says the provider is not configured.
func IsUnknownProvider(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeUnknownProvider
}

func providerRefused(code, desc string) *Error {
	msg := "the provider refused the sign-in"
	if code == "access_denied" {
		msg = "the sign-in was cancelled or consent was denied at the provider"
	}
	return &Error{Code: CodeProviderRefused, Message: msg, Err: fmt.Errorf("%.100s: %.300s", code, desc)}
}

func codeRejected(err error) *Error {
	return &Error{Code: CodeCodeRejected, Message: "the provider did not accept the authorization code (it expired or was already used): start again", Err: err}
}

func tokenInvalid(err error) *Error {
	return &Error{Code: CodeTokenInvalid, Message: "the provider's answer could not be verified", Err: err}
}

func unavailable(err error) *Error {
	return &Error{Code: CodeProviderUnavailable, Message: "the identity provider could not be reached: try again later", Err: err}
}
