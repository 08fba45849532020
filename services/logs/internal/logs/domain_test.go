package logs_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/services/logs/internal/logs"
)

// fakeStore is a logs.Store of function fields; a nil field answers as an
// empty store would.
type fakeStore struct {
	EnsureAppsFn      func(ctx context.Context, names []string) ([]logs.App, error)
	InsertBatchFn     func(ctx context.Context, rs []logs.Record) ([]error, error)
	ListFn            func(ctx context.Context, q logs.Query) (logs.Page, error)
	StatsFn           func(ctx context.Context, q logs.StatsQuery) (logs.Stats, error)
	DeleteBeforeFn    func(ctx context.Context, t time.Time) (int64, error)
	AddDeadLettersFn  func(ctx context.Context, ds []logs.DeadLetter) error
	ListDeadLettersFn func(ctx context.Context, skip, limit int) ([]logs.DeadLetter, error)
	PingFn            func(ctx context.Context) error
}

func (f *fakeStore) EnsureApps(ctx context.Context, names []string) ([]logs.App, error) {
	if f.EnsureAppsFn == nil {
		return nil, nil
	}
	return f.EnsureAppsFn(ctx, names)
}

func (f *fakeStore) InsertBatch(ctx context.Context, rs []logs.Record) ([]error, error) {
	if f.InsertBatchFn == nil {
		return make([]error, len(rs)), nil
	}
	return f.InsertBatchFn(ctx, rs)
}

func (f *fakeStore) List(ctx context.Context, q logs.Query) (logs.Page, error) {
	if f.ListFn == nil {
		return logs.Page{}, nil
	}
	return f.ListFn(ctx, q)
}

func (f *fakeStore) Stats(ctx context.Context, q logs.StatsQuery) (logs.Stats, error) {
	if f.StatsFn == nil {
		return logs.Stats{}, nil
	}
	return f.StatsFn(ctx, q)
}

func (f *fakeStore) DeleteBefore(ctx context.Context, t time.Time) (int64, error) {
	if f.DeleteBeforeFn == nil {
		return 0, nil
	}
	return f.DeleteBeforeFn(ctx, t)
}

func (f *fakeStore) AddDeadLetters(ctx context.Context, ds []logs.DeadLetter) error {
	if f.AddDeadLettersFn == nil {
		return nil
	}
	return f.AddDeadLettersFn(ctx, ds)
}

func (f *fakeStore) ListDeadLetters(ctx context.Context, skip, limit int) ([]logs.DeadLetter, error) {
	if f.ListDeadLettersFn == nil {
		return nil, nil
	}
	return f.ListDeadLettersFn(ctx, skip, limit)
}

func (f *fakeStore) Ping(ctx context.Context) error {
	if f.PingFn == nil {
		return nil
	}
	return f.PingFn(ctx)
}

func TestValidatorCheck(t *testing.T) {
	apps := logs.NewApps([]logs.App{{ID: "a1", Name: "LOGGING"}, {ID: "a2", Name: "ACME-AUTH"}})
	v := logs.Validator{Apps: apps, MaxBody: 16}
	for _, tc := range []struct {
		name, app, typ, body, metricsID string
		field, code                     string // "" when valid
	}{
		{"ok", "ACME-AUTH", "error", "disk full", "m-1", "", ""},
		{"okAtLimit", "LOGGING", "db", strings.Repeat("x", 16), "", "", ""},
		{"type400", "LOGGING", "warning", "x", "", "type", "invalid_type"},
		{"body400Empty", "LOGGING", "log", "", "", "logBody", "required"},
		{"body400TooLong", "LOGGING", "log", strings.Repeat("x", 17), "", "logBody", "too_long"},
		{"body400NotUTF8", "LOGGING", "log", "a\xffb", "", "logBody", "invalid_utf8"},
		{"metricsId400", "LOGGING", "log", "x", strings.Repeat("m", logs.MaxMetricsID+1), "metricsId", "too_long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := v.Check(tc.app, tc.typ, tc.body, tc.metricsID)
			if tc.field == "" {
				if err != nil || a.Name != tc.app {
					t.Fatalf("Check: %+v %v, want app %s", a, err, tc.app)
				}
				return
			}
			var ie *logs.InvalidError
			if !errors.As(err, &ie) || ie.Field != tc.field || ie.Code != tc.code {
				t.Fatalf("Check: %v, want %s %s", err, tc.field, tc.code)
			}
		})
	}
	// App names are exact: another case is another (unknown) app, and the
	// error lists the known ones.
	_, err := v.Check("logging", "log", "x", "")
	var ue *logs.UnknownAppError
	if !errors.As(err, &ue) || ue.Name != "logging" || len(ue.Known) != 2 || ue.Known[0].Name != "LOGGING" {
		t.Fatalf("unknown app: %v", err)
	}
	list := apps.List()
	list[0].Name = "CHANGED"
	if apps.List()[0].Name != "LOGGING" {
		t.Fatal("List hands out the configuration itself")
	}
	if got := logs.DefaultAppNames("ACME"); !slices.Equal(got, []string{"LOGGING", "ACME-S3", "ACME-AUTH", "SERVER-APP-A", "SERVER-APP-B", "SERVER-APP-C"}) {
		t.Fatalf("default apps %v", got)
	}
}

// Records written one at a time while a batch is being stored go together
// into the next batch, each Write returning its own record's id and error.
func TestWriterBatchesConcurrentWrites(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var batches [][]string
	st := &fakeStore{InsertBatchFn: func(_ context.Context, rs []logs.Record) ([]error, error) {
		mu.Lock()
		first := len(batches) == 0
		var bodies []string
		for _, r := range rs {
			bodies = append(bodies, r.LogBody)
		}
		batches = append(batches, bodies)
		mu.Unlock()
		if first {
			<-release // hold the first batch while the others queue up
		}
		per := make([]error, len(rs))
		for i := range rs {
			rs[i].ID = "id-" + rs[i].LogBody
			if rs[i].LogBody == "dup" {
				per[i] = logs.ErrDuplicate
			}
		}
		return per, nil
	}}
	w := logs.NewWriter(st, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)

	type out struct {
		body, id string
		err      error
	}
	res := make(chan out, 6)
	write := func(body string) {
		id, err := w.Write(context.Background(), logs.Record{LogBody: body})
		res <- out{body, id, err}
	}
	go write("first")
	apptest.Until(t, 5*time.Second, "the first batch", func() bool { mu.Lock(); defer mu.Unlock(); return len(batches) == 1 })
	for _, b := range []string{"b", "c", "dup", "e"} {
		go write(b)
	}
	// Let the four queue behind the held batch before it finishes.
	time.Sleep(100 * time.Millisecond)
	close(release)
	for range 5 {
		o := <-res
		switch {
		case o.body == "dup" && !errors.Is(o.err, logs.ErrDuplicate):
			t.Errorf("dup: %v, want ErrDuplicate", o.err)
		case o.body != "dup" && (o.err != nil || o.id != "id-"+o.body):
			t.Errorf("%s: id %q err %v", o.body, o.id, o.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 2 || len(batches[1]) != 4 {
		t.Fatalf("batches %v, want the first alone and the four queued meanwhile together", batches)
	}
}

// A failed batch fails each of its writes; writes after Run ends fail with
// ErrWriterClosed or their own context's error, never hang.
func TestWriterErrorsAndShutdown(t *testing.T) {
	outage := errors.New("no primary")
	st := &fakeStore{InsertBatchFn: func(context.Context, []logs.Record) ([]error, error) { return nil, outage }}
	w := logs.NewWriter(st, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	if _, err := w.Write(context.Background(), logs.Record{LogBody: "x"}); !errors.Is(err, outage) {
		t.Fatalf("write during an outage: %v", err)
	}
	cancel()
	<-done
	wctx, wcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer wcancel()
	_, err := w.Write(wctx, logs.Record{LogBody: "late"})
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, logs.ErrWriterClosed) {
		t.Fatalf("write after Run ended: %v", err)
	}
	gone, gcancel := context.WithCancel(context.Background())
	gcancel()
	if _, err := w.Write(gone, logs.Record{LogBody: "gone"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("write with a cancelled context: %v", err)
	}
}

// Retention deletes what is older than the maximum age at once and then
// every interval, keeps going after a failure, and stops with its context.
func TestRunRetention(t *testing.T) {
	var mu sync.Mutex
	var cutoffs []time.Time
	calls := 0
	st := &fakeStore{DeleteBeforeFn: func(_ context.Context, t time.Time) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		cutoffs = append(cutoffs, t)
		if calls == 1 {
			return 0, errors.New("store down")
		}
		return 3, nil
	}}
	var logBuf apptest.Log
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { logs.RunRetention(ctx, st, time.Hour, 20*time.Millisecond, log); close(done) }()
	apptest.Until(t, 5*time.Second, "three runs", func() bool { mu.Lock(); defer mu.Unlock(); return calls >= 3 })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("retention did not stop with its context")
	}
	mu.Lock()
	first := cutoffs[0]
	mu.Unlock()
	if d := start.Add(-time.Hour).Sub(first); d > time.Second || d < -time.Second {
		t.Fatalf("first cutoff %v, want an hour before the start %v", first, start)
	}
	out := logBuf.String()
	if !strings.Contains(out, "retention: delete failed") || !strings.Contains(out, "records=3") {
		t.Fatalf("log %q: want the failure and the deletions", out)
	}

	// Off when either setting is zero: returns at once, deletes nothing.
	off := &fakeStore{DeleteBeforeFn: func(context.Context, time.Time) (int64, error) {
		t.Error("retention ran while off")
		return 0, nil
	}}
	logs.RunRetention(context.Background(), off, 0, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	logs.RunRetention(context.Background(), off, time.Hour, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
}
