package upstream

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// track ends the request in flight when its answer's body is closed.
func (e *endpoint) track(resp *http.Response) *http.Response {
	if resp.Body == nil || resp.Body == http.NoBody {
		e.done()
		return resp
	}
	tb := &trackedResponse{ReadCloser: resp.Body, e: e}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &trackedUpgrade{trackedResponse: tb, w: rwc}
		return resp
	}
	resp.Body = tb
	return resp
}

type trackedResponse struct {
	io.ReadCloser
	e    *endpoint
	once sync.Once
}

func (b *trackedResponse) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.e.done)
	return err
}

// trackedUpgrade keeps a switched protocol's body writable (ReverseProxy
// needs an io.ReadWriteCloser).
type trackedUpgrade struct {
	*trackedResponse
	w io.Writer
}

func (b *trackedUpgrade) Write(p []byte) (int, error) { return b.w.Write(p) }

// trackedBody is a request body that remembers whether it was read from,
// and whether a read failed on the client's side. While nothing was read it
// keeps the transport's Close from closing the body, so a failed connection
// attempt leaves it whole for the next endpoint; finish decides.
type trackedBody struct {
	rc      io.ReadCloser
	read    atomic.Bool
	readErr atomic.Bool

	mu                        sync.Mutex
	closeAsked, final, closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	if !b.read.Load() {
		b.read.Store(true)
	}
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		b.readErr.Store(true)
	}
	return n, err
}

func (b *trackedBody) wasRead() bool { return b.read.Load() }
func (b *trackedBody) failed() bool  { return b.readErr.Load() }

func (b *trackedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	if b.final || b.read.Load() {
		b.closed = true
		return b.rc.Close()
	}
	b.closeAsked = true
	return nil
}

// rearm forgets a Close asked for by a failed attempt's transport before the
// body goes to the next attempt.
func (b *trackedBody) rearm() {
	b.mu.Lock()
	b.closeAsked = false
	b.mu.Unlock()
}

// finish ends the retry window: a Close the transport asked for (or, with
// now, the RoundTripper's own duty to close on failure) reaches the body.
func (b *trackedBody) finish(now bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.final = true
	if (now || b.closeAsked) && !b.closed {
		b.closed = true
		_ = b.rc.Close()
	}
}
