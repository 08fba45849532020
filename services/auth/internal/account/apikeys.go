package account

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"time"
)

// API key scopes: what a key may be used for, on top of what its owner's
// role allows.
const (
	ScopeLogsWrite  = "logs:write"
	ScopeLogsRead   = "logs:read"
	ScopeFilesRead  = "files:read"
	ScopeFilesWrite = "files:write"
)

// Scopes lists every scope.
var Scopes = []string{ScopeLogsWrite, ScopeLogsRead, ScopeFilesRead, ScopeFilesWrite}

// APIKeyPrefix starts every API key secret, so that a key is recognisable
// (in a leaked file, by a secret scanner) and never taken for a session.
const APIKeyPrefix = "acme_"

// apiKeyLength is the length of a secret: the prefix and 32 random bytes
// in base64url.
const apiKeyLength = len(APIKeyPrefix) + 43

// maxKeysPerUser bounds the keys one user can hold.
const maxKeysPerUser = 100

// APIKey is a named secret of a user for programs. Hash is the hex SHA-256
// of the secret (HashSecret), the only form stored; Hint is its first
// characters, to recognise it in a listing.
type APIKey struct {
	ID         string
	UserID     string
	Name       string
	Scopes     []string
	Hash       string
	Hint       string
	CreatedBy  string
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
}

// APIKeyStore keeps API keys.
type APIKeyStore interface {
	// Create stores k (ID empty) and returns it with its ID.
	Create(ctx context.Context, k APIKey) (APIKey, error)
	// ByHash finds a key by the hash of its secret; ErrAPIKeyNotFound.
	ByHash(ctx context.Context, hash string) (APIKey, error)
	// ByID finds one of userID's keys; ErrAPIKeyNotFound (also for a
	// malformed id).
	ByID(ctx context.Context, userID, id string) (APIKey, error)
	ListByUser(ctx context.Context, userID string) ([]APIKey, error)
	CountByUser(ctx context.Context, userID string) (int64, error)
	// Delete removes one of userID's keys; ErrAPIKeyNotFound.
	Delete(ctx context.Context, userID, id string) error
	// DeleteByUser removes every key of userID and returns their hashes.
	DeleteByUser(ctx context.Context, userID string) ([]string, error)
	// Touch sets lastUsedAt to now if it is still prev (nil: never used)
	// and reports whether this call changed it.
	Touch(ctx context.Context, id string, prev *time.Time, now time.Time) (bool, error)
}

// API key errors.
var (
	ErrAPIKeyNotFound = errors.New("api key not found")
	ErrInvalidAPIKey  = errors.New("invalid, expired or revoked api key")
	ErrTooManyKeys    = errors.New("too many api keys")
)

// SetAPIKeys enables API keys. Set it before serving.
func (s *Service) SetAPIKeys(store APIKeyStore) { s.keys = store }

// NewAPIKeyInput asks for a key.
type NewAPIKeyInput struct {
	Name      string
	Scopes    []string
	ExpiresAt *time.Time
}

// CreateAPIKey creates a key of owner (the caller, or any user when an
// administrator asks) and returns it with its secret, which is shown once
// and never stored.
func (s *Service) CreateAPIKey(ctx context.Context, c Caller, ownerID string, in NewAPIKeyInput) (APIKey, string, error) {
	name, err := validateText("name", in.Name, maxName, true, displayText)
	if err != nil {
		return APIKey{}, "", err
	}
	if len(in.Scopes) == 0 {
		return APIKey{}, "", invalid("scopes", "invalid_scopes", "scopes must name at least one of "+strings.Join(Scopes, ", "))
	}
	scopes := make([]string, 0, len(in.Scopes))
	for _, sc := range in.Scopes {
		if !slices.Contains(Scopes, sc) {
			return APIKey{}, "", invalid("scopes", "invalid_scopes", "unknown scope "+quote(sc)+": want "+strings.Join(Scopes, ", "))
		}
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	slices.Sort(scopes)
	t := s.now()
	if in.ExpiresAt != nil {
		e := in.ExpiresAt.UTC().Truncate(time.Millisecond)
		if !e.After(t) {
			return APIKey{}, "", invalid("expiresAt", "invalid_value", "expiresAt must be in the future")
		}
		in.ExpiresAt = &e
	}
	owner, err := s.users.ByID(ctx, ownerID)
	if err != nil {
		if ownerID == c.UserID && errors.Is(err, ErrUserNotFound) {
			return APIKey{}, "", ErrUserGone
		}
		return APIKey{}, "", err
	}
	n, err := s.keys.CountByUser(ctx, owner.ID)
	if err != nil {
		return APIKey{}, "", err
	}
	if n >= maxKeysPerUser {
		return APIKey{}, "", ErrTooManyKeys
	}
	secret := APIKeyPrefix + base64.RawURLEncoding.EncodeToString(randomBytes(32))
	k, err := s.keys.Create(ctx, APIKey{
		UserID: owner.ID, Name: name, Scopes: scopes, Hash: HashSecret(secret), Hint: secret[:len(APIKeyPrefix)+6],
		CreatedBy: c.UserID, CreatedAt: t, ExpiresAt: in.ExpiresAt,
	})
	if err != nil {
		return APIKey{}, "", err
	}
	s.event(ctx, Event{Type: EventAPIKeyCreated, Actor: c.UserID, Target: owner.ID, TargetEmail: owner.Email, Client: c.Client,
		Detail: map[string]any{"key": k.ID, "name": k.Name, "scopes": k.Scopes}})
	return k, secret, nil
}

func quote(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return `"` + s + `"`
}

// APIKeys lists a user's keys, newest first.
func (s *Service) APIKeys(ctx context.Context, ownerID string) ([]APIKey, error) {
	if _, err := s.users.ByID(ctx, ownerID); err != nil {
		return nil, err
	}
	return s.keys.ListByUser(ctx, ownerID)
}

// RevokeAPIKey deletes one of owner's keys; every gateway refuses it from
// the next request on (the revocation names its hash, like a session's).
func (s *Service) RevokeAPIKey(ctx context.Context, c Caller, ownerID, keyID string) error {
	k, err := s.keys.ByID(ctx, ownerID, keyID)
	if err != nil {
		return err
	}
	if err := s.keys.Delete(ctx, ownerID, k.ID); err != nil {
		return err
	}
	s.revoke(ctx, Revocation{Sessions: []string{k.Hash}})
	s.event(ctx, Event{Type: EventAPIKeyRevoked, Actor: c.UserID, Target: ownerID, Client: c.Client, Detail: map[string]any{"key": k.ID, "name": k.Name}})
	return nil
}

// ValidAPIKey reports whether s has the form of an API key secret.
func ValidAPIKey(s string) bool {
	if len(s) != apiKeyLength || !strings.HasPrefix(s, APIKeyPrefix) {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(s[len(APIKeyPrefix):])
	return err == nil && len(b) == 32
}

// ResolveAPIKey returns the key behind a secret and its owner, recording
// use (at most once per session touch interval); ErrInvalidAPIKey for
// anything unusable.
func (s *Service) ResolveAPIKey(ctx context.Context, secret string, c Client) (User, APIKey, error) {
	if s.keys == nil || !ValidAPIKey(secret) {
		return User{}, APIKey{}, ErrInvalidAPIKey
	}
	k, err := s.keys.ByHash(ctx, HashSecret(secret))
	if errors.Is(err, ErrAPIKeyNotFound) {
		return User{}, APIKey{}, ErrInvalidAPIKey
	}
	if err != nil {
		return User{}, APIKey{}, err
	}
	t := s.now()
	if k.ExpiresAt != nil && !t.Before(*k.ExpiresAt) {
		return User{}, APIKey{}, ErrInvalidAPIKey
	}
	u, err := s.userByID(ctx, k.UserID)
	if errors.Is(err, ErrUserNotFound) {
		return User{}, APIKey{}, ErrInvalidAPIKey
	}
	if err != nil {
		return User{}, APIKey{}, err
	}
	if k.LastUsedAt == nil || t.Sub(*k.LastUsedAt) >= s.cfg.TouchInterval {
		first := k.LastUsedAt == nil
		changed, err := s.keys.Touch(ctx, k.ID, k.LastUsedAt, t)
		if err != nil {
			s.log.WarnContext(ctx, "record api key use", "key", k.ID, "err", err)
		} else if changed {
			k.LastUsedAt = &t
			if first {
				s.event(ctx, Event{Type: EventAPIKeyFirstUsed, Actor: u.ID, Target: u.ID, TargetEmail: u.Email, Client: c, Detail: map[string]any{"key": k.ID, "name": k.Name}})
			}
		}
	}
	return u, k, nil
}
