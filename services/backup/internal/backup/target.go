package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Target is where one backup's files are: a local directory or an object
// prefix. Names are slash-separated and relative.
type Target interface {
	// Create writes a new file; size is its length, or -1 when unknown.
	// The file exists once Close returned nil.
	Create(ctx context.Context, name string, size int64) (io.WriteCloser, error)
	Open(ctx context.Context, name string) (io.ReadCloser, error)
	// Exists tells whether a file is there.
	Exists(ctx context.Context, name string) (bool, error)
	// Backups lists the backups directly under this target (folders or
	// prefixes holding a manifest), by name.
	Backups(ctx context.Context) ([]string, error)
	// Sub is the target of the folder or prefix name under this one.
	Sub(name string) Target
	// RemoveAll removes every file of the target.
	RemoveAll(ctx context.Context) error
	// String is where it is, for messages (no credentials).
	String() string
}

// S3Login is the login of a backup bucket, another than the platform's
// (BACKUP_TARGET_S3_*).
type S3Login struct {
	Endpoint, AccessKey, SecretKey, Region string
	UseTLS                                 bool
}

// OpenTarget returns the target at where: "s3://bucket/prefix" (with login)
// or a local directory.
func OpenTarget(where string, login S3Login) (Target, error) {
	if rest, ok := strings.CutPrefix(where, "s3://"); ok {
		bucket, prefix, _ := strings.Cut(rest, "/")
		if bucket == "" {
			return nil, fmt.Errorf("%s: no bucket", where)
		}
		if login.Endpoint == "" {
			return nil, errors.New("an s3:// target needs BACKUP_TARGET_S3_ENDPOINT (and BACKUP_TARGET_S3_ACCESS_KEY, BACKUP_TARGET_S3_SECRET_KEY)")
		}
		c, err := minio.New(login.Endpoint, &minio.Options{
			Creds: credentials.NewStaticV4(login.AccessKey, login.SecretKey, ""), Secure: login.UseTLS, Region: login.Region,
		})
		if err != nil {
			return nil, err
		}
		return &s3Target{c: c, bucket: bucket, prefix: strings.Trim(prefix, "/")}, nil
	}
	if where == "" {
		return nil, errors.New("no target given")
	}
	return dirTarget(filepath.Clean(where)), nil
}

// dirTarget is a local directory.
type dirTarget string

func (d dirTarget) path(name string) string {
	return filepath.Join(string(d), filepath.FromSlash(name))
}

func (d dirTarget) Create(_ context.Context, name string, _ int64) (io.WriteCloser, error) {
	p := d.path(name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
}

func (d dirTarget) Open(_ context.Context, name string) (io.ReadCloser, error) {
	return os.Open(d.path(name))
}

func (d dirTarget) Exists(_ context.Context, name string) (bool, error) {
	_, err := os.Stat(d.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (d dirTarget) Backups(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(string(d))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && hasManifest(ctx, d.Sub(e.Name())) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func (d dirTarget) Sub(name string) Target          { return dirTarget(filepath.Join(string(d), name)) }
func (d dirTarget) RemoveAll(context.Context) error { return os.RemoveAll(string(d)) }
func (d dirTarget) String() string                  { return string(d) }

// s3Target is a prefix of a bucket.
type s3Target struct {
	c      *minio.Client
	bucket string
	prefix string // no slash at either end; "" for the whole bucket
}

func (s *s3Target) key(name string) string {
	if s.prefix == "" {
		return name
	}
	return s.prefix + "/" + name
}

type s3Writer struct {
	pw   *io.PipeWriter
	done chan error
}

func (w *s3Writer) Write(b []byte) (int, error) { return w.pw.Write(b) }
func (w *s3Writer) Close() error {
	w.pw.Close()
	return <-w.done
}

func (s *s3Target) Create(ctx context.Context, name string, size int64) (io.WriteCloser, error) {
	pr, pw := io.Pipe()
	w := &s3Writer{pw: pw, done: make(chan error, 1)}
	go func() {
		// 16 MiB parts when the size is unknown: minio-go's default for an
		// unknown size would buffer 512 MiB per upload.
		_, err := s.c.PutObject(ctx, s.bucket, s.key(name), pr, size,
			minio.PutObjectOptions{PartSize: 16 << 20, ContentType: "application/octet-stream"})
		pr.CloseWithError(err)
		w.done <- err
	}()
	return w, nil
}

func (s *s3Target) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	o, err := s.c.GetObject(ctx, s.bucket, s.key(name), minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	if _, err := o.Stat(); err != nil {
		o.Close()
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("%s: %w", s.key(name), fs.ErrNotExist)
		}
		return nil, err
	}
	return o, nil
}

func (s *s3Target) Exists(ctx context.Context, name string) (bool, error) {
	_, err := s.c.StatObject(ctx, s.bucket, s.key(name), minio.StatObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return false, nil
	}
	return err == nil, err
}

func (s *s3Target) Backups(ctx context.Context) ([]string, error) {
	prefix := ""
	if s.prefix != "" {
		prefix = s.prefix + "/"
	}
	var out []string
	for o := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if o.Err != nil {
			return nil, o.Err
		}
		if name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, prefix), "/"); ok && hasManifest(ctx, s.Sub(name)) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (s *s3Target) Sub(name string) Target {
	return &s3Target{c: s.c, bucket: s.bucket, prefix: strings.Trim(path.Join(s.prefix, name), "/")}
}

func (s *s3Target) RemoveAll(ctx context.Context) error {
	objs := s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + "/", Recursive: true})
	results, err := s.c.RemoveObjectsWithIter(ctx, s.bucket, objs, minio.RemoveObjectsOptions{})
	if err != nil {
		return err
	}
	for e := range results {
		if e.Err != nil {
			return e.Err
		}
	}
	return nil
}

func (s *s3Target) String() string { return "s3://" + s.bucket + "/" + s.prefix }

func hasManifest(ctx context.Context, t Target) bool {
	for _, n := range []string{ManifestName, ManifestName + ageSuffix} {
		if ok, _ := t.Exists(ctx, n); ok {
			return true
		}
	}
	return false
}
