// Package files is the domain of the files service: file and image records,
// the rules for who may read them, and the upload flow that keeps object
// storage and records consistent (object first, record after; no orphans).
//
// It declares the ports it needs (Store for records, ObjectStore for bytes,
// LogPublisher for notable events); adapters live in mongostore and s3store.
package files

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"
)

// Kind tells how a record was uploaded and so how it is served.
type Kind string

const (
	// KindFile was uploaded through POST /upload/file and is downloaded as an
	// attachment by its readers.
	KindFile Kind = "file"
	// KindImage was re-encoded by POST /upload/image and is served publicly
	// at its own URL.
	KindImage Kind = "image"
)

// EncodingGzip is the stored encoding of compressible files.
const EncodingGzip = "gzip"

// File is one stored object and what we know about it.
type File struct {
	ID        string
	Kind      Kind
	Owner     string // user id of the uploader
	Type      string // MIME type sniffed from the content
	Key       string // object key in the bucket; generated, never user input
	Name      string // original file name, cleaned
	Meta      *string
	Size      int64  // bytes of the content as uploaded (images: as re-encoded)
	SHA256    string // hex digest of those bytes
	Encoding  string // "" (stored as is) or EncodingGzip
	Stored    int64  // bytes of the stored object (differs from Size when gzip)
	Width     int    // images only
	Height    int    // images only
	CreatedAt time.Time
}

// ETag is a strong validator of the content as uploaded.
func (f *File) ETag() string { return `"` + f.SHA256 + `"` }

// GzipETag is the validator of the gzip-encoded representation.
func (f *File) GzipETag() string { return `"` + f.SHA256 + `-gzip"` }

// Reader is who asks to read a record.
type Reader struct {
	UserID string // empty for anonymous callers
	Admin  bool
}

// CanRead applies the access rule: uploader and admins, or every signed-in
// user when readAll is set.
func (f *File) CanRead(r Reader, readAll bool) bool {
	if r.UserID == "" {
		return false
	}
	return r.Admin || readAll || r.UserID == f.Owner
}

// CanModify applies the rule for deleting a record and managing its share
// links: its uploader and administrators only (READ_ALL grants reading,
// never more).
func (f *File) CanModify(r Reader) bool {
	return r.UserID != "" && (r.Admin || r.UserID == f.Owner)
}

// Domain errors. Adapters wrap driver errors into these; the HTTP layer maps
// them to statuses.
var (
	ErrNotFound      = errors.New("file not found")
	ErrUnavailable   = errors.New("storage unavailable")
	ErrTooLarge      = errors.New("upload exceeds the maximum size")
	ErrEmpty         = errors.New("file is empty")
	ErrConflict      = errors.New("id already taken")
	ErrNotImage      = errors.New("content is not a JPEG, PNG, GIF or WebP image")
	ErrImageTooLarge = errors.New("image dimensions exceed the pixel limit")
	// ErrImageTooMuchMemory: decoding and re-encoding the image would take
	// more memory than one image may use (Config.Image.MaxMemory).
	ErrImageTooMuchMemory = errors.New("image needs more memory than one image may use")
	// ErrImageTooComplex: decoding the image would take more work than one
	// image may (a JPEG's scans over Config.Image.MaxScans).
	ErrImageTooComplex = errors.New("image needs more work to decode than one image may take")
	// ErrImageTimeout: processing the image passed Config.ImageTimeout.
	ErrImageTimeout = errors.New("processing the image took longer than one image may take")
	// ErrClientGone: the client closed its connection while its image was
	// being processed; the work was dropped.
	ErrClientGone    = errors.New("the client closed the connection")
	ErrBadImage      = errors.New("image data is corrupt")
	ErrBusy          = errors.New("too many images being processed")
	ErrQuotaExceeded = errors.New("the upload would exceed the owner's storage quota")
)

// SourceError means reading the client's upload failed (truncated or
// malformed body, client gone): the client's fault, not storage's.
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return "reading upload: " + e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// Store keeps file records and each owner's account.
type Store interface {
	// Insert writes a record. Its bytes are reserved first (Reserve).
	Insert(ctx context.Context, f *File) error
	// Get returns ErrNotFound for an unknown id.
	Get(ctx context.Context, id string) (*File, error)
	// ListByOwner returns up to limit records of owner, newest first, after
	// skipping skip of them.
	ListByOwner(ctx context.Context, owner string, skip, limit int) ([]*File, error)
	// Existing returns which of ids have a record.
	Existing(ctx context.Context, ids []string) (map[string]bool, error)
	// Delete removes a record and gives its bytes back to its owner's
	// account; ErrNotFound when there is none.
	Delete(ctx context.Context, id string) error
	// TakeVariant counts one more variant of image id if it has fewer than
	// max, in one atomic write; ok is false when it has max already (or
	// there is no such image).
	TakeVariant(ctx context.Context, id string, max int64) (ok bool, err error)
	// GiveBackVariant uncounts a variant TakeVariant counted.
	GiveBackVariant(ctx context.Context, id string) error

	AccountStore
	LinkStore
}

// Account is one owner's storage account: the bytes and number of their
// records (reservations of uploads in flight included) and their own
// quota, kept together so that a reservation is checked against the quota
// in the same atomic write.
type Account struct {
	Bytes, Count int64
	Quota        int64 // the owner's own quota, when OwnQuota
	OwnQuota     bool  // false: the service's default quota applies
}

// AccountStore keeps each owner's Account.
type AccountStore interface {
	// Account returns owner's account, made from their records when there
	// is none yet.
	Account(ctx context.Context, owner string) (Account, error)
	// Reserve adds n bytes and one record to owner's account, in one
	// atomic write, if the account still has the quota of expect (its own
	// quota, or none) and holds at most max-n bytes (max < 0: no limit).
	// When it does not, ok is false and the account returned is the one
	// stored now.
	Reserve(ctx context.Context, owner string, n int64, expect Account, max int64) (acct Account, ok bool, err error)
	// Release gives back a reservation of n bytes and one record.
	Release(ctx context.Context, owner string, n int64) error
	// SetQuota sets owner's own quota, or removes it when quota is nil.
	SetQuota(ctx context.Context, owner string, quota *int64) error
	// ForgetUsage drops owner's count of bytes and records (not their own
	// quota), so that it is made again from the records on next use (an
	// erased owner's, whose count a process killed between a record's
	// delete and its count may have left off).
	ForgetUsage(ctx context.Context, owner string) error
}

// Object is a stored object opened for reading.
type Object struct {
	Body io.ReadCloser
	Size int64 // bytes Body yields
}

// ObjectInfo describes a listed object.
type ObjectInfo struct {
	Key          string
	LastModified time.Time
}

// ObjectStat describes a stored variant.
type ObjectStat struct {
	Size   int64
	SHA256 string // hex, as PutNew was given it
}

// PutResult is what the object store reports after a put.
type PutResult struct {
	Size int64
}

// ObjectStore keeps file bytes.
type ObjectStore interface {
	// Put streams r to key until EOF (size -1 when unknown). It fails
	// without leaving an object when r fails.
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (PutResult, error)
	// Get opens key, or the byte range [start, end] when end >= 0. It
	// returns ErrNotFound for a missing key.
	Get(ctx context.Context, key string, start, end int64) (*Object, error)
	Remove(ctx context.Context, key string) error
	// PutNew writes data to key only when no object is there: ErrConflict
	// when one is (another writer stored it first). sha256 is kept with it.
	PutNew(ctx context.Context, key string, data []byte, contentType, sha256 string) error
	// Stat describes key; ErrNotFound when it is missing.
	Stat(ctx context.Context, key string) (ObjectStat, error)
	// List yields the objects under prefix.
	List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error]
}

// Presigner is an ObjectStore that can let another program read one object
// without credentials: a GET URL valid for expiry, and the equivalent
// servers (host:port) that may answer it (none: the URL's host alone).
type Presigner interface {
	Presign(ctx context.Context, key string, expiry time.Duration) (url string, nodes []string, err error)
}

// LogEntry is a notable event. Type is the logs service's type: "log",
// "error" or "db".
type LogEntry struct {
	Type string
	Body string
}

// LogPublisher receives notable events. Today the app writes them to its
// structured log; publishing them to the logs service over NATS plugs in here.
type LogPublisher interface {
	Publish(ctx context.Context, e LogEntry)
}

// NewID returns a random 128-bit id as 32 lower-case hex characters.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// ValidID reports whether s has the shape of an id; anything else is
// answered like an unknown id, without a lookup.
func ValidID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Key prefixes: every object this service writes lives under one of them.
const (
	filesPrefix  = "files/"
	imagesPrefix = "images/"
)

// ObjectKey is the key of a new object: kind prefix, year and month of the
// upload, and the record id. No user input reaches it.
func ObjectKey(k Kind, id string, t time.Time) string {
	p := filesPrefix
	if k == KindImage {
		p = imagesPrefix
	}
	return fmt.Sprintf("%s%04d/%02d/%s", p, t.UTC().Year(), int(t.UTC().Month()), id)
}

// IDFromKey returns the record id of a key this service generated, or false
// for any other key (which the sweeper then leaves alone).
func IDFromKey(key string) (string, bool) {
	var rest string
	n := 3
	switch {
	case strings.HasPrefix(key, filesPrefix):
		rest = key[len(filesPrefix):]
	case strings.HasPrefix(key, imagesPrefix):
		rest = key[len(imagesPrefix):]
	case strings.HasPrefix(key, variantsPrefix): // a variant's: its image's id
		rest, n = key[len(variantsPrefix):], 4
	default:
		return "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != n || len(parts[0]) != 4 || len(parts[1]) != 2 || !ValidID(parts[2]) || n == 4 && !variantName(parts[3]) {
		return "", false
	}
	return parts[2], true
}
