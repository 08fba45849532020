// Package httpapi is the HTTP face of the files service: the spec's file
// endpoints, the image endpoints and the owner's file list, on Fiber with
// request bodies streamed (never buffered) and responses streamed from S3.
package httpapi

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure the HTTP layer.
type Options struct {
	Log           *slog.Logger
	Service       *files.Service
	Verifier      *identity.Verifier
	PublicBaseURL string // absolute URLs in responses start with it
	MaxUpload     int64  // bytes of one file
	MaxMeta       int    // bytes of the meta field
	ImageMaxBytes int64  // bytes of one image upload
	// ReadIdle aborts an upload whose body makes no progress for this long.
	ReadIdle time.Duration
	// Checks are run by /readyz.
	Checks map[string]func(context.Context) error
	// Metrics, when set, gets the request instruments and is served at
	// GET /metrics; Meter is told about transfers (both may be nil).
	Metrics *prometheus.Registry
	Meter   Meter
	// HandoffTTL, when positive, lets the gateway send stored bytes itself
	// (package handoff): to a GET that offers it, a download, image or
	// shared file is answered with its headers and a presigned GET of the
	// object valid this long instead of the bytes. 0: always streamed here.
	HandoffTTL time.Duration
}

// Meter is told what operators count (metrics).
type Meter interface {
	// Uploaded adds bytes of upload request bodies as the handlers read them.
	Uploaded(n int)
	// Downloaded adds bytes of file and image bodies as they are sent.
	Downloaded(n int)
	// Upload reports a finished upload: kind KindFile or KindImage, result
	// UploadOK, UploadRejected (the client's fault, 4xx) or UploadFailed
	// (ours or storage's, 5xx).
	Upload(kind, result string)
}

// Upload kinds and results.
const (
	KindFile       = "file"
	KindImage      = "image"
	UploadOK       = "ok"
	UploadRejected = "rejected"
	UploadFailed   = "failed"
)

type noMeter struct{}

func (noMeter) Uploaded(int)          {}
func (noMeter) Downloaded(int)        {}
func (noMeter) Upload(string, string) {}

// meteredReader reports every byte read through it.
type meteredReader struct {
	r   io.Reader
	add func(int)
}

func (m *meteredReader) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	if n > 0 {
		m.add(n)
	}
	return n, err
}

// meteredBody is a response body stream that reports what is sent.
type meteredBody struct {
	meteredReader
	c io.Closer
}

func (m *meteredBody) Close() error { return m.c.Close() }

// WriteTo sends the body through a 256 KiB buffer: each read takes what
// has arrived from S3 (up to 256 KiB) and is written at once, so the bytes
// flow on without waiting for a buffer to fill. Without it fasthttp copies
// a body stream through the kernel socket's generic path in 32 KiB pieces:
// a large download then costs up to eight times the read and write system
// calls, here and on the gateway behind it. io.Copy and fasthttp call it
// first.
func (m *meteredBody) WriteTo(w io.Writer) (int64, error) {
	bp := sendBuffers.Get().(*[]byte)
	defer sendBuffers.Put(bp)
	return io.CopyBuffer(writerOnly{w}, readerOnly{m}, *bp)
}

// readerOnly and writerOnly hide WriteTo and ReadFrom, so io.CopyBuffer
// uses the buffer it is given.
type readerOnly struct{ io.Reader }

type writerOnly struct{ io.Writer }

var sendBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// multipartOverhead is what a form may add around the file and meta
// contents: boundaries and part headers (a long file name included).
const multipartOverhead = 64 << 10

// New builds the Fiber app with every route.
//
// It configures Fiber itself rather than through web.NewApp because the
// upload routes need DisablePreParseMultipartForm: without it fasthttp reads
// a whole multipart body of known length into memory and temporary files
// before the handler runs, even with StreamRequestBody on.
func New(o Options) *fiber.App {
	if o.ReadIdle <= 0 {
		o.ReadIdle = 60 * time.Second
	}
	if o.Meter == nil {
		o.Meter = noMeter{}
	}
	limit := o.MaxUpload
	if o.ImageMaxBytes > limit {
		limit = o.ImageMaxBytes
	}
	bodyLimit := limit + int64(o.MaxMeta) + multipartOverhead
	if bodyLimit > math.MaxInt {
		bodyLimit = math.MaxInt
	}
	app := fiber.New(fiber.Config{
		AppName:                      "files",
		DisableStartupMessage:        true,
		BodyLimit:                    int(bodyLimit), // enforced by the handlers while streaming
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  60 * time.Second, // headers; uploads extend it while they progress
		WriteTimeout:                 0,                // downloads may be long
		IdleTimeout:                  90 * time.Second,
		ReadBufferSize:               16 << 10,
		ErrorHandler:                 web.ErrorHandler(o.Log),
	})
	app.Use(web.RequestIDs, web.AccessLog(o.Log), drainBody)
	if o.Metrics != nil {
		web.Instrument(app, o.Metrics)
	}
	app.Use(web.Recover(o.Log)) // a handler's panic: JSON 500, the process keeps serving

	h := &handler{o: o, svc: o.Service, base: strings.TrimRight(o.PublicBaseURL, "/")}
	web.Health(app, o.Checks)

	ident := web.RequireIdentity(o.Verifier)
	app.Post("/upload/file", ident, web.RequireUser, h.uploadFile)
	app.Post("/upload/image", ident, web.RequireUser, h.uploadImage)
	app.Get("/retrieve/file/:id", ident, web.RequireUser, h.retrieve)
	app.Get("/download/file/:id", ident, web.RequireUser, h.download)
	app.Get("/images/:id", ident, h.image) // public: any valid token, anonymous included
	app.Get("/files", ident, web.RequireUser, h.list)
	app.Delete("/files/:id", ident, web.RequireUser, h.deleteFile)
	app.Post("/files/:id/links", ident, web.RequireUser, h.createLink)
	app.Get("/files/:id/links", ident, web.RequireUser, h.links)
	app.Delete("/files/:id/links/:linkId", ident, web.RequireUser, h.revokeLink)
	app.Get("/s/:token", ident, h.shared) // public: the token is the credential
	app.Get("/me/usage", ident, web.RequireUser, h.myUsage)
	app.Get("/usage/:userId", ident, web.RequireAdmin, h.userUsage)
	app.Put("/usage/:userId", ident, web.RequireAdmin, h.setQuota)
	return app
}

type handler struct {
	o    Options
	svc  *files.Service
	base string
}

// drainBody keeps keep-alive connections in step: a handler may answer
// before reading the whole request body (an error, a refused upload). What is
// left is read and dropped, up to a bound; past it the connection is closed
// instead, so leftover bytes are never parsed as the next request.
//
// An upload refused mid-stream (over the size limit or the quota) sets
// drainAllKey to the most it would have read: the rest of its body is then
// read and dropped while it keeps coming, so that the answer reaches
// clients that read it only after sending the whole body (the gateway's
// proxy among them) instead of a reset connection.
func drainBody(c *fiber.Ctx) error {
	err := c.Next()
	body := c.Context().RequestBodyStream()
	if body == nil {
		return err
	}
	bound := int64(256 << 10)
	if all, ok := c.Locals(drainAllKey).(int64); ok && all > bound {
		bound = all
	}
	conn := c.Context().Conn()
	if conn != nil {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	}
	var r io.Reader = io.LimitReader(body, bound)
	if bound > 256<<10 {
		r = &progressReader{r: r, conn: conn, idle: 2 * time.Second, last: time.Now()}
	}
	n, rerr := io.Copy(io.Discard, r)
	if rerr != nil || n == bound {
		c.Context().SetConnectionClose()
	}
	return err
}

type localKey int

// drainAllKey (an int64 of bytes) asks drainBody to read the whole rest of
// the body, up to that many bytes.
const drainAllKey localKey = iota

// progressReader extends the connection's read deadline while the body
// keeps coming: a slow but steady upload lives, a stalled one dies after
// idle.
type progressReader struct {
	r    io.Reader
	conn net.Conn
	idle time.Duration
	last time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	if p.conn != nil {
		if now := time.Now(); now.Sub(p.last) > time.Second {
			_ = p.conn.SetReadDeadline(now.Add(p.idle))
			p.last = now
		}
	}
	return p.r.Read(b)
}

// countingLimit fails with files.ErrTooLarge past n bytes.
type countingLimit struct {
	r io.Reader
	n int64
}

func (l *countingLimit) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, files.ErrTooLarge
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, files.ErrTooLarge
	}
	return n, err
}

// dbContext bounds record operations; object transfers run on the
// request's context without a deadline (a 1 GiB transfer takes a while).
func dbContext(c *fiber.Ctx) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.UserContext(), 10*time.Second)
}
