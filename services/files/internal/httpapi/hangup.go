package httpapi

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/acme/platform/services/files/internal/files"
	"github.com/gofiber/fiber/v2"
)

// hangupPoll is how often a hangupWatch looks at the connection.
const hangupPoll = 100 * time.Millisecond

// storeImage is StoreImage on a context that ends with files.ErrClientGone
// when the client hangs up after its image has arrived, so that the
// decode stops and gives back its slot: fasthttp gives a handler no
// context that ends with its connection (RequestCtx.Done fires only at
// shutdown), and the gateway closes its connection to this service when
// its own client goes away.
func (h *handler) storeImage(c *fiber.Ctx) storeFunc {
	return func(ctx context.Context, owner string, src io.Reader) (*files.Pending, error) {
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		w := &hangupWatch{conn: c.Context().Conn(), cancel: cancel}
		defer w.stop()
		p, err := h.svc.StoreImage(ctx, owner, &atEOF{r: src, at: w.start})
		if err != nil && errors.Is(context.Cause(ctx), files.ErrClientGone) {
			// Whatever failed (the decode, the wait, the object store's
			// transfer) failed because the client left.
			return nil, files.ErrClientGone
		}
		return p, err
	}
}

// hangupWatch cancels a context when the peer closes the connection. It
// peeks at the socket (peerClosed) every hangupPoll; a peek while the
// handler reads the body would queue behind that read, so the watch starts
// only once the file part has been read to its end (start) and has ended
// when stop returns, before the handler reads on. What the client sent
// after the file part and fasthttp has not buffered yet hides the hangup
// until it is read; the decode deadline still bounds that case.
type hangupWatch struct {
	conn    net.Conn
	cancel  context.CancelCauseFunc
	started bool
	stopc   chan struct{}
	done    chan struct{}
}

// start starts the watch, once; without a connection it does nothing.
func (w *hangupWatch) start() {
	if w.started || w.conn == nil {
		return
	}
	w.started = true
	w.stopc, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(hangupPoll)
		defer t.Stop()
		for {
			select {
			case <-w.stopc:
				return
			case <-t.C:
				if peerClosed(w.conn) {
					w.cancel(files.ErrClientGone)
					return
				}
			}
		}
	}()
}

// stop ends the watch and waits for it.
func (w *hangupWatch) stop() {
	if w.stopc != nil {
		close(w.stopc)
		<-w.done
	}
}

// atEOF calls at when r reports io.EOF.
type atEOF struct {
	r  io.Reader
	at func()
}

func (a *atEOF) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if err == io.EOF {
		a.at()
	}
	return n, err
}
