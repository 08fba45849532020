package files

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Link is a share link: whoever holds its token may download the file,
// without an account, until the link expires, is revoked, reaches its
// download limit, or the file is deleted. Only the token's hash is kept.
type Link struct {
	ID           string
	FileID       string
	Owner        string // the file's owner
	TokenHash    string // hex SHA-256 of the token
	CreatedAt    time.Time
	ExpiresAt    time.Time
	MaxDownloads int64 // 0: no limit
	Downloads    int64
}

// Share link rules.
const (
	DefaultLinkTTL = 7 * 24 * time.Hour
	MaxLinkTTL     = 30 * 24 * time.Hour
	// LinkKeptExpired is how long an expired link is kept (answering 410)
	// before the sweeper forgets it (then 404).
	LinkKeptExpired = 7 * 24 * time.Hour
	// tokenBytes of crypto/rand make a token: 256 bits.
	tokenBytes = 32
)

// Share link errors.
var (
	ErrLinkNotFound  = errors.New("share link not found")
	ErrLinkExpired   = errors.New("share link expired")
	ErrLinkExhausted = errors.New("share link reached its download limit")
)

// LinkStore keeps share links.
type LinkStore interface {
	InsertLink(ctx context.Context, l *Link) error
	// LinkByTokenHash returns ErrLinkNotFound for an unknown hash.
	LinkByTokenHash(ctx context.Context, hash string) (*Link, error)
	// LinksByFile returns a file's links, newest first.
	LinksByFile(ctx context.Context, fileID string) ([]*Link, error)
	// DeleteLink removes link id of fileID; ErrLinkNotFound when absent.
	DeleteLink(ctx context.Context, fileID, id string) error
	DeleteLinksByFile(ctx context.Context, fileID string) error
	// CountDownload adds one to the link's downloads unless max (> 0) is
	// reached; false when it was.
	CountDownload(ctx context.Context, id string, max int64) (bool, error)
	// DeleteLinksExpiredBefore removes links that expired before t.
	DeleteLinksExpiredBefore(ctx context.Context, t time.Time) (int64, error)
}

// newToken returns a share token (base64url, unpadded) and its hash.
func newToken() (token, hash string) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	token = base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token)
}

// HashToken is the stored form of a token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ValidToken reports whether s has the shape of a token; anything else is
// answered like an unknown token, without a lookup.
func ValidToken(s string) bool {
	if len(s) != base64.RawURLEncoding.EncodedLen(tokenBytes) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// LinkRequest is what a share link is created with; zero values take the
// defaults.
type LinkRequest struct {
	ExpiresAt    time.Time // zero: DefaultLinkTTL from now
	MaxDownloads int64     // 0: no limit
}

// BadLinkError is a LinkRequest outside the rules; its message says which.
type BadLinkError struct {
	Field, Msg string
}

func (e *BadLinkError) Error() string { return e.Field + ": " + e.Msg }

// CreateLink makes a share link to file id for its owner or an
// administrator, and returns it with its token (shown once: only the hash
// is stored).
func (s *Service) CreateLink(ctx context.Context, id string, r Reader, req LinkRequest) (*Link, string, error) {
	f, err := s.modifiable(ctx, id, r)
	if err != nil {
		return nil, "", err
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	exp := req.ExpiresAt.UTC().Truncate(time.Millisecond)
	switch {
	case req.ExpiresAt.IsZero():
		exp = now.Add(DefaultLinkTTL)
	case !exp.After(now):
		return nil, "", &BadLinkError{"expiresAt", "must be in the future"}
	case exp.Sub(now) > MaxLinkTTL:
		return nil, "", &BadLinkError{"expiresAt", fmt.Sprintf("must be at most %d days ahead", int(MaxLinkTTL/(24*time.Hour)))}
	}
	if req.MaxDownloads < 0 {
		return nil, "", &BadLinkError{"maxDownloads", "must be positive"}
	}
	token, hash := newToken()
	l := &Link{ID: NewID(), FileID: f.ID, Owner: f.Owner, TokenHash: hash, CreatedAt: now, ExpiresAt: exp, MaxDownloads: req.MaxDownloads}
	if err := s.store.InsertLink(ctx, l); err != nil {
		return nil, "", err
	}
	// The file may have been deleted meanwhile: its links must not outlive it.
	if _, err := s.store.Get(ctx, f.ID); errors.Is(err, ErrNotFound) {
		_ = s.store.DeleteLinksByFile(ctx, f.ID)
		return nil, "", ErrNotFound
	}
	s.log.Publish(ctx, LogEntry{Type: "log", Body: fmt.Sprintf("share link %s to %s created by %s, expires %s", l.ID, f.ID, r.UserID, exp.Format(time.RFC3339))})
	return l, token, nil
}

// Links lists the share links of a file to its owner or an administrator.
func (s *Service) Links(ctx context.Context, id string, r Reader) ([]*Link, error) {
	if _, err := s.modifiable(ctx, id, r); err != nil {
		return nil, err
	}
	return s.store.LinksByFile(ctx, id)
}

// RevokeLink removes a share link of a file for its owner or an
// administrator.
func (s *Service) RevokeLink(ctx context.Context, id, linkID string, r Reader) error {
	if _, err := s.modifiable(ctx, id, r); err != nil {
		return err
	}
	if !ValidID(linkID) {
		return ErrLinkNotFound
	}
	if err := s.store.DeleteLink(ctx, id, linkID); err != nil {
		return err
	}
	s.log.Publish(ctx, LogEntry{Type: "log", Body: fmt.Sprintf("share link %s to %s revoked by %s", linkID, id, r.UserID)})
	return nil
}

// Shared resolves a share token to its file: ErrLinkNotFound for malformed,
// unknown or revoked tokens and for links whose file is gone,
// ErrLinkExpired past expiry, ErrLinkExhausted once the download limit is
// reached.
func (s *Service) Shared(ctx context.Context, token string) (*File, *Link, error) {
	if !ValidToken(token) {
		return nil, nil, ErrLinkNotFound
	}
	l, err := s.store.LinkByTokenHash(ctx, HashToken(token))
	if err != nil {
		return nil, nil, err
	}
	if !s.now().Before(l.ExpiresAt) {
		return nil, nil, ErrLinkExpired
	}
	if l.MaxDownloads > 0 && l.Downloads >= l.MaxDownloads {
		return nil, nil, ErrLinkExhausted
	}
	f, err := s.store.Get(ctx, l.FileID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil, ErrLinkNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	return f, l, nil
}

// CountDownload takes one download of a limited link; ErrLinkExhausted
// when none is left (another download took the last one).
func (s *Service) CountDownload(ctx context.Context, l *Link) error {
	if l.MaxDownloads <= 0 {
		return nil
	}
	ok, err := s.store.CountDownload(ctx, l.ID, l.MaxDownloads)
	if err != nil {
		return err
	}
	if !ok {
		return ErrLinkExhausted
	}
	return nil
}

// SweepLinks forgets links expired for longer than LinkKeptExpired.
func (s *Service) SweepLinks(ctx context.Context) (int64, error) {
	return s.store.DeleteLinksExpiredBefore(ctx, s.now().Add(-LinkKeptExpired))
}

// modifiable returns file id if r may delete it or manage its links;
// ErrNotFound otherwise, as for an unknown id.
func (s *Service) modifiable(ctx context.Context, id string, r Reader) (*File, error) {
	if !ValidID(id) {
		return nil, ErrNotFound
	}
	f, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !f.CanModify(r) {
		return nil, ErrNotFound
	}
	return f, nil
}
