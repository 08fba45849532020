// Package sessions resolves a session cookie to the identity behind it by
// asking auth's GET /ms/me, and caches answers briefly. Revocations arrive
// from auth over NATS and evict at once; with a fence (Revocations.Sync) a
// cached answer is only served after every revocation published before the
// request has been applied, so a session ended through any gateway replica
// is refused by every replica from the very next request.
package sessions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Identity is what the gateway learns about a session.
type Identity struct {
	UserID    string
	Role      string
	SessionID string // public id
	Hash      string // the cookie's (or API key's) hash, the key auth and revocations use
	// Me is auth's answer to GET /me for this session, built from the
	// user document /ms/me returned (the same User, the same message), so
	// the gateway answers GET /me itself while the entry is trusted (see
	// proxy). Nil when /ms/me's answer could not be re-encoded, and for
	// API keys.
	Me []byte
	// For an API key (KeyResolver): its id and scopes; SessionID is empty.
	KeyID   string
	Scopes  []string
	expires time.Time
	// notAfter is when the session or key itself expires as auth said
	// (zero: never): a cached entry never outlives it.
	notAfter time.Time
}

// HasScope reports whether an API key's identity carries scope.
func (id Identity) HasScope(scope string) bool {
	for _, s := range id.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// Errors of Resolve.
var (
	ErrInvalid     = errors.New("invalid or expired session")
	ErrUnavailable = errors.New("auth unavailable")
)

// Hash returns the key auth stores a session under: hex(sha256(cookie)).
func Hash(sessionID string) string {
	h := sha256.Sum256([]byte(sessionID))
	return hex.EncodeToString(h[:])
}

// WellFormed reports whether s can be a session id at all (43 characters of
// base64url), so garbage never reaches auth.
func WellFormed(s string) bool {
	if len(s) != 43 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_') {
			return false
		}
	}
	return true
}

// Upstream gives the auth base URL for the next call. In the gateway it is
// auth's balancer (upstream.Group), which is also the client's transport: the
// URL names the service, and the balancer picks the replica, retrying the
// lookup once on another replica when the first fails before answering, and
// waiting GATEWAY_RETRY_WAIT for a replica when auth has none usable.
type Upstream interface{ Next() string }

// Resolver resolves and caches sessions.
type Resolver struct {
	auth       Upstream
	credential string
	client     *http.Client
	ttl        time.Duration
	timeout    time.Duration // bounds one call to auth
	group      singleflight.Group

	// fence, when set, must succeed before a cached answer is served
	// (Revocations.Sync).
	fence func(context.Context) error

	// keys: this resolver resolves API keys (GET /ms/apikey), not sessions.
	keys bool

	mu     sync.RWMutex
	byHash map[string]Identity
	gen    map[string]uint64 // per-hash generation, bumped on eviction
	epoch  uint64            // bumped by every user revocation and Clear
}

// NewResolver returns a Resolver caching answers for ttl (0 disables).
func NewResolver(auth Upstream, credential string, client *http.Client, ttl time.Duration) *Resolver {
	return &Resolver{auth: auth, credential: credential, client: client, ttl: ttl, timeout: 5 * time.Second,
		byHash: map[string]Identity{}, gen: map[string]uint64{}}
}

// NewKeyResolver returns a Resolver of API keys (Authorization: Bearer),
// asking auth's GET /ms/apikey and caching answers for ttl. Revocations name
// a key by its hash like a session, and its owner among the users.
func NewKeyResolver(auth Upstream, credential string, client *http.Client, ttl time.Duration) *Resolver {
	r := NewResolver(auth, credential, client, ttl)
	r.keys = true
	return r
}

// APIKeyPrefix starts every API key.
const APIKeyPrefix = "acme_"

// KeyWellFormed reports whether s can be an API key: the prefix and 43
// characters of base64url.
func KeyWellFormed(s string) bool {
	return len(s) == len(APIKeyPrefix)+43 && s[:len(APIKeyPrefix)] == APIKeyPrefix && WellFormed(s[len(APIKeyPrefix):])
}

type clientIPKey struct{}

// WithClientIP tells an API key lookup the client's address (auth records
// it in the audit trail when a key is used for the first time).
func WithClientIP(ctx context.Context, ip string) context.Context {
	return context.WithValue(ctx, clientIPKey{}, ip)
}

// SetTimeout bounds each call to auth (default 5 s), the balancer's wait
// for a replica included. Set it before serving.
func (r *Resolver) SetTimeout(d time.Duration) { r.timeout = d }

// SetFence makes Resolve call fence before it serves a cached answer; when
// the fence fails, Resolve asks auth instead. Set it before serving.
func (r *Resolver) SetFence(fence func(context.Context) error) { r.fence = fence }

// Resolve returns the identity of sessionID.
func (r *Resolver) Resolve(ctx context.Context, sessionID string) (Identity, error) {
	if r.keys && !KeyWellFormed(sessionID) || !r.keys && !WellFormed(sessionID) {
		return Identity{}, ErrInvalid
	}
	h := Hash(sessionID)
	// The fence first: revocations that happened before this request are
	// applied before the cache and the generations are read.
	trusted := r.ttl > 0 && (r.fence == nil || r.fence(ctx) == nil)
	r.mu.RLock()
	id, ok := r.byHash[h]
	gen, epoch := r.gen[h], r.epoch
	r.mu.RUnlock()
	if ok && trusted && time.Now().Before(id.expires) {
		return id, nil
	}
	// Concurrent lookups of one session share one call to auth, but only
	// lookups of the same generation: a request that arrives after a
	// revocation never joins a call that started before it.
	key := fmt.Sprintf("%s/%d/%d", h, gen, epoch)
	v, err, _ := r.group.Do(key, func() (any, error) {
		id, err := r.ask(ctx, sessionID)
		if err == nil && r.ttl > 0 {
			id.expires = time.Now().Add(r.ttl)
			if !id.notAfter.IsZero() && id.notAfter.Before(id.expires) {
				id.expires = id.notAfter
			}
			r.mu.Lock()
			if r.gen[h] == gen && r.epoch == epoch { // not revoked while we asked
				r.byHash[h] = id
			}
			r.mu.Unlock()
		}
		return id, err
	})
	if err != nil {
		return Identity{}, err
	}
	return v.(Identity), nil
}

type msMeAnswer struct {
	Message string          `json:"message"`
	User    json.RawMessage `json:"user"`
	Session struct {
		ID        string     `json:"id"`
		ExpiresAt *time.Time `json:"expiresAt"`
	} `json:"session"`
	APIKey struct {
		ID        string     `json:"id"`
		Scopes    []string   `json:"scopes"`
		ExpiresAt *time.Time `json:"expiresAt"`
	} `json:"apiKey"`
}

type msMeUser struct {
	ID       string `json:"id"`
	RoleName string `json:"roleName"`
}

// meAnswer is GET /me's body: auth's message and user, as auth sends them.
type meAnswer struct {
	Message string          `json:"message"`
	User    json.RawMessage `json:"user"`
}

func (r *Resolver) ask(ctx context.Context, sessionID string) (Identity, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	path, body := "/ms/me", map[string]string{"sessionId": sessionID}
	if r.keys {
		ip, _ := ctx.Value(clientIPKey{}).(string)
		path, body = "/ms/apikey", map[string]string{"apiKey": sessionID, "clientIp": ip}
	}
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.auth.Next()+path, bytes.NewReader(raw))
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Service-Credential", r.credential)
	resp, err := r.client.Do(req)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var a msMeAnswer
		var u msMeUser
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&a); err != nil ||
			json.Unmarshal(a.User, &u) != nil || u.ID == "" || r.keys && a.APIKey.ID == "" {
			return Identity{}, fmt.Errorf("%w: bad %s answer", ErrUnavailable, path)
		}
		if r.keys {
			id := Identity{UserID: u.ID, Role: u.RoleName, KeyID: a.APIKey.ID, Scopes: a.APIKey.Scopes, Hash: Hash(sessionID)}
			if a.APIKey.ExpiresAt != nil {
				id.notAfter = *a.APIKey.ExpiresAt
			}
			return id, nil
		}
		id := Identity{UserID: u.ID, Role: u.RoleName, SessionID: a.Session.ID, Hash: Hash(sessionID)}
		if a.Session.ExpiresAt != nil {
			id.notAfter = *a.Session.ExpiresAt
		}
		if me, err := json.Marshal(meAnswer{Message: a.Message, User: a.User}); err == nil {
			id.Me = me
		}
		return id, nil
	case http.StatusUnauthorized, http.StatusNotFound, http.StatusBadRequest:
		var e struct {
			Code string `json:"code"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
		if e.Code == "invalid_service_credential" {
			return Identity{}, fmt.Errorf("%w: auth refused the gateway's service credential", ErrUnavailable)
		}
		return Identity{}, ErrInvalid
	default:
		return Identity{}, fmt.Errorf("%w: %s answered %d", ErrUnavailable, path, resp.StatusCode)
	}
}

// Evict drops one session (by cookie hash) from the cache.
func (r *Resolver) Evict(hashes ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range hashes {
		delete(r.byHash, h)
		r.gen[h]++
	}
	r.trimGenerations()
}

// EvictUsers drops every cached session of these users.
func (r *Resolver) EvictUsers(userIDs ...string) {
	if len(userIDs) == 0 {
		return
	}
	set := make(map[string]bool, len(userIDs))
	for _, u := range userIDs {
		set[u] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.epoch++ // lookups in flight may be of these users
	for h, id := range r.byHash {
		if set[id.UserID] {
			delete(r.byHash, h)
			r.gen[h]++
		}
	}
	r.trimGenerations()
}

// Clear drops every cached session (revocations may have been missed).
func (r *Resolver) Clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byHash = map[string]Identity{}
	r.epoch++
}

// trimGenerations keeps the generation map from growing without bound; a
// generation only matters while a lookup for that hash is in flight, and
// bumping the epoch keeps those lookups from being stored or joined.
func (r *Resolver) trimGenerations() {
	if len(r.gen) > 100000 {
		r.gen = map[string]uint64{}
		r.epoch++
	}
}

// Sweep removes expired entries; call it periodically.
func (r *Resolver) Sweep() {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for h, id := range r.byHash {
		if now.After(id.expires) {
			delete(r.byHash, h)
		}
	}
}

// Revocation is the message auth publishes when sessions end or users change.
type Revocation struct {
	Sessions []string `json:"sessions"` // cookie hashes
	Users    []string `json:"users"`
}

// Apply evicts what a revocation names.
func (r *Resolver) Apply(rev Revocation) {
	r.Evict(rev.Sessions...)
	r.EvictUsers(rev.Users...)
}
