// Package backup takes, checks and restores backups of the platform's data:
// the MongoDB database in mongodump's directory layout, every object of the
// files bucket in a layout `mc mirror` reads back, and a manifest of both.
//
// A backup is one directory or one object prefix (a Target):
//
//	manifest.json                         written last: a backup without one is incomplete
//	mongo/<db>/<collection>.bson          the documents, concatenated (mongodump's layout)
//	mongo/<db>/<collection>.metadata.json options and indexes (mongodump's layout)
//	objects/<bucket>/<key>                every object, byte for byte
//	devstack/dev-secrets.json             `make run`'s secrets, only in backups of `make run`
//
// With an age recipient every file is encrypted on its own and its name ends
// in ".age"; nothing of the data is readable without the identity.
package backup

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Format is the manifest format this package writes and reads.
const Format = 1

// ManifestName is the manifest's name in a backup (before any ".age").
const ManifestName = "manifest.json"

// Manifest describes one backup: what it holds and how to check it.
type Manifest struct {
	Format int `json:"format"`
	// PlatformVersion is ACME_VERSION of the platform that took it.
	PlatformVersion string `json:"platformVersion"`
	// Cut is when the records were read from: every write acknowledged
	// before it is in the backup. CutEnd is when the last record was read:
	// nothing written after it is in the backup. Writes between the two
	// may be in it or not.
	Cut      time.Time `json:"cut"`
	CutEnd   time.Time `json:"cutEnd"`
	Finished time.Time `json:"finished"`
	Database string    `json:"database"`
	Bucket   string    `json:"bucket"`
	// Encrypted: every file is age-encrypted ("<name>.age").
	Encrypted   bool         `json:"encrypted"`
	Collections []Collection `json:"collections"`
	Objects     []Object     `json:"objects"`
	// MFAKeyCheck is an HMAC of a fixed text under AUTH_MFA_KEY: a restore
	// compares it with its own key's and refuses another key, which could
	// not open the TOTP secrets. Empty: taken without AUTH_MFA_KEY.
	MFAKeyCheck string `json:"mfaKeyCheck,omitempty"`
	// DevSecrets: devstack/dev-secrets.json is in the backup (`make run`).
	DevSecrets bool `json:"devSecrets,omitempty"`
	// Dropped are records left out because their object was removed while
	// the backup ran (the file was deleted after the cut).
	Dropped []string `json:"dropped,omitempty"`
	// Files are every file of the backup but the manifest, with their
	// hashes as stored (after any encryption), so a damaged file is named.
	Files []File `json:"files"`
}

// Collection is one collection of the database.
type Collection struct {
	Name      string `json:"name"`
	Documents int64  `json:"documents"`
	// Bytes and SHA256 are of the .bson file's plain content.
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Object is one object of the bucket.
type Object struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// ContentType is the object's, set again on restore.
	ContentType string `json:"contentType,omitempty"`
}

// File is one stored file of the backup.
type File struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// MFAKeyCheck is the check value of key (AUTH_MFA_KEY): it tells whether two
// keys are the same without holding either.
func MFAKeyCheck(key string) string {
	if key == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("acme-backup: AUTH_MFA_KEY check, format 1"))
	return hex.EncodeToString(m.Sum(nil))
}

// ErrMFAKey is the reason a restore into a platform with another
// AUTH_MFA_KEY is refused.
type ErrMFAKey struct{ Backup, Platform bool }

func (e ErrMFAKey) Error() string {
	switch {
	case !e.Platform:
		return "refused: the backup's TOTP secrets are sealed with an AUTH_MFA_KEY and this restore was given none (set AUTH_MFA_KEY or AUTH_MFA_KEY_FILE to the key of the platform that took it)"
	case !e.Backup:
		return "refused: the backup was taken without AUTH_MFA_KEY, so it cannot be told whether its TOTP secrets open with this platform's key"
	}
	return "refused: the backup's TOTP secrets are sealed with another AUTH_MFA_KEY than this platform's; they could not be opened (give this platform the key of the platform that took the backup, kept with its secrets)"
}

func (m *Manifest) check() error {
	if m.Format != Format {
		return fmt.Errorf("manifest format %d; this acme-backup reads format %d", m.Format, Format)
	}
	if m.Database == "" || m.Bucket == "" {
		return fmt.Errorf("manifest names no database or bucket")
	}
	return nil
}

func jsonIndent(m *Manifest) ([]byte, error) { return json.MarshalIndent(m, "", " ") }

func parseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestName, err)
	}
	return &m, m.check()
}
