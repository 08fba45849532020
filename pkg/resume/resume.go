// Package resume keeps a ranged download going when the server sending it
// goes away: a Reader asks again for the bytes not yet read, of the same
// version of the object, a bounded number of times. The files service uses
// it on its S3 reads and the gateway on the objects handed off to it (the
// nodes of a distributed MinIO each serve every object, so the next request
// may go to another node).
package resume

import (
	"context"
	"fmt"
	"io"
)

// Open opens bytes off..end (inclusive) of the object, of the version
// etag when etag is not empty.
type Open func(ctx context.Context, off, end int64, etag string) (io.ReadCloser, error)

// Tries is how many times one Reader reopens its object (3).
const Tries = 3

// Reader is an object's body from byte off to byte end (inclusive).
type Reader struct {
	ctx      context.Context
	open     Open
	etag     string
	off, end int64
	body     io.ReadCloser
	tries    int
}

// New returns a Reader that reads body, already open at byte start, and
// reopens through open when a read fails before byte end. etag pins the
// version (empty: none is pinned).
func New(ctx context.Context, open Open, body io.ReadCloser, etag string, start, end int64) *Reader {
	return &Reader{ctx: ctx, open: open, etag: etag, off: start, end: end, body: body}
}

func (r *Reader) Read(p []byte) (int, error) {
	for {
		n, err := r.body.Read(p)
		r.off += int64(n)
		if err != nil && err != io.EOF && r.off > r.end {
			return n, io.EOF // every byte arrived before the failure
		}
		if err == nil || err == io.EOF || n > 0 || r.tries >= Tries || r.ctx.Err() != nil {
			if err != nil && err != io.EOF && n > 0 {
				err = nil // the bytes first; the next read fails or resumes
			}
			return n, err
		}
		r.tries++
		body, oerr := r.open(r.ctx, r.off, r.end, r.etag)
		if oerr != nil {
			return 0, fmt.Errorf("%w (resuming at byte %d: %v)", err, r.off, oerr)
		}
		r.body.Close()
		r.body = body
	}
}

// Close closes the body being read.
func (r *Reader) Close() error { return r.body.Close() }
