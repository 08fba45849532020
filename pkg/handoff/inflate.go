package handoff

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// ErrDecoded is a decoded object that does not inflate to the length the
// files service recorded: longer (never sent past that length, so a
// decompression bomb costs at most the object's stored bytes and its
// recorded size), shorter, or corrupt.
var ErrDecoded = errors.New("handoff: decoded object is not its recorded length")

var gzipReaders sync.Pool // of *gzip.Reader

// Inflate returns the inflation of the gzip stream stored, which must be
// exactly n bytes; it reads the gzip header before returning, so a stream
// that is not gzip fails before any byte is sent (stored is closed then).
// The gateway inflates handed-off objects with it, the files service the
// ones it streams itself.
func Inflate(stored io.ReadCloser, n int64) (io.ReadCloser, error) {
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(stored)
	} else {
		err = zr.Reset(stored)
	}
	if err != nil {
		stored.Close()
		return nil, fmt.Errorf("%w: %v", ErrDecoded, err)
	}
	return &inflater{zr: zr, stored: stored, left: n}, nil
}

// inflater passes at most left inflated bytes on. The read that brings the
// last of them first makes sure the stream ends there (its checksum
// verified), so a stream that is longer or corrupt is cut before its last
// byte is sent.
type inflater struct {
	zr     *gzip.Reader
	stored io.ReadCloser
	left   int64
	err    error
}

func (r *inflater) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.left == 0 {
		if err := r.ended(); err != nil {
			r.err = err
			return 0, err
		}
		r.err = io.EOF
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	k, err := r.zr.Read(p)
	r.left -= int64(k)
	switch {
	case err == io.EOF && r.left > 0:
		r.err = fmt.Errorf("%w: %d bytes short", ErrDecoded, r.left)
	case err != nil && err != io.EOF:
		r.err = fmt.Errorf("%w: %v", ErrDecoded, err)
	case r.left == 0:
		if err == nil {
			err = r.ended()
		}
		if err == nil || err == io.EOF {
			r.err = io.EOF
		} else {
			r.err = err
		}
	}
	if r.err != nil && r.err != io.EOF {
		return 0, r.err // the last bytes are not sent when the stream is bad
	}
	return k, nil
}

// ended reads on past the last expected byte: the stream must end (a read
// of nothing, then EOF, proving the trailer's checksum and length).
func (r *inflater) ended() error {
	var one [1]byte
	for {
		k, err := r.zr.Read(one[:])
		switch {
		case k > 0:
			return fmt.Errorf("%w: longer than recorded", ErrDecoded)
		case err == io.EOF:
			return nil
		case err != nil:
			return fmt.Errorf("%w: %v", ErrDecoded, err)
		}
	}
}

func (r *inflater) Close() error {
	err := r.stored.Close()
	if r.zr != nil {
		if r.err == io.EOF {
			gzipReaders.Put(r.zr) // a clean end leaves nothing of the stream in it
		}
		r.zr = nil
	}
	if r.err == nil {
		r.err = errors.New("handoff: inflater closed")
	}
	return err
}
