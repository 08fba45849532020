package httpapi

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/gofiber/fiber/v2"
)

// parseFilters reads the filters every record query shares: from, to,
// metricsId and q.
func (a *API) parseFilters(c *fiber.Ctx, q *logs.Query) error {
	var err error
	if s := c.Query("from"); s != "" {
		if q.From, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return web.FieldError("from", "invalid_time", "from must be an RFC 3339 time")
		}
	}
	if s := c.Query("to"); s != "" {
		if q.To, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return web.FieldError("to", "invalid_time", "to must be an RFC 3339 time")
		}
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return web.FieldError("to", "invalid_range", "to must be after from")
	}
	if s := c.Query("metricsId"); s != "" {
		if len(s) > logs.MaxMetricsID {
			return web.FieldError("metricsId", "too_long", fmt.Sprintf("metricsId exceeds %d bytes", logs.MaxMetricsID))
		}
		q.MetricsID = strings.Clone(s)
	}
	if c.Request().URI().QueryArgs().Has("q") {
		sq, err := logs.ParseSearch(c.Query("q"))
		if err != nil {
			return fail(err, errScope{})
		}
		q.Search = sq
	}
	return nil
}

// queryApp reads ?app= (a known application name) into q.AppID.
func (a *API) queryApp(c *fiber.Ctx) (string, error) {
	name := c.Query("app")
	if name == "" {
		return "", nil
	}
	app, err := a.Apps.Lookup(name)
	if err != nil {
		return "", fail(err, errScope{})
	}
	return app.ID, nil
}

// exportPage is how many records an export reads at a time: its memory
// does not grow with the number of records exported.
const exportPage = 500

// export: GET /log/export?type&app&from&to&metricsId&q → 200, one record
// per line as JSON (application/x-ndjson), newest first within a type (all
// types one after another, log, error, db, when type is absent). Gzip
// when the client accepts it. A failure after the first line ends the
// stream with a last line {"error": ..., "code": "export_failed"}.
func (a *API) export(c *fiber.Ctx) error {
	types := logs.Types
	if typ := c.Query("type"); typ != "" {
		if !logs.ValidType(typ) {
			return invalidType(strings.Clone(typ))
		}
		types = []string{strings.Clone(typ)}
	}
	var base logs.Query
	var err error
	if base.AppID, err = a.queryApp(c); err != nil {
		return err
	}
	if err := a.parseFilters(c, &base); err != nil {
		return err
	}
	base.Limit = exportPage
	// The first page is read before answering, so that a store outage is
	// a proper 503 rather than a cut stream.
	first := base
	first.Type = types[0]
	page, err := a.Store.List(c.UserContext(), first)
	if err != nil {
		return err
	}
	gz := strings.Contains(strings.ToLower(c.Get(fiber.HeaderAcceptEncoding)), "gzip")
	c.Set(fiber.HeaderContentType, "application/x-ndjson")
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="logs.ndjson"`)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Vary(fiber.HeaderAcceptEncoding)
	if gz {
		c.Set(fiber.HeaderContentEncoding, "gzip")
	}
	ctx, store := a.Stop, a.Store
	c.Status(http.StatusOK).Context().SetBodyStreamWriter(web.GuardStream(a.log(), web.RequestID(c), func(bw *bufio.Writer) {
		var w io.Writer = bw
		var zw *gzip.Writer
		if gz {
			zw = gzip.NewWriter(bw)
			w = zw
		}
		flush := func() error {
			if zw != nil {
				if err := zw.Flush(); err != nil {
					return err
				}
			}
			return bw.Flush()
		}
		enc := json.NewEncoder(w)
		if err := writeExport(ctx, store, enc, flush, types, base, page); err != nil && !errors.Is(err, errClientGone) {
			_ = enc.Encode(fiber.Map{"error": "export interrupted: " + err.Error(), "code": "export_failed"})
		}
		if zw != nil {
			_ = zw.Close()
		}
		_ = bw.Flush()
	}))
	return nil
}

var errClientGone = errors.New("the client went away")

// writeExport encodes the records of base for each type, page after page
// (page is the first type's first page); flush sends what is buffered.
func writeExport(ctx context.Context, store logs.Store, enc *json.Encoder, flush func() error, types []string, base logs.Query, page logs.Page) error {
	for ti, typ := range types {
		q := base
		q.Type = typ
		if ti > 0 {
			var err error
			if page, err = store.List(ctx, q); err != nil {
				return err
			}
		}
		for {
			for _, r := range page.Records {
				if err := enc.Encode(toRecordJSON(r)); err != nil {
					return errClientGone
				}
			}
			if q.BeforeID = page.Next(q.Limit); q.BeforeID == "" {
				break
			}
			if err := flush(); err != nil {
				return errClientGone
			}
			if ctx.Err() != nil {
				return errors.New("the service is stopping")
			}
			var err error
			if page, err = store.List(ctx, q); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stats limits. Every bound is checked before any arithmetic on the
// request's values (logs.StatsQuery.Buckets computes the bucket count
// without overflow), so no from, to or step can size or index the buckets
// wrongly.
const (
	MaxStatsBuckets    = logs.MaxStatsBuckets
	MinStatsStep       = time.Second
	MinStatsYear       = 1970 // records are stamped by the service: none is older
	MaxStatsYear       = 9999 // the largest year RFC 3339 (and JSON) can write
	DefaultStatsWindow = 24 * time.Hour
	DefaultStatsStep   = time.Hour
)

type statsBucketJSON struct {
	From   time.Time        `json:"from"`
	To     time.Time        `json:"to"`
	Counts map[string]int64 `json:"counts"`
	Total  int64            `json:"total"`
}

// statsTime reads the RFC 3339 time of query parameter name, if present,
// with its year in MinStatsYear..MaxStatsYear.
func statsTime(c *fiber.Ctx, name string) (time.Time, bool, error) {
	s := c.Query(name)
	if s == "" {
		return time.Time{}, false, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false, web.FieldError(name, "invalid_time", name+" must be an RFC 3339 time")
	}
	if y := t.UTC().Year(); y < MinStatsYear || y > MaxStatsYear {
		return time.Time{}, false, web.FieldError(name, "time_out_of_range",
			fmt.Sprintf("%s must be a time in the years %d to %d (UTC)", name, MinStatsYear, MaxStatsYear))
	}
	return t, true, nil
}

// stats: GET /log/stats?from&to&step&app → 200 {from, to, step, app,
// buckets: [{from, to, counts: {log, error, db}, total}], partial}.
func (a *API) stats(c *fiber.Ctx) error {
	var q logs.StatsQuery
	var err error
	if q.AppID, err = a.queryApp(c); err != nil {
		return err
	}
	q.Step = DefaultStatsStep
	if s := c.Query("step"); s != "" {
		if q.Step, err = time.ParseDuration(s); err != nil || q.Step < MinStatsStep {
			return web.FieldError("step", "invalid_step", "step must be a duration of at least 1s, such as 5m or 1h")
		}
	}
	to, ok, err := statsTime(c, "to")
	if err != nil {
		return err
	}
	if q.To = a.Now().UTC(); ok {
		q.To = to
	}
	from, ok, err := statsTime(c, "from")
	if err != nil {
		return err
	}
	if q.From = q.To.Add(-DefaultStatsWindow); ok {
		q.From = from
	}
	n, err := q.Buckets()
	if err != nil {
		return fail(err, errScope{})
	}
	st, err := a.Store.Stats(c.UserContext(), q)
	if err != nil {
		return err
	}
	if len(st.Counts) != n {
		return fmt.Errorf("stats: the store made %d buckets, want %d", len(st.Counts), n)
	}
	out := make([]statsBucketJSON, n)
	for i, counts := range st.Counts {
		b := statsBucketJSON{From: q.From.Add(time.Duration(i) * q.Step).UTC(), Counts: counts}
		b.To = b.From.Add(q.Step)
		if b.To.After(q.To) {
			b.To = q.To.UTC()
		}
		for _, n := range counts {
			b.Total += n
		}
		out[i] = b
	}
	var app any
	if name := c.Query("app"); name != "" {
		app = strings.Clone(name)
	}
	return c.JSON(fiber.Map{"from": q.From.UTC(), "to": q.To.UTC(), "step": q.Step.String(), "stepSeconds": q.Step.Seconds(),
		"app": app, "buckets": out, "partial": st.Partial})
}
