package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// ErrBodyStalled is the error a request body's read returns once the client
// sent nothing for the body idle timeout (WatchBody).
var ErrBodyStalled = errors.New("request body stalled")

type bodyWatchKey struct{}

// bodyWatch records what became of a request body: whether the client
// stalled it (no byte for the idle timeout) or it failed otherwise.
type bodyWatch struct {
	stalled atomic.Bool
	failed  atomic.Bool // any read error but io.EOF
}

// WatchBody bounds the pauses of r's body: every read that makes progress
// extends the connection's read deadline by idle, so a large upload that
// keeps moving is never limited in total time, while a body that makes no
// progress for idle fails with ErrBodyStalled (the connection then closes).
// The proxy answers such a request 408 request_timeout itself, whatever the
// service did with the part it received. It returns the request to serve.
func WatchBody(w http.ResponseWriter, r *http.Request, idle time.Duration) *http.Request {
	if idle <= 0 || r.Body == nil || r.Body == http.NoBody {
		return r
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(idle)) != nil {
		return r
	}
	bw := &bodyWatch{}
	r = r.WithContext(context.WithValue(r.Context(), bodyWatchKey{}, bw))
	r.Body = &idleBody{ReadCloser: r.Body, rc: rc, idle: idle, watch: bw}
	return r
}

func watchOf(ctx context.Context) *bodyWatch {
	bw, _ := ctx.Value(bodyWatchKey{}).(*bodyWatch)
	return bw
}

// bodyStalled reports whether r's body was cut by the idle timeout.
func bodyStalled(ctx context.Context) bool {
	bw := watchOf(ctx)
	return bw != nil && bw.stalled.Load()
}

// bodyFailed reports whether reading r's body failed (stalled, cut by the
// client, or over the route's limit): what the service received is not the
// whole body.
func bodyFailed(ctx context.Context) bool {
	bw := watchOf(ctx)
	return bw != nil && bw.failed.Load()
}

// idleBody extends the connection's read deadline after every read that
// made progress.
type idleBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	idle  time.Duration
	watch *bodyWatch
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		// The whole body is in: net/http now watches the connection in
		// the background for the client going away, which must not time
		// out during a long response.
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil:
		b.watch.failed.Store(true)
		if errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err) {
			b.watch.stalled.Store(true)
			err = fmt.Errorf("%w: %w", ErrBodyStalled, err)
		}
	case n > 0:
		_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	}
	return n, err
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// errBodyIncomplete ends a request whose body failed while the service
// answered it (ModifyResponse).
var errBodyIncomplete = errors.New("request body incomplete")

// limitedBody fails a request body (chunked, so of unknown length) once it
// passes the limit.
type limitedBody struct {
	rc      io.ReadCloser
	left    int64
	tripped atomic.Bool
	failed  atomic.Bool // a read failed (not io.EOF): the body is not whole
}

var errBodyTooLarge = errors.New("request body too large")

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.tripped.Store(true)
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left+1] // read one byte past to detect an overrun
	}
	n, err := l.rc.Read(p)
	if err != nil && err != io.EOF {
		l.failed.Store(true)
	}
	l.left -= int64(n)
	if l.left < 0 {
		l.tripped.Store(true)
		return 0, errBodyTooLarge
	}
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }
