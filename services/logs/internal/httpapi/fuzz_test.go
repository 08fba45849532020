package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/golang-jwt/jwt/v5"
)

// memStore keeps records in memory for the handler fuzz target (the real
// store is tested against FerretDB). A cursor is found only among stored
// records, like the real one.
type memStore struct {
	mu   sync.Mutex
	recs []logs.Record
}

func (m *memStore) EnsureApps(_ context.Context, names []string) ([]logs.App, error) {
	out := make([]logs.App, len(names))
	for i, n := range names {
		out[i] = logs.App{ID: strings.Repeat("0", 23) + string(rune('a'+i)), Name: n}
	}
	return out, nil
}

func (m *memStore) InsertBatch(_ context.Context, rs []logs.Record) ([]error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, rs...)
	return make([]error, len(rs)), nil
}

func (m *memStore) List(_ context.Context, q logs.Query) (logs.Page, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []logs.Record
	found := q.BeforeID == ""
	for i := len(m.recs) - 1; i >= 0; i-- {
		r := m.recs[i]
		if !found {
			if r.ID == q.BeforeID {
				if r.Type != q.Type || q.AppID != "" && r.AppID != q.AppID {
					return logs.Page{}, logs.ErrCursorMismatch
				}
				found = true
			}
			continue
		}
		if r.Type == q.Type && (q.AppID == "" || r.AppID == q.AppID) {
			out = append(out, r)
		}
	}
	if !found {
		return logs.Page{}, logs.ErrNotFound
	}
	if q.Skip >= len(out) {
		return logs.Page{}, nil
	}
	out = out[q.Skip:]
	return logs.Page{Records: out[:min(len(out), q.Limit)]}, nil
}

// Stats counts like the real store: it refuses what StatsQuery.Buckets
// refuses, then counts each stored record of [From, To) (of the app) in its
// bucket.
func (m *memStore) Stats(_ context.Context, q logs.StatsQuery) (logs.Stats, error) {
	n, err := q.Buckets()
	if err != nil {
		return logs.Stats{}, err
	}
	out := logs.Stats{Counts: make([]map[string]int64, n)}
	for i := range out.Counts {
		out.Counts[i] = map[string]int64{}
		for _, typ := range logs.Types {
			out.Counts[i][typ] = 0
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.recs {
		if q.AppID != "" && r.AppID != q.AppID || r.CreatedAt.Before(q.From) || !r.CreatedAt.Before(q.To) {
			continue
		}
		out.Counts[int(r.CreatedAt.Sub(q.From)/q.Step)][r.Type]++ // indexed as the store did, unguarded
	}
	return out, nil
}

func (m *memStore) DeleteBefore(context.Context, time.Time) (int64, error) { return 0, nil }
func (m *memStore) AddDeadLetters(context.Context, []logs.DeadLetter) error {
	return nil
}
func (m *memStore) ListDeadLetters(context.Context, int, int) ([]logs.DeadLetter, error) {
	return nil, nil
}
func (m *memStore) Ping(context.Context) error { return nil }

// FuzzLogsHandlers sends arbitrary bodies to POST /log and arbitrary type,
// page, app and query (limit, before, from, to, metricsId, q) to the listing,
// export and stats routes, as an admin, through the real router and handlers. No input may
// give a 5xx or an error without JSON; a 201 from POST /log echoes the
// record sent, and a listing never holds more than the limit asked for.
func FuzzLogsHandlers(f *testing.F) {
	pub, priv, err := identity.GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	store := &memStore{}
	list, _ := store.EnsureApps(context.Background(), logs.DefaultAppNames("ACME"))
	apps := logs.NewApps(list)
	// One record from the start, so that every stats seed has something to
	// count and the cursor seed something to find.
	store.recs = append(store.recs, logs.Record{ID: "0123456789abcdef01234567", AppID: list[0].ID, App: list[0].Name,
		Type: logs.TypeError, LogBody: "seed", CreatedAt: time.Now().UTC()})
	writer := logs.NewWriter(store, 10)
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	go writer.Run(ctx)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	app := web.NewApp(web.Options{Name: "logs", Log: log, BodyLimit: 256 << 10})
	api := &API{Store: store, Writer: writer, Apps: apps, Validator: logs.Validator{Apps: apps, MaxBody: 1 << 10},
		Config: Config{PageSize: 5, MaxLimit: 20, MaxPage: 1000}, Verifier: identity.NewVerifier(pub, "logs")}
	api.Register(app)
	tok, err := identity.NewSigner(priv, time.Hour).Sign(identity.Claims{Role: "admin", RegisteredClaims: jwt.RegisteredClaims{Subject: "a1"}}, "logs")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(true, "", `{"app":"ACME-AUTH","type":"error","logBody":"x","metricsId":"m"}`)
	f.Add(true, "", `{"app":"acme-auth","type":"error","logBody":"x"}`)
	f.Add(true, "", `{"app":"ACME-AUTH","type":"warn","logBody":""}`)
	f.Add(true, "", `{"app":"ACME-AUTH","type":"log","logBody":"\ud800"}`)
	f.Add(true, "", `{"app":null,"type":"log","logBody":"x"}`)
	f.Add(false, "/log/error/1", "limit=20&metricsId=m")
	f.Add(false, "/log/error/1/ACME-AUTH", "before=0123456789abcdef01234567")
	f.Add(false, "/log/log/0", "")
	f.Add(false, "/log/log/999999999999", "limit=-1")
	f.Add(false, "/log/db/1/NOPE", "from=2026-01-01T00:00:00Z&to=2025-01-01T00:00:00Z")
	f.Add(false, "/log/dead", "page=2&limit=3")
	f.Add(false, "/log/dead/1", "")
	f.Add(false, "/log/log/1/%00", "from=x")
	f.Add(false, "/log/error/1", `q="disk full" x&limit=3`)
	f.Add(false, "/log/error/1", `q="open`)
	f.Add(false, "/log/export", "type=error&app=ACME-AUTH&q=x")
	f.Add(false, "/log/export", "app=NOPE")
	f.Add(false, "/log/stats", "step=1m&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z")
	f.Add(false, "/log/stats", "step=0s")
	// Issue 34 row 1: the bucket count overflowed and the store indexed
	// past its buckets (a panic that ended the process).
	f.Add(false, "/log/stats", "from=0001-01-01T00:00:00Z&to=9999-12-31T23:59:59Z&step=2562047h")
	f.Add(false, "/log/stats", "from=1970-01-01T00:00:00Z&to=9999-12-31T23:59:59Z&step=2562047h")
	f.Add(false, "/log/stats", "from=2000-01-01T00:00:00Z&to=2260-01-01T00:00:00Z&step=2562047h47m16s")
	f.Add(false, "/log/stats", "to=1970-01-01T00:00:00Z")
	f.Add(false, "/log/stats", "to=9999-12-31T23:59:59-23:59")
	f.Add(false, "/log/error/1", "from=0001-01-01T00:00:00Z&to=9999-12-31T23:59:59Z&limit=20")
	f.Add(false, "/log/log/1000", "limit=20&before=0123456789abcdef01234567")
	f.Fuzz(func(t *testing.T, post bool, path, q string) {
		var req = httptest.NewRequest("GET", "/", nil)
		if post {
			req = httptest.NewRequest("POST", "/log", bytes.NewReader([]byte(q)))
			req.Header.Set("Content-Type", "application/json")
		} else {
			if !strings.HasPrefix(path, "/log/") || strings.ContainsAny(path, "?# \t\r\n\x00") || strings.ContainsAny(q, "# \t\r\n\x00") {
				return
			}
			u, err := req.URL.Parse(path + "?" + q)
			if err != nil {
				return
			}
			req.URL = u
			req.RequestURI = u.RequestURI()
		}
		req.Header.Set(identity.Header, tok)
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("post=%v %s?%s: %d %s", post, path, q, resp.StatusCode, body)
		}
		ct := resp.Header.Get("Content-Type")
		// Fiber routes ignore case and a trailing slash: /log/eXport/ is
		// the export too.
		if resp.StatusCode == 200 && strings.EqualFold(strings.TrimRight(path, "/"), "/log/export") {
			if ct != "application/x-ndjson" {
				t.Fatalf("export as %q", ct)
			}
			return
		}
		if !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%d without JSON", resp.StatusCode)
		}
		if resp.StatusCode >= 300 {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		if post {
			var sent map[string]any
			if err := json.Unmarshal([]byte(q), &sent); err != nil {
				t.Fatalf("201 for a body that is not JSON: %q", q)
			}
			for _, k := range []string{"app", "type", "logBody"} {
				if sent[k] != m[k] {
					t.Fatalf("%s: sent %v, answered %v", k, sent[k], m[k])
				}
			}
			return
		}
		if l, ok := m["logs"].([]any); ok {
			limit := 5
			if s := req.URL.Query().Get("limit"); s != "" {
				limit, _ = parsePositive(s, 20)
			}
			if len(l) > limit {
				t.Fatalf("%d records for limit %d", len(l), limit)
			}
		}
	})
}

// FuzzParsePositive: page numbers and limits accept exactly the decimal
// integers 1..max.
func FuzzParsePositive(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "+1", "01", "1e3", "999999999", "9999999999", " 1", "１"} {
		f.Add(s, 1000)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		n, err := parsePositive(s, max)
		if err != nil {
			return
		}
		if n < 1 || n > max {
			t.Fatalf("parsePositive(%q, %d) = %d", s, max, n)
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				t.Fatalf("parsePositive accepted %q", s)
			}
		}
	})
}
