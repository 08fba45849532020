package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/natsingest"
	"github.com/gofiber/fiber/v2"
)

// Tailer subscribes viewers to new records (natsingest.Tail).
type Tailer interface {
	Follow(ctx context.Context, typ, app string, buf int) (*natsingest.Follower, error)
	// Announce shows records stored from HTTP writes to every follower.
	Announce(recs ...logs.Record)
}

// TailConfig tunes GET /log/tail.
type TailConfig struct {
	Heartbeat time.Duration // comment line sent when idle; also how soon a gone client is noticed
	Buffer    int           // records held per viewer before dropping
	MaxOpen   int           // streams open at once on this replica (0 = 100)
	// MaxPerUser bounds the streams one user (all their sessions and API
	// keys together) has open at once on this replica (0 = 5).
	MaxPerUser int
}

// tailState holds the open streams' slots, made on the first tail.
type tailState struct {
	once  sync.Once
	slots *logs.TailSlots
}

// tailSlots returns the replica's tail slots.
func (a *API) tailSlots() *logs.TailSlots {
	a.tails.once.Do(func() {
		maxOpen, perUser := a.TailConfig.MaxOpen, a.TailConfig.MaxPerUser
		if maxOpen <= 0 {
			maxOpen = 100
		}
		if perUser <= 0 {
			perUser = 5
		}
		a.tails.slots = logs.NewTailSlots(maxOpen, perUser)
	})
	return a.tails.slots
}

// heartbeat is the comment-line interval of an idle stream.
func (a *API) heartbeat() time.Duration {
	if hb := a.TailConfig.Heartbeat; hb > 0 {
		return hb
	}
	return 15 * time.Second
}

// tail: GET /log/tail?type=&app= → text/event-stream of new records as
// they arrive on the NATS stream (admins only, like every /log route).
//
// Events: "ready" once the subscription exists (every record published
// after it is delivered), "log" per record (id = record id, data = the
// record JSON of the listings), "dropped" when this viewer fell behind and
// records were skipped. A comment line every Heartbeat keeps proxies from
// timing the stream out and detects a client that went away: the write
// fails and the subscription ends.
func (a *API) tail(c *fiber.Ctx) error {
	if a.Tail == nil {
		return errTailOff
	}
	typ := strings.Clone(c.Query("type"))
	if typ != "" && !logs.ValidType(typ) {
		return invalidType(typ)
	}
	app := strings.Clone(c.Query("app"))
	if app != "" {
		found, err := a.Apps.Lookup(app)
		if err != nil {
			return fail(err, errScope{unknownApp: http.StatusBadRequest, sentType: typ})
		}
		app = found.Name
	}
	if c.Method() == http.MethodHead { // headers only: no subscription
		c.Set("Content-Type", "text/event-stream; charset=utf-8")
		c.Set("Cache-Control", "no-cache, no-store")
		return c.SendStatus(http.StatusOK)
	}
	// One user's tails (any of their sessions and API keys) take at most
	// MaxPerUser of the replica's slots. A slot comes back when a stream
	// ends; one whose viewer left is noticed at the next heartbeat at the
	// latest, so that is how long a refused user may have to wait.
	release, err := a.tailSlots().Acquire(web.Identity(c).UserID())
	if err != nil {
		retry := "5"
		if errors.Is(err, logs.ErrTooManyTails) {
			retry = strconv.Itoa(int((a.heartbeat() + time.Second - 1) / time.Second))
		}
		c.Set(fiber.HeaderRetryAfter, retry)
		return fail(err, errScope{})
	}
	stop := a.Stop
	if stop == nil {
		stop = context.Background()
	}
	ctx, cancel := context.WithCancel(stop)
	buf := a.TailConfig.Buffer
	if buf <= 0 {
		buf = 256
	}
	f, err := a.Tail.Follow(ctx, typ, app, buf)
	if err != nil {
		cancel()
		release()
		return fmt.Errorf("%w: %v", web.ErrUnavailable, err)
	}
	hb := a.heartbeat()
	serverDone := c.Context().Done() // closed when the server shuts down
	c.Set("Content-Type", "text/event-stream; charset=utf-8")
	c.Set("Cache-Control", "no-cache, no-store")
	c.Set("X-Accel-Buffering", "no") // tell buffering proxies to pass it through
	c.Set("X-Content-Type-Options", "nosniff")
	c.Status(http.StatusOK)
	c.Context().SetBodyStreamWriter(web.GuardStream(a.log(), web.RequestID(c), func(w *bufio.Writer) {
		defer release()
		defer cancel()
		defer f.Stop()
		send := func(s string) bool {
			if _, err := w.WriteString(s); err != nil {
				return false
			}
			return w.Flush() == nil
		}
		if !send("retry: 2000\nevent: ready\ndata: {}\n\n") {
			return
		}
		t := time.NewTicker(hb)
		defer t.Stop()
		var dropped uint64
		for {
			select {
			case rec := <-f.C:
				b, _ := json.Marshal(toRecordJSON(rec))
				if !send("id: " + rec.ID + "\nevent: log\ndata: " + string(b) + "\n\n") {
					return
				}
			case <-t.C:
				msg := ": keep-alive\n\n"
				if d := f.Dropped(); d != dropped {
					dropped = d
					msg = fmt.Sprintf("event: dropped\ndata: {\"dropped\":%d}\n\n", d)
				}
				if !send(msg) {
					return // the client went away
				}
			case <-ctx.Done():
				return
			case <-serverDone:
				return
			}
		}
	}))
	return nil
}
