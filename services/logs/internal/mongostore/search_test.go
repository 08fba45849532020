package mongostore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/mongostore"
)

// A search lists exactly the matching records newest first, with the
// other filters and the cursor; with a spent budget it answers partial
// pages whose cursors, followed, find the same records, each once.
func TestSearch(t *testing.T) {
	st := newStore(t)
	mongostore.SetChunkMax(st, 16)
	rs := recs(0, 400, logs.TypeError)
	for i := range rs {
		if i%37 == 0 {
			rs[i].LogBody += " Upstream TIMEOUT"
		}
	}
	for i := 0; i < len(rs); i += 50 {
		insert(t, st, rs[i:i+50])
	}
	search := func(q string) *logs.Search {
		s, err := logs.ParseSearch(q)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hasTimeout := func(k int) bool { return k%37 == 0 }
	var timeouts []string
	for _, b := range want(0, 400, hasTimeout) {
		timeouts = append(timeouts, b+" Upstream TIMEOUT")
	}
	got := list(t, st, logs.Query{Type: logs.TypeError, Search: search("timeout"), Limit: 100})
	if strings.Join(got, "|") != strings.Join(timeouts, "|") {
		t.Fatalf("q=timeout: %q, want %q", got, timeouts)
	}
	// With metricsId (every 7th), an app (even k) and a time range.
	got = list(t, st, logs.Query{Type: logs.TypeError, AppID: "appA", MetricsID: "m7", Search: search(`"upstream timeout"`), Limit: 100,
		From: t0.Add(100 * time.Millisecond), To: t0.Add(300 * time.Millisecond)})
	var w []string
	for k := 299; k >= 100; k-- {
		if k%37 == 0 && k%7 == 0 && k%2 == 0 {
			w = append(w, fmt.Sprintf("body %d Upstream TIMEOUT", k))
		}
	}
	if strings.Join(got, "|") != strings.Join(w, "|") {
		t.Fatalf("combined: %q, want %q", got, w)
	}
	// A budget already spent: every page stops after one more chunk, with
	// a cursor; following the cursors finds every match once, in order.
	var all []string
	before, partial := "", 0
	for range 1000 {
		page, err := st.List(context.Background(), logs.Query{Type: logs.TypeError, Search: search("timeout"), Limit: 100, BeforeID: before, Deadline: time.Unix(1, 0)})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			all = append(all, r.LogBody)
		}
		if page.ResumeBefore == "" {
			break
		}
		partial++
		before = page.ResumeBefore
	}
	if strings.Join(all, "|") != strings.Join(timeouts, "|") || partial < 10 {
		t.Fatalf("following %d partial pages: %q, want %q", partial, all, timeouts)
	}
}

// Stats counts each record once, in its bucket, whether its chunk lies in
// one bucket (counted from the chunk's header) or straddles several.
func TestStats(t *testing.T) {
	st := newStore(t)
	mongostore.SetChunkMax(st, 16)
	insert(t, st, recs(0, 1000, logs.TypeLog))
	insert(t, st, recs(0, 300, logs.TypeDB))
	// The writer's store has every chunk in its cache; a fresh one (another
	// replica, a restart) reads the chunks' headers from the server.
	fresh := mongostore.New(st.Database())
	for _, st := range []*mongostore.Store{st, fresh} {
		statsMatch(t, st)
	}
}

func statsMatch(t *testing.T, st *mongostore.Store) {
	t.Helper()
	for _, step := range []time.Duration{7 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		for _, app := range []string{"", "appB"} {
			from, to := t0.Add(50*time.Millisecond), t0.Add(950*time.Millisecond)
			s, err := st.Stats(context.Background(), logs.StatsQuery{AppID: app, From: from, To: to, Step: step})
			if err != nil {
				t.Fatal(err)
			}
			if want := int((to.Sub(from) + step - 1) / step); len(s.Counts) != want || s.Partial {
				t.Fatalf("step %v: %d buckets (partial %v), want %d", step, len(s.Counts), s.Partial, want)
			}
			for i, c := range s.Counts {
				want := map[string]int64{}
				for k := 50; k < 950; k++ {
					at := t0.Add(time.Duration(k) * time.Millisecond)
					if int(at.Sub(from)/step) != i || (app == "appB" && k%2 == 0) {
						continue
					}
					want[logs.TypeLog]++
					if k < 300 {
						want[logs.TypeDB]++
					}
				}
				for _, typ := range logs.Types {
					if c[typ] != want[typ] {
						t.Fatalf("app %q step %v bucket %d %s: %d, want %d", app, step, i, typ, c[typ], want[typ])
					}
				}
			}
		}
	}
}
