// Package httpapi is the logs service's HTTP interface: the spec's log
// endpoints (admins only) plus the dead-letter listing.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/gofiber/fiber/v2"
)

// Config of the handlers.
type Config struct {
	PageSize int // default page size
	MaxLimit int // largest ?limit=
	MaxPage  int // largest page number; deeper reading uses ?before=
	// SearchBudget is how long a listing with q= may read before it
	// answers with what it found and a cursor (partial: true).
	SearchBudget time.Duration
}

// API holds the handlers' dependencies.
type API struct {
	Store     logs.Store
	Writer    *logs.Writer // POST /log goes through it (grouped writes)
	Apps      *logs.Apps
	Validator logs.Validator
	Config    Config
	Verifier  *identity.Verifier
	Checks    map[string]func(context.Context) error
	Now       func() time.Time

	// Tail feeds GET /log/tail; Stop ends every open tail (shutdown).
	Tail       Tailer
	TailConfig TailConfig
	// OTLP publishes POST /v1/logs records on the log stream (subject
	// prefix Prefix); ServiceCredentials are the credentials it accepts.
	OTLP               OTLPPublisher
	Prefix             string
	ServiceCredentials []string
	Stop               context.Context
	// Log gets the line of a panic in a streamed answer (export, tail);
	// nil: slog.Default().
	Log   *slog.Logger
	tails tailState
}

func (a *API) log() *slog.Logger {
	if a.Log == nil {
		return slog.Default()
	}
	return a.Log
}

// Register mounts the routes on app.
func (a *API) Register(app *fiber.App) {
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.Stop == nil {
		a.Stop = context.Background()
	}
	web.Health(app, a.Checks)
	app.Use(web.RequireIdentity(a.Verifier))
	app.Post("/v1/logs", a.otlpLogs)
	g := app.Group("/log", web.RequireAdmin)
	g.Post("/", a.postLog)
	g.Get("/dead", a.listDead)
	g.Get("/tail", a.tail)
	g.Get("/apps", a.listApps)
	g.Get("/export", a.export)
	g.Get("/stats", a.stats)
	g.Get("/:type/:page", func(c *fiber.Ctx) error { return a.listLogs(c, false) })
	g.Get("/:type/:page/:app", func(c *fiber.Ctx) error { return a.listLogs(c, true) })
}

type postRequest struct {
	App       *string `json:"app"`
	LogBody   *string `json:"logBody"`
	Type      *string `json:"type"`
	MetricsID *string `json:"metricsId"`
}

type appJSON struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type recordJSON struct {
	ID        string    `json:"id"`
	LogBody   string    `json:"logBody"`
	CreatedAt time.Time `json:"createdAt"`
	Type      string    `json:"type"`
	MetricsID *string   `json:"metricsId"`
	AppID     string    `json:"appId"`
	App       string    `json:"app"`
}

func toRecordJSON(r logs.Record) recordJSON {
	out := recordJSON{ID: r.ID, LogBody: r.LogBody, CreatedAt: r.CreatedAt, Type: r.Type, AppID: r.AppID, App: r.App}
	if r.MetricsID != "" {
		m := r.MetricsID
		out.MetricsID = &m
	}
	return out
}

func appsJSON(apps []logs.App) []appJSON {
	out := make([]appJSON, len(apps))
	for i, a := range apps {
		out[i] = appJSON{ID: a.ID, Name: a.Name}
	}
	return out
}

// postLog: POST /log → 201 {app, logBody, type, metricsId, id, createdAt}:
// the four fields sent (metricsId null when not sent), and the id and
// createdAt the issue allows.
func (a *API) postLog(c *fiber.Ctx) error {
	var req postRequest
	if err := web.DecodeJSON(c, &req); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"app", req.App}, {"type", req.Type}, {"logBody", req.LogBody}} {
		if f.v == nil {
			return web.FieldError(f.name, "required", f.name+" is required")
		}
	}
	metricsID := ""
	if req.MetricsID != nil {
		metricsID = *req.MetricsID
	}
	app, err := a.Validator.Check(*req.App, *req.Type, *req.LogBody, metricsID)
	if err != nil {
		return fail(err, errScope{unknownApp: http.StatusBadRequest, sentType: *req.Type})
	}
	rec := logs.Record{
		AppID: app.ID, App: app.Name, Type: *req.Type, LogBody: strings.Clone(*req.LogBody), MetricsID: strings.Clone(metricsID),
		CreatedAt: a.Now().UTC().Truncate(time.Millisecond), MsgID: "http-" + web.NewRequestID() + web.NewRequestID(),
	}
	id, err := a.Writer.Write(c.UserContext(), rec)
	if err != nil {
		return err
	}
	rec.ID = id
	if a.Tail != nil {
		a.Tail.Announce(rec) // stored: show it in the live tails too
	}
	out := toRecordJSON(rec)
	return c.Status(http.StatusCreated).JSON(fiber.Map{
		"app": out.App, "logBody": out.LogBody, "type": out.Type, "metricsId": out.MetricsID,
		"id": out.ID, "createdAt": out.CreatedAt,
	})
}

// ResumeHeader is set on a filtered listing cut short by the read's bound:
// the id to pass as ?before= (with page 1) to read on.
const ResumeHeader = "Logs-Resume-Before"

// listLogs: GET /log/:type/:page[/:app] → 201 {logs}.
func (a *API) listLogs(c *fiber.Ctx, byApp bool) error {
	typ := strings.Clone(c.Params("type"))
	if !logs.ValidType(typ) {
		return invalidType(typ)
	}
	page, err := parsePositive(c.Params("page"), a.Config.MaxPage)
	if err != nil {
		return web.FieldError("page", "invalid_page", fmt.Sprintf("page must be an integer from 1 to %d (use ?before= to read deeper)", a.Config.MaxPage))
	}
	q := logs.Query{Type: typ}
	if byApp {
		name := strings.Clone(c.Params("app"))
		app, err := a.Apps.Lookup(name)
		if err != nil {
			return fail(err, errScope{})
		}
		q.AppID = app.ID
	}
	if q.Limit, err = a.limit(c); err != nil {
		return err
	}
	q.Skip = (page - 1) * q.Limit
	if err := a.parseFilters(c, &q); err != nil {
		return err
	}
	if s := c.Query("before"); s != "" {
		if !isObjectIDHex(s) {
			return web.FieldError("before", "invalid_cursor", "before must be the id of a log record")
		}
		q.BeforeID = strings.Clone(s)
	}
	if q.Search != nil {
		q.Deadline = time.Now().Add(a.Config.SearchBudget)
	}
	found, err := a.Store.List(c.UserContext(), q)
	if err != nil {
		return fail(err, errScope{})
	}
	out := make([]recordJSON, len(found.Records))
	for i, r := range found.Records {
		out[i] = toRecordJSON(r)
	}
	if found.ResumeBefore != "" {
		// A filtered read that looked at as many chunks as it may, or
		// spent its time budget: the page may be short; read on with
		// ?before=<this id>.
		c.Set(ResumeHeader, found.ResumeBefore)
		return c.Status(http.StatusCreated).JSON(fiber.Map{"logs": out, "partial": true, "cursor": found.ResumeBefore})
	}
	return c.Status(http.StatusCreated).JSON(fiber.Map{"logs": out})
}

// listApps: GET /log/apps → 200 {apps:[{id,name}]}, the known application
// names (what the console offers in its app selector).
func (a *API) listApps(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"apps": appsJSON(a.Apps.List())})
}

type deadJSON struct {
	ID         string    `json:"id"`
	Stream     string    `json:"stream"`
	Sequence   uint64    `json:"seq"`
	Subject    string    `json:"subject"`
	MsgID      string    `json:"msgId"`
	Data       string    `json:"data"`
	Reason     string    `json:"reason"`
	Deliveries uint64    `json:"deliveries"`
	ReceivedAt time.Time `json:"receivedAt"`
}

// listDead: GET /log/dead?page=&limit= → 200 {deadLetters}.
func (a *API) listDead(c *fiber.Ctx) error {
	page := 1
	if s := c.Query("page"); s != "" {
		var err error
		if page, err = parsePositive(s, a.Config.MaxPage); err != nil {
			return web.FieldError("page", "invalid_page", fmt.Sprintf("page must be an integer from 1 to %d", a.Config.MaxPage))
		}
	}
	limit, err := a.limit(c)
	if err != nil {
		return err
	}
	ds, err := a.Store.ListDeadLetters(c.UserContext(), (page-1)*limit, limit)
	if err != nil {
		return err
	}
	out := make([]deadJSON, len(ds))
	for i, d := range ds {
		out[i] = deadJSON{ID: d.Key, Stream: d.Stream, Sequence: d.Sequence, Subject: d.Subject, MsgID: d.MsgID,
			Data: d.Data, Reason: d.Reason, Deliveries: d.Deliveries, ReceivedAt: d.ReceivedAt}
	}
	return c.JSON(fiber.Map{"deadLetters": out})
}

func (a *API) limit(c *fiber.Ctx) (int, error) {
	s := c.Query("limit")
	if s == "" {
		return a.Config.PageSize, nil
	}
	n, err := parsePositive(s, a.Config.MaxLimit)
	if err != nil {
		return 0, web.FieldError("limit", "invalid_limit", fmt.Sprintf("limit must be an integer from 1 to %d", a.Config.MaxLimit))
	}
	return n, nil
}

var errNotPositive = errors.New("not a positive integer in range")

// parsePositive accepts decimal digits only (no sign, point or exponent)
// with a value from 1 to max.
func parsePositive(s string, max int) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, errNotPositive
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errNotPositive
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, errNotPositive
	}
	return n, nil
}

func isObjectIDHex(s string) bool {
	if len(s) != 24 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F') {
			return false
		}
	}
	return true
}
