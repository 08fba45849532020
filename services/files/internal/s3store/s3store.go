// Package s3store keeps file bytes in an S3-compatible object store (MinIO
// in tests and development) with minio-go, translating its errors into the
// files domain's.
package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/acme/platform/pkg/failover"
	"github.com/acme/platform/pkg/resume"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Options configure the store.
type Options struct {
	// Endpoint is host:port, or the nodes of one distributed MinIO
	// separated by commas: requests then go to whichever node is ready
	// (pkg/failover), and are signed for the first.
	Endpoint  string
	AccessKey string
	SecretKey string
	Bucket    string
	UseTLS    bool
	// PartSize is the multipart part size of streamed uploads (min 5 MiB);
	// PartSize*UploadThreads is the memory one upload holds.
	PartSize      uint64
	UploadThreads uint
	MaxRetries    int
}

// Store is a files.ObjectStore on one bucket.
type Store struct {
	client *minio.Client
	core   minio.Core
	bucket string
	opts   Options
	nodes  *failover.Dialer // nil with one endpoint
	// nodeList are the endpoints when there are several (nil with one).
	nodeList []string

	presignMu sync.Mutex
	presigned map[string]presignedURL // by key
}

var _ files.ObjectStore = (*Store)(nil)

// New returns a store; it does not contact the server.
func New(o Options) (*Store, error) {
	if o.PartSize < 5<<20 {
		o.PartSize = 5 << 20
	}
	if o.UploadThreads == 0 {
		o.UploadThreads = 1
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 3
	}
	endpoints := failover.Split(o.Endpoint)
	if len(endpoints) == 0 {
		return nil, errors.New("s3 client: no endpoint")
	}
	mo := &minio.Options{
		Creds:      credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""),
		Secure:     o.UseTLS,
		MaxRetries: o.MaxRetries,
	}
	var nodes *failover.Dialer
	var nodeList []string
	if len(endpoints) > 1 {
		nodeList = endpoints
		t, err := minio.DefaultTransport(o.UseTLS)
		if err != nil {
			return nil, fmt.Errorf("s3 client: %w", err)
		}
		scheme := "http"
		if o.UseTLS {
			scheme = "https"
		}
		nodes, err = failover.New(endpoints, failover.Options{ProbeURL: scheme + "://%s/minio/health/ready"})
		if err != nil {
			return nil, fmt.Errorf("S3 endpoints: %w", err)
		}
		t.DialContext = nodes.DialContext
		mo.Transport = t
	}
	c, err := minio.New(endpoints[0], mo)
	if err != nil {
		if nodes != nil {
			nodes.Close()
		}
		return nil, fmt.Errorf("s3 client: %w", err)
	}
	return &Store{client: c, core: minio.Core{Client: c}, bucket: o.Bucket, opts: o, nodes: nodes, nodeList: nodeList, presigned: map[string]presignedURL{}}, nil
}

// Close stops the readiness probes of the nodes (several endpoints).
func (s *Store) Close() {
	if s.nodes != nil {
		s.nodes.Close()
	}
}

// Client exposes the minio client (benchmarks compare against it).
func (s *Store) Client() *minio.Client { return s.client }

// EnsureBucket creates the bucket unless it exists.
func (s *Store) EnsureBucket(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return mapErr(err)
	}
	if ok {
		return nil
	}
	if err := s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{}); err != nil {
		code := minio.ToErrorResponse(err).Code
		if code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			return nil // another replica won the race
		}
		return mapErr(err)
	}
	return nil
}

// Ping checks that the bucket exists (readiness).
func (s *Store) Ping(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return mapErr(err)
	}
	if !ok {
		return fmt.Errorf("%w: bucket %q does not exist", files.ErrUnavailable, s.bucket)
	}
	return nil
}

// SmallObject is the largest upload of unknown size written with one
// request: Put reads up to this much first, and a body that ends within it
// is sent with its size. minio-go streams a body of unknown size as a
// multipart upload, holding PartSize*UploadThreads bytes (16 MiB by
// default) however small the body is; for the many small files of a
// typical load that was most of the files service's memory and CPU.
const SmallObject = 1 << 20

// smallBuffers are SmallObject-byte buffers for Put.
var smallBuffers = sync.Pool{New: func() any { b := make([]byte, SmallObject); return &b }}

// Put streams r into key. With an unknown size, a body of at most
// SmallObject bytes is read whole and written with one request; a larger
// one as a multipart upload with PartSize parts, UploadThreads of them in
// flight, so memory stays at PartSize*UploadThreads; minio-go aborts the
// multipart upload when r fails, leaving no object.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (files.PutResult, error) {
	if size < 0 {
		bp := smallBuffers.Get().(*[]byte)
		defer smallBuffers.Put(bp)
		n, err := io.ReadFull(r, *bp)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF: // all of it
			return s.putWhole(ctx, key, (*bp)[:n], contentType)
		case err != nil:
			return files.PutResult{}, mapErr(err)
		default:
			r = io.MultiReader(bytes.NewReader((*bp)[:n]), r)
		}
	}
	opts := minio.PutObjectOptions{
		ContentType: contentType,
		PartSize:    s.opts.PartSize,
		NumThreads:  s.opts.UploadThreads,
	}
	if size < 0 && s.opts.UploadThreads > 1 {
		opts.ConcurrentStreamParts = true
	}
	info, err := s.client.PutObject(ctx, s.bucket, key, r, size, opts)
	if err != nil {
		return files.PutResult{}, mapErr(err)
	}
	return files.PutResult{Size: info.Size}, nil
}

// putWhole writes b, held whole in memory, with one request whose
// signature covers the payload's SHA-256, computed here in one pass.
// minio-go would otherwise sign it in chunks over plain HTTP
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD), which MinIO verifies at a higher
// cost per request; either way MinIO refuses a body that does not match
// what was signed, so the bytes stay as protected as before.
func (s *Store) putWhole(ctx context.Context, key string, b []byte, contentType string) (files.PutResult, error) {
	sum := sha256.Sum256(b)
	info, err := s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(b), int64(len(b)), "", hex.EncodeToString(sum[:]),
		minio.PutObjectOptions{ContentType: contentType, DisableContentSha256: true})
	if err != nil {
		return files.PutResult{}, mapErr(err)
	}
	return files.PutResult{Size: info.Size}, nil
}

// Get opens key (or a byte range of it) with a single request, so a
// missing key is reported here and not on the first read.
func (s *Store) Get(ctx context.Context, key string, start, end int64) (*files.Object, error) {
	return s.get(ctx, key, start, end, s.getObject)
}

// getter opens bytes off..end of key (to its end when end < 0), of the
// version etag when etag is not empty.
type getter func(ctx context.Context, key string, off, end int64, etag string) (io.ReadCloser, minio.ObjectInfo, error)

func (s *Store) getObject(ctx context.Context, key string, off, end int64, etag string) (io.ReadCloser, minio.ObjectInfo, error) {
	var opts minio.GetObjectOptions
	if end >= 0 {
		if err := opts.SetRange(off, end); err != nil {
			return nil, minio.ObjectInfo{}, err
		}
	}
	if etag != "" {
		if err := opts.SetMatchETag(etag); err != nil {
			return nil, minio.ObjectInfo{}, err
		}
	}
	body, info, _, err := s.core.GetObject(ctx, s.bucket, key, opts)
	return body, info, err
}

// get opens the object through open; a read that fails (a MinIO node killed
// mid-download, another node of the same cluster taking over) asks again,
// through open, for the bytes not yet read, of the same version.
func (s *Store) get(ctx context.Context, key string, start, end int64, open getter) (*files.Object, error) {
	body, info, err := open(ctx, key, start, end, "")
	if err != nil {
		return nil, mapErr(err)
	}
	reopen := func(ctx context.Context, off, end int64, etag string) (io.ReadCloser, error) {
		body, _, err := open(ctx, key, off, end, etag)
		return body, err
	}
	r := resume.New(ctx, reopen, body, info.ETag, start, start+info.Size-1)
	return &files.Object{Body: r, Size: info.Size}, nil
}

// Presign returns a GET of key valid for at least half of expiry, and with
// several endpoints the nodes that may answer it: the URL names the first,
// like every request of this store. URLs are signed locally (no request)
// and reused while they have more than half of expiry left, so a file
// downloaded often is signed once per half expiry (signing costs tens of
// microseconds).
func (s *Store) Presign(ctx context.Context, key string, expiry time.Duration) (string, []string, error) {
	now := time.Now()
	s.presignMu.Lock()
	p, ok := s.presigned[key]
	s.presignMu.Unlock()
	if ok && p.expiry == expiry && now.Before(p.reuseUntil) {
		return p.url, s.nodeList, nil
	}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, key, expiry, nil)
	if err != nil {
		return "", nil, mapErr(err)
	}
	p = presignedURL{url: u.String(), expiry: expiry, reuseUntil: now.Add(expiry / 2)}
	s.presignMu.Lock()
	if len(s.presigned) >= maxPresigned {
		for k, old := range s.presigned {
			if !now.Before(old.reuseUntil) {
				delete(s.presigned, k)
			}
		}
		if len(s.presigned) >= maxPresigned {
			clear(s.presigned)
		}
	}
	s.presigned[key] = p
	s.presignMu.Unlock()
	return p.url, s.nodeList, nil
}

// maxPresigned bounds the presigned URLs kept for reuse.
const maxPresigned = 10000

type presignedURL struct {
	url        string
	expiry     time.Duration
	reuseUntil time.Time
}

// sha256Meta is the user metadata PutNew keeps a variant's digest in.
const sha256Meta = "Sha256"

// PutNew writes data to key with one conditional request (If-None-Match:
// *): when an object is there already, nothing is written and the answer
// is files.ErrConflict, so of several writers of one key the first wins.
func (s *Store) PutNew(ctx context.Context, key string, data []byte, contentType, sha256 string) error {
	opts := minio.PutObjectOptions{ContentType: contentType, UserMetadata: map[string]string{sha256Meta: sha256},
		DisableMultipart: true}
	opts.SetMatchETagExcept("*")
	_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		if r := minio.ToErrorResponse(err); r.StatusCode == http.StatusPreconditionFailed || r.Code == "PreconditionFailed" {
			return fmt.Errorf("%w: %s exists", files.ErrConflict, key)
		}
		return mapErr(err)
	}
	return nil
}

// Stat describes key with one HEAD request.
func (s *Store) Stat(ctx context.Context, key string) (files.ObjectStat, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return files.ObjectStat{}, mapErr(err)
	}
	return files.ObjectStat{Size: info.Size, SHA256: info.UserMetadata[sha256Meta]}, nil
}

// Remove deletes key; a missing key is not an error.
func (s *Store) Remove(ctx context.Context, key string) error {
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		if errors.Is(mapErr(err), files.ErrNotFound) {
			return nil
		}
		return mapErr(err)
	}
	return nil
}

// List yields the objects under prefix.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[files.ObjectInfo, error] {
	return func(yield func(files.ObjectInfo, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for o := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				yield(files.ObjectInfo{}, mapErr(o.Err))
				return
			}
			if !yield(files.ObjectInfo{Key: o.Key, LastModified: o.LastModified}, nil) {
				return
			}
		}
	}
}

// mapErr turns minio-go errors into domain errors: missing keys into
// ErrNotFound, outages (network errors, 5xx) into ErrUnavailable.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == "NoSuchKey":
		return fmt.Errorf("%w: %v", files.ErrNotFound, err)
	case resp.StatusCode >= 500, resp.Code == "NoSuchBucket", resp.Code == "XMinioServerNotInitialized":
		return fmt.Errorf("%w: %v", files.ErrUnavailable, err)
	case resp.StatusCode == http.StatusNotFound && resp.Code == "":
		return fmt.Errorf("%w: %v", files.ErrNotFound, err)
	}
	var ne net.Error
	var ue *url.Error
	if errors.As(err, &ne) || errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %v", files.ErrUnavailable, err)
	}
	return err
}
