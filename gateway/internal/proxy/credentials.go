package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/acme/platform/gateway/internal/apierror"
	"github.com/acme/platform/gateway/internal/sessions"
	"github.com/acme/platform/pkg/identity"
)

// caller is who a request comes from, as its credential was checked.
type caller struct {
	claims identity.Claims
	hash   string     // the session cookie's hash, for eviction after auth changes
	watch  *credWatch // the credential re-checked while the request runs; nil: anonymous
	me     []byte     // the answer to GET /me, when the gateway gives it itself
}

// authenticate checks the credential route asks for: an API key
// (Authorization) on the routes that take one, else the session on the
// routes that need one. It writes the refusal and reports false.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request, route Route, authz string) (caller, bool) {
	c := caller{claims: identity.Claims{ClientIP: clientIP(r)}}
	switch {
	case authz != "" && (route.Access == Session || route.Access == Admin || route.Access == ServiceOrKey):
		id, ok := h.apiKey(w, r, route, authz)
		if !ok {
			return c, false
		}
		c.claims.Subject, c.claims.Role = id.UserID, id.Role
		c.watch = &credWatch{res: h.cfg.Keys, cred: authz[len("Bearer "):], claims: c.claims, key: true}
	case route.Access == Session || route.Access == Admin:
		return h.session(w, r, route, c)
	}
	return c, true
}

// session resolves the request's session for route and adds its user to
// c. It writes the refusal and reports false.
func (h *Handler) session(w http.ResponseWriter, r *http.Request, route Route, c caller) (caller, bool) {
	sid, refusal := sessionFrom(r)
	if refusal != 0 {
		apierror.Write(w, refusal)
		return c, false
	}
	if sid == "" {
		apierror.Write(w, apierror.Unauthenticated)
		return c, false
	}
	id, err := h.cfg.Resolver.Resolve(r.Context(), sid)
	switch {
	case errors.Is(err, sessions.ErrInvalid):
		apierror.Write(w, apierror.SessionInvalid)
		return c, false
	case err != nil:
		h.cfg.Log.WarnContext(r.Context(), "session resolution failed", "err", err)
		apierror.Write(w, apierror.SessionsUnavailable)
		return c, false
	}
	if route.Access == Admin && id.Role != identity.RoleAdmin {
		apierror.Write(w, apierror.AdminRequired)
		return c, false
	}
	c.claims.Subject, c.claims.Role, c.claims.SessionID = id.UserID, id.Role, id.SessionID
	c.hash = id.Hash
	c.watch = &credWatch{res: h.cfg.Resolver, cred: sid, claims: c.claims}
	if r.Method == http.MethodGet && r.URL.Path == "/me" && id.Me != nil {
		// GET /me is answered here, from the session's entry: auth's own
		// answer for this session, which the resolver serves only while it
		// is trusted (fenced against every revocation and user change
		// published before this request, and at most
		// GATEWAY_SESSION_CACHE_TTL old), exactly as it would serve the
		// identity a proxied request carries. A request the fence cannot
		// clear was resolved by auth just now.
		c.me = id.Me
	}
	return c, true
}

// apiKey resolves the API key of an Authorization header for route and
// checks it may be used there: the key's scope for the route and method,
// and its owner's role for administrators' routes. It writes the refusal
// and reports false.
func (h *Handler) apiKey(w http.ResponseWriter, r *http.Request, route Route, authz string) (sessions.Identity, bool) {
	key, ok := strings.CutPrefix(authz, "Bearer ")
	if !ok || !sessions.KeyWellFormed(key) {
		apierror.Write(w, apierror.KeyMalformed)
		return sessions.Identity{}, false
	}
	scope := APIScope(route.Service, r.Method)
	if scope == "" || h.cfg.Keys == nil {
		apierror.Write(w, apierror.KeyNotAllowed)
		return sessions.Identity{}, false
	}
	id, err := h.cfg.Keys.Resolve(sessions.WithClientIP(r.Context(), clientIP(r)), key)
	switch {
	case errors.Is(err, sessions.ErrInvalid):
		apierror.Write(w, apierror.KeyInvalid)
		return sessions.Identity{}, false
	case err != nil:
		h.cfg.Log.WarnContext(r.Context(), "api key resolution failed", "err", err)
		apierror.Write(w, apierror.KeysUnavailable)
		return sessions.Identity{}, false
	}
	if !id.HasScope(scope) {
		apierror.Write(w, apierror.KeyScopeMissing, scope)
		return sessions.Identity{}, false
	}
	if route.Access == Admin && id.Role != identity.RoleAdmin {
		apierror.Write(w, apierror.KeyOwnerNotAdmin)
		return sessions.Identity{}, false
	}
	return id, true
}

// token returns a signed token for claims and audience, reusing one signed
// for exactly the same claims during the first half of its lifetime: signing
// is the costliest step of a cached request, and every field of the claims is
// part of the key, so a role change or another session never reuses one.
func (h *Handler) token(c identity.Claims, audience string) (string, error) {
	key := audience + "|" + c.Subject + "|" + c.Role + "|" + c.SessionID + "|" + c.ClientIP
	now := time.Now()
	h.tokMu.Lock()
	ct, ok := h.tokens[key]
	h.tokMu.Unlock()
	if ok && now.Before(ct.expires) {
		return ct.token, nil
	}
	tok, err := h.cfg.Signer.Sign(c, audience)
	if err != nil || h.cfg.TokenTTL <= 0 {
		return tok, err
	}
	h.tokMu.Lock()
	if len(h.tokens) >= 100000 {
		for k, v := range h.tokens {
			if now.After(v.expires) {
				delete(h.tokens, k)
			}
		}
		if len(h.tokens) >= 100000 {
			h.tokens = map[string]cachedToken{}
		}
	}
	h.tokens[key] = cachedToken{token: tok, expires: now.Add(h.cfg.TokenTTL / 2)}
	h.tokMu.Unlock()
	return tok, nil
}

// sessionFrom takes the session id from the cookie or, for GET /me only (the
// spec's server-side runtimes), from a JSON body; both at once is refused.
func sessionFrom(r *http.Request) (sid string, refusal apierror.Kind) {
	if c, err := r.Cookie("sessionId"); err == nil {
		sid = c.Value
	}
	if r.Method != http.MethodGet || r.URL.Path != "/me" || r.Body == nil || r.Body == http.NoBody {
		return sid, 0
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<10+1))
	if err != nil && bodyStalled(r.Context()) {
		return "", apierror.BodyStalled
	}
	if err != nil {
		return "", apierror.BodyUnreadable
	}
	if len(raw) > 64<<10 {
		return "", apierror.BodyTooLarge
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil } // a retry can send it again
	r.ContentLength = int64(len(raw))
	if len(bytes.TrimSpace(raw)) == 0 {
		return sid, 0
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return "", apierror.BodyNotJSON
	}
	var b struct {
		SessionID *string `json:"sessionId"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return "", apierror.SessionBodyInvalid
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", apierror.SessionBodyTrailer
	}
	if b.SessionID == nil {
		return sid, 0
	}
	if sid != "" {
		return "", apierror.SessionAmbiguous
	}
	if *b.SessionID == "" {
		return "", apierror.SessionInvalid
	}
	return *b.SessionID, 0
}
