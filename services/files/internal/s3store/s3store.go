// Package s3store keeps file bytes in an S3-compatible object store (MinIO
// in tests and development) with minio-go, translating its errors into the
// files domain's.
package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"

	"github.com/acme/platform/pkg/failover"
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
	if len(endpoints) > 1 {
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
	return &Store{client: c, core: minio.Core{Client: c}, bucket: o.Bucket, opts: o, nodes: nodes}, nil
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

// Put streams r into key. With an unknown size the object is written as a
// multipart upload with PartSize parts, UploadThreads of them in flight, so
// memory stays at PartSize*UploadThreads; minio-go aborts the multipart
// upload when r fails, leaving no object.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (files.PutResult, error) {
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

// Get opens key (or a byte range of it) with a single request, so a
// missing key is reported here and not on the first read.
func (s *Store) Get(ctx context.Context, key string, start, end int64) (*files.Object, error) {
	var opts minio.GetObjectOptions
	if end >= 0 {
		if err := opts.SetRange(start, end); err != nil {
			return nil, err
		}
	}
	body, info, _, err := s.core.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, mapErr(err)
	}
	r := &resumer{s: s, ctx: ctx, key: key, etag: info.ETag, off: start, end: start + info.Size - 1, body: body}
	return &files.Object{Body: r, Size: info.Size}, nil
}

// resumer is an object's body that survives the loss of the server sending
// it (a MinIO node killed mid-download, another node of the same cluster
// taking over): when a read fails, it asks again for the bytes not yet
// read, of the same version of the object (If-Match its ETag), up to
// resumeTries times per body.
type resumer struct {
	s         *Store
	ctx       context.Context
	key, etag string
	off, end  int64 // next byte to read, last byte (inclusive)
	body      io.ReadCloser
	tries     int
}

const resumeTries = 3

func (r *resumer) Read(p []byte) (int, error) {
	for {
		n, err := r.body.Read(p)
		r.off += int64(n)
		if err != nil && err != io.EOF && r.off > r.end {
			return n, io.EOF // every byte arrived before the failure
		}
		if err == nil || err == io.EOF || n > 0 || r.tries >= resumeTries || r.ctx.Err() != nil {
			if err != nil && err != io.EOF && n > 0 {
				err = nil // the bytes first; the next read fails or resumes
			}
			return n, err
		}
		r.tries++
		var opts minio.GetObjectOptions
		if rerr := opts.SetRange(r.off, r.end); rerr != nil {
			return 0, err
		}
		if r.etag != "" {
			if rerr := opts.SetMatchETag(r.etag); rerr != nil {
				return 0, err
			}
		}
		body, _, _, gerr := r.s.core.GetObject(r.ctx, r.s.bucket, r.key, opts)
		if gerr != nil {
			return 0, fmt.Errorf("%w (resuming at byte %d: %v)", err, r.off, gerr)
		}
		r.body.Close()
		r.body = body
	}
}

func (r *resumer) Close() error { return r.body.Close() }

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
