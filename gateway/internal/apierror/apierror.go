// Package apierror is the gateway's one map of the errors it answers itself
// (a request refused before, or instead of, reaching a service): each
// condition's status, code and message in one table, and one writer that
// renders them as the services do, {"error": message, "code": code}.
//
// Every JSON error the gateway writes goes through Write; a test fails on a
// condition without an entry and on an error body written anywhere else.
package apierror

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Kind is one error condition of the gateway.
type Kind int

// The gateway's error conditions. Several share a code (the code is what
// clients branch on; the message says which case it was).
const (
	_ Kind = iota

	// Origin and Host checks.
	OriginNotAllowed // a cross-origin request from an origin neither the gateway's nor configured
	CrossSite        // a state-changing request a browser says comes from another site
	MisdirectedHost  // a Host that is not the gateway's (GATEWAY_PUBLIC_URL)
	HeadersTooLarge  // request headers over the gateway's limit (the body adds "limit")

	// Routes and services.
	NoRoute            // no route matches the path
	ServiceNotDeployed // arg: the service's name
	ServiceUnavailable // no replica answered; arg: the service's name
	ShuttingDown       // the gateway is stopping

	// Request bodies.
	BodyStalled        // no byte of the body for the idle timeout
	BodyTooLarge       // a body read past its limit
	BodyOverLimit      // a declared length over the route's limit; arg: the limit in bytes
	BodyIncomplete     // the body failed while the service answered
	BodyUnreadable     // GET /me's body could not be read
	BodyNotJSON        // GET /me's body is not application/json
	SessionBodyInvalid // GET /me's body is not {"sessionId": string}
	SessionBodyTrailer // GET /me's body has data after the object
	SessionAmbiguous   // a session in the cookie and in the body

	// Sessions.
	Unauthenticated     // no session on a route that requires one
	SessionInvalid      // the session does not resolve
	SessionEnded        // the session of a running request ended or its user changed
	SessionsUnavailable // auth cannot be asked about a session
	AdminRequired       // the session's user is not an administrator

	// API keys.
	KeyMalformed     // Authorization is not "Bearer acme_..."
	KeyNotAllowed    // an API key on a route that takes sessions only
	KeyInvalid       // the key does not resolve
	KeyRevoked       // the key of a running request was revoked or its owner changed
	KeysUnavailable  // auth cannot be asked about a key
	KeyScopeMissing  // arg: the scope the route needs
	KeyOwnerNotAdmin // the key's owner is not an administrator

	// The gateway's own faults.
	Internal             // signing the identity token failed
	DocumentUnrenderable // the API document cannot be rendered

	kinds // the number of kinds plus one; keep last
)

// entry is one row of the table. Message and Authenticate are fmt formats
// when the condition takes arguments (both get the same ones).
type entry struct {
	Status  int
	Code    string
	Message string
	// Authenticate is the WWW-Authenticate header of the answer, if any.
	Authenticate string
	// Close asks the client to close the connection: the request's bytes
	// on it cannot be trusted to end where the gateway stopped reading.
	Close bool
}

const invalidToken = `Bearer error="invalid_token"`

// table maps every Kind to its answer. The statuses, codes and messages
// are the public API (docs/gateway.md, the service interface spec).
var table = map[Kind]entry{
	OriginNotAllowed: {Status: http.StatusForbidden, Code: "forbidden_origin", Message: "cross-origin request from an origin that is not allowed"},
	CrossSite:        {Status: http.StatusForbidden, Code: "forbidden_origin", Message: "state-changing request from another site"},
	MisdirectedHost: {Status: http.StatusMisdirectedRequest, Code: "misdirected_request",
		Message: "this gateway does not answer for that host name (GATEWAY_PUBLIC_URL)", Close: true},
	HeadersTooLarge: {Status: http.StatusRequestHeaderFieldsTooLarge, Code: "headers_too_large", Message: "request headers too large", Close: true},

	NoRoute:            {Status: http.StatusNotFound, Code: "not_found", Message: "no such route"},
	ServiceNotDeployed: {Status: http.StatusServiceUnavailable, Code: "service_not_deployed", Message: "the %s service is not deployed"},
	ServiceUnavailable: {Status: http.StatusServiceUnavailable, Code: "service_unavailable", Message: "the %s service is unavailable, try again shortly"},
	ShuttingDown:       {Status: http.StatusServiceUnavailable, Code: "shutting_down", Message: "the gateway is shutting down, try again"},

	BodyStalled:        {Status: http.StatusRequestTimeout, Code: "request_timeout", Message: "the request body stopped arriving before it was complete", Close: true},
	BodyTooLarge:       {Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: "request body too large"},
	BodyOverLimit:      {Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: "request body over %d bytes"},
	BodyIncomplete:     {Status: http.StatusBadRequest, Code: "incomplete_body", Message: "the request body did not arrive whole", Close: true},
	BodyUnreadable:     {Status: http.StatusBadRequest, Code: "bad_body", Message: "request body could not be read"},
	BodyNotJSON:        {Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Message: "content type must be application/json"},
	SessionBodyInvalid: {Status: http.StatusBadRequest, Code: "invalid_json", Message: `body must be a JSON object {"sessionId": string}`},
	SessionBodyTrailer: {Status: http.StatusBadRequest, Code: "invalid_json", Message: "unexpected data after the JSON object"},
	SessionAmbiguous:   {Status: http.StatusBadRequest, Code: "ambiguous_session", Message: "send the session in the cookie or in the body, not both"},

	Unauthenticated:     {Status: http.StatusUnauthorized, Code: "unauthenticated", Message: "a valid session is required"},
	SessionInvalid:      {Status: http.StatusUnauthorized, Code: "invalid_session", Message: "the session is invalid or has expired"},
	SessionEnded:        {Status: http.StatusUnauthorized, Code: "invalid_session", Message: "the session ended or its user changed"},
	SessionsUnavailable: {Status: http.StatusServiceUnavailable, Code: "auth_unavailable", Message: "sessions cannot be checked right now, try again shortly"},
	AdminRequired:       {Status: http.StatusForbidden, Code: "forbidden", Message: "administrator role required"},

	KeyMalformed: {Status: http.StatusUnauthorized, Code: "invalid_api_key",
		Message: `Authorization must be "Bearer acme_..." with an API key`, Authenticate: invalidToken},
	KeyNotAllowed: {Status: http.StatusForbidden, Code: "api_key_not_allowed",
		Message: "API keys are accepted on file and log routes only; use a session here"},
	KeyInvalid:      {Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: "the API key is unknown, expired or revoked", Authenticate: invalidToken},
	KeyRevoked:      {Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: "the API key was revoked or its owner changed", Authenticate: invalidToken},
	KeysUnavailable: {Status: http.StatusServiceUnavailable, Code: "auth_unavailable", Message: "API keys cannot be checked right now, try again shortly"},
	KeyScopeMissing: {Status: http.StatusForbidden, Code: "insufficient_scope", Message: "this API key lacks the scope %s",
		Authenticate: `Bearer error="insufficient_scope", scope="%s"`},
	KeyOwnerNotAdmin: {Status: http.StatusForbidden, Code: "forbidden",
		Message: "administrator role required (the API key's owner is not an administrator)"},

	Internal:             {Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"},
	DocumentUnrenderable: {Status: http.StatusInternalServerError, Code: "internal", Message: "the API document cannot be rendered"},
}

// Status is k's HTTP status (0 for a Kind not in the table).
func (k Kind) Status() int { return table[k].Status }

// Code is k's code, what clients branch on.
func (k Kind) Code() string { return table[k].Code }

// Write answers with k: its status, a JSON body {"error", "code"} (the
// message formatted with args), and its headers. A 503 says when to try
// again (Retry-After: 5).
func Write(w http.ResponseWriter, k Kind, args ...any) {
	WriteFields(w, k, nil, args...)
}

// WriteFields is Write with more fields in the body (headers_too_large
// names its "limit").
func WriteFields(w http.ResponseWriter, k Kind, fields map[string]any, args ...any) {
	e, ok := table[k]
	if !ok {
		e = table[Internal]
		args = nil
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if e.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "5")
	}
	if e.Authenticate != "" {
		h.Set("WWW-Authenticate", format(e.Authenticate, args))
	}
	if e.Close {
		h.Set("Connection", "close")
	}
	w.WriteHeader(e.Status)
	body := make(map[string]any, len(fields)+2)
	for k, v := range fields {
		body[k] = v
	}
	body["error"], body["code"] = format(e.Message, args), e.Code
	_ = json.NewEncoder(w).Encode(body)
}

func format(s string, args []any) string {
	if len(args) == 0 {
		return s
	}
	return fmt.Sprintf(s, args...)
}
