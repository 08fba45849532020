package testkit

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"sync"
	"testing"
)

// A Scan is one query the embedded FerretDB answered by reading a whole
// table: no index served its filter (or its sort, with a limit). The patched
// server reports them when ACME_FERRETDB_SCAN_LOG is set
// (docs/design/ferretdb.md), which the kit does for its own server.
type Scan struct {
	DB         string `json:"db"`
	Collection string `json:"collection"`
	Filter     string `json:"filter"` // the filter's shape: keys, operators, value types
	Sort       string `json:"sort"`
	Limit      bool   `json:"limit"`
	Plan       string `json:"plan"`
	// Served is set on a line that is not a scan: what SQL answered
	// whole ("sum": a match and a group, docs/design/ferretdb.md).
	Served string `json:"served"`
}

// AllowedScan is a query shape that may read a whole collection, with the
// reason. Every other query of the services is served by an index
// (docs/design/queries.md lists each shape and its index).
type AllowedScan struct {
	Collection, Filter, Why string
}

// AllowedScans are the shapes that may read a whole collection: periodic
// sweeps and start-up work, never a request's path. docs/design/queries.md
// lists them with every other shape (TestQueryDocListsAllowedScans).
var AllowedScans = []AllowedScan{
	{"sessions", "{$or: [{expiresAt: {$lte: time.Time}}]}", "the expired-session sweep (AUTH_SESSION_SWEEP_INTERVAL, 10 min)"},
	{"sessions", "{expiresAt: {$gt: time.Time}, lastSeenAt: {$gt: time.Time}}", "the live-sessions gauge, at most 1% of a replica's time"},
	{"account_tokens", "{expiresAt: {$lte: time.Time}}", "the expired-token sweep"},
	{"signin_throttle", "{expires: {$lte: time.Time}}", "the throttle sweep (ended windows)"},
	{"signin_throttle", "{touched: {$lt: time.Time}, lockedUntil: {$lt: time.Time}}", "the throttle sweep (quiet keys)"},
	{"file_links", "{expiresAt: {$lt: time.Time}}", "the expired-link sweep (FILES_SWEEP_INTERVAL, 15 min), 1,000 at a time"},
	{"log_ids", "{at: {$lt: time.Time}}", "retention (LOGS_RETENTION_INTERVAL)"},
	{"log_heads", "{at: {$lt: time.Time}}", "retention"},
}

// allowedInDB are shapes allowed in one database by AllowScan.
var allowedInDB sync.Map // db → []AllowedScan

// AllowScan allows a whole-collection read of shape filter in database db:
// for a test's own inspection of what a store wrote, never for the
// store's queries.
func AllowScan(db, collection, filter string) {
	v, _ := allowedInDB.LoadOrStore(db, &[]AllowedScan{})
	l := v.(*[]AllowedScan)
	scanMu.Lock()
	*l = append(*l, AllowedScan{Collection: collection, Filter: filter, Why: "a test's own check"})
	scanMu.Unlock()
}

var scanMu sync.Mutex

// Scans returns the scans the kit's FerretDB reported for database db (not
// the lines that say what SQL served whole).
func Scans(log, db string) ([]Scan, error) {
	f, err := os.Open(log)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Scan
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var s Scan
		if json.Unmarshal(sc.Bytes(), &s) == nil && s.DB == db && s.Served == "" {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

// scanAllowed reports whether s is one of AllowedScans or allowed in its
// database. A read with no condition and no sort asks for every document
// (the start-up check of user_emails, retention's list of apps, a test's
// look at what was stored) and reads them all on any server: it is not a
// query an index should have served.
func scanAllowed(s Scan) bool {
	if s.Filter == "{}" && s.Sort == "{}" {
		return true
	}
	allowed := AllowedScans
	if v, ok := allowedInDB.Load(s.DB); ok {
		scanMu.Lock()
		allowed = append(slices.Clip(allowed), *v.(*[]AllowedScan)...)
		scanMu.Unlock()
	}
	for _, a := range allowed {
		if a.Collection == s.Collection && (a.Filter == s.Filter || a.Filter == "*") {
			return true
		}
	}
	return false
}

// checkScans fails t for every scan of db not in AllowedScans. Without a
// scan log (an external MONGO_URL) there is nothing to check.
func checkScans(t testing.TB, log, db string) {
	t.Helper()
	if log == "" {
		return
	}
	scans, err := Scans(log, db)
	if err != nil {
		t.Errorf("testkit: reading the scan log: %v", err)
		return
	}
	defer allowedInDB.Delete(db)
	seen := map[Scan]bool{}
	for _, s := range scans {
		if scanAllowed(s) || seen[s] {
			continue
		}
		seen[s] = true
		t.Errorf("testkit: a query no index serves: collection %s, filter %s, sort %s (plan: %s); serve it with an index (docs/design/queries.md)", s.Collection, s.Filter, s.Sort, s.Plan)
	}
}
