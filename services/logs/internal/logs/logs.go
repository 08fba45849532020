// Package logs is the logs service's domain: log records tagged with a type
// and a known application, the rules that make a record valid, and the
// store the records live in.
package logs

import (
	"context"
	"errors"
	"fmt"
	"github.com/acme/platform/pkg/logclient"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Record types: the same as the wire contract publishers use.
const (
	TypeLog   = logclient.TypeLog
	TypeError = logclient.TypeError
	TypeDB    = logclient.TypeDB
)

// Types are the accepted record types, in the order they are documented.
var Types = logclient.Types

// ValidType reports whether t is one of Types (case-sensitive).
func ValidType(t string) bool { return slices.Contains(Types, t) }

// MaxMetricsID bounds the metricsId length.
const MaxMetricsID = 256

// App is a known application.
type App struct {
	ID   string
	Name string
}

// Record is one stored log record.
type Record struct {
	ID        string // set by the store (StreamRecordID for a stream message)
	AppID     string
	App       string // the app's name, kept for convenience
	Type      string
	LogBody   string
	MetricsID string // "" when absent
	CreatedAt time.Time
	MsgID     string // the Nats-Msg-Id, or a fresh one for HTTP writes
	// Stream (StreamTag) and Seq place a record that came from the
	// JetStream stream: its stream sequence is its idempotency key, the
	// same on every redelivery. Stream is "" for HTTP writes.
	Stream string
	Seq    uint64
}

// DeadLetter is a NATS message that can never become a record.
type DeadLetter struct {
	Key        string // "<stream>:<sequence>": one entry per stored message
	Stream     string
	Sequence   uint64
	Subject    string
	MsgID      string
	Data       string // payload, truncated to MaxDeadLetterData
	Reason     string
	Deliveries uint64
	ReceivedAt time.Time
}

// MaxDeadLetterData bounds the payload copy kept in a dead letter.
const MaxDeadLetterData = 64 << 10

// Query selects records, newest first.
type Query struct {
	Type      string
	AppID     string    // "" = every app
	MetricsID string    // "" = any
	From, To  time.Time // zero = unbounded; From inclusive, To exclusive
	BeforeID  string    // cursor: only records listed before this one
	Search    *Search   // nil = no q=
	// Deadline, when set, is the read's time budget: a filtered read that
	// reaches it before its page is full ends with what it found and a
	// ResumeBefore cursor (a partial page), never with a timeout.
	Deadline time.Time
	Skip     int
	Limit    int
}

// Page is what List found. A filtered read looks at a bounded number of
// chunks, within the query's time budget; when either cut the page short,
// ResumeBefore is the id of the oldest record it looked at: the same query
// with that cursor (page 1) reads on from there.
type Page struct {
	Records      []Record
	ResumeBefore string
}

// Next is the cursor that reads on after this page of a read of limit
// records (the oldest record of a full page, or ResumeBefore of a partial
// one), "" when nothing follows.
func (p Page) Next(limit int) string {
	switch {
	case p.ResumeBefore != "":
		return p.ResumeBefore
	case len(p.Records) == limit && limit > 0:
		return p.Records[len(p.Records)-1].ID
	}
	return ""
}

// StatsQuery selects what Stats counts: records created in [From, To),
// counted per Step (Step divides nothing: the last bucket may be short).
type StatsQuery struct {
	AppID    string // "" = every app
	From, To time.Time
	Step     time.Duration
}

// MaxStatsBuckets is the most buckets a StatsQuery may make: Stats
// allocates one map per bucket, so the count is bounded before anything is
// allocated.
const MaxStatsBuckets = 1000

// Buckets checks q and returns its number of buckets, ceil((To-From)/Step),
// computed without overflow: Step must be positive, From before To, To-From
// a representable duration (time.Time.Sub saturates at about 292 years,
// which would make every bucket index wrong) and the count at most
// MaxStatsBuckets. Every bucket boundary From+i*Step (i < n) is then
// representable too. The error is an *InvalidError naming the field.
func (q StatsQuery) Buckets() (int, error) {
	if q.Step <= 0 {
		return 0, &InvalidError{Field: "step", Code: "invalid_step", Msg: "step must be positive"}
	}
	if !q.From.Before(q.To) {
		return 0, &InvalidError{Field: "to", Code: "invalid_range", Msg: "to must be after from"}
	}
	span := q.To.Sub(q.From)
	if !q.From.Add(span).Equal(q.To) { // Sub saturated
		return 0, &InvalidError{Field: "from", Code: "range_too_long", Msg: "from..to is longer than a duration can hold"}
	}
	n := span / q.Step // no addition: span + Step - 1 may overflow
	if span%q.Step != 0 {
		n++
	}
	if n > MaxStatsBuckets {
		return 0, &InvalidError{Field: "step", Code: "too_many_buckets",
			Msg: fmt.Sprintf("from..to divided by step makes %d buckets; at most %d", n, MaxStatsBuckets)}
	}
	return int(n), nil
}

// Bucket returns the index of the bucket of t among n (from Buckets), or -1
// when t is outside [From, To) or past the last bucket.
func (q StatsQuery) Bucket(t time.Time, n int) int {
	if t.Before(q.From) || !t.Before(q.To) || q.Step <= 0 {
		return -1
	}
	b := t.Sub(q.From) / q.Step
	if b < 0 || b >= time.Duration(n) {
		return -1
	}
	return int(b)
}

// Stats is the answer to a StatsQuery: Counts[i][type] is the number of
// records of type created in [From+i*Step, From+(i+1)*Step). Partial is set
// when a chain was longer than a read may look at (the oldest buckets may
// then be short).
type Stats struct {
	Counts  []map[string]int64
	Partial bool
}

// Store keeps records, apps and dead letters.
type Store interface {
	// EnsureApps makes an App for every name (idempotent, safe when several
	// replicas start at once) and returns them in the order of names.
	EnsureApps(ctx context.Context, names []string) ([]App, error)
	// InsertBatch stores records and sets their ID, each once per (Stream,
	// Seq): a stream message stored before is not stored again (a record
	// with no Stream is always new). The returned slice has
	// one entry per record: nil when stored, ErrDuplicate when it was
	// stored by an earlier delivery, the error otherwise. err is set when
	// nothing can be said about individual records (the write failed or ctx
	// ended part way; a retry with the same records completes it without
	// duplicates).
	InsertBatch(ctx context.Context, rs []Record) (perRecord []error, err error)
	// List returns the records of q, newest first (ErrNotFound for an
	// unknown cursor, ErrCursorMismatch for a cursor of another type or app).
	List(ctx context.Context, q Query) (Page, error)
	// Stats counts the records of each type (of one app when q.AppID is
	// set) created in each step of [q.From, q.To).
	Stats(ctx context.Context, q StatsQuery) (Stats, error)
	// DeleteBefore removes records created before t and reports how many.
	DeleteBefore(ctx context.Context, t time.Time) (int64, error)
	AddDeadLetters(ctx context.Context, ds []DeadLetter) error
	ListDeadLetters(ctx context.Context, skip, limit int) ([]DeadLetter, error)
	Ping(ctx context.Context) error
}

// Errors.
var (
	ErrNotFound       = errors.New("not found")
	ErrDuplicate      = errors.New("stored by an earlier delivery")
	ErrCursorMismatch = errors.New("the cursor record has another type or app")
)

// InvalidError says why a record is refused; Field names the culprit.
type InvalidError struct {
	Field string
	Code  string
	Msg   string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Msg }

// UnknownAppError is returned for an app name that is not configured.
type UnknownAppError struct {
	Name  string
	Known []App
}

func (e *UnknownAppError) Error() string { return fmt.Sprintf("unknown app %q", e.Name) }

// Apps is the configured set of applications.
type Apps struct {
	list   []App
	byName map[string]App
}

// NewApps indexes apps by name.
func NewApps(list []App) *Apps {
	a := &Apps{list: slices.Clone(list), byName: make(map[string]App, len(list))}
	for _, x := range list {
		a.byName[x.Name] = x
	}
	return a
}

// List returns the apps in configuration order.
func (a *Apps) List() []App { return slices.Clone(a.list) }

// Lookup finds an app by its exact (case-sensitive) name.
func (a *Apps) Lookup(name string) (App, error) {
	if x, ok := a.byName[name]; ok {
		return x, nil
	}
	return App{}, &UnknownAppError{Name: name, Known: a.List()}
}

// DefaultAppNames returns the six default application names for org.
func DefaultAppNames(org string) []string {
	return []string{"LOGGING", org + "-S3", org + "-AUTH", "SERVER-APP-A", "SERVER-APP-B", "SERVER-APP-C"}
}

// Validator checks the fields of a new record.
type Validator struct {
	Apps    *Apps
	MaxBody int
}

// Check validates a new record's fields and returns the record's App.
func (v Validator) Check(app, typ, body, metricsID string) (App, error) {
	a, err := v.Apps.Lookup(app)
	if err != nil {
		return App{}, err
	}
	if !ValidType(typ) {
		return App{}, &InvalidError{Field: "type", Code: "invalid_type", Msg: "type must be one of " + strings.Join(Types, ", ")}
	}
	switch {
	case body == "":
		return App{}, &InvalidError{Field: "logBody", Code: "required", Msg: "logBody must not be empty"}
	case len(body) > v.MaxBody:
		return App{}, &InvalidError{Field: "logBody", Code: "too_long", Msg: fmt.Sprintf("logBody exceeds %d bytes", v.MaxBody)}
	case !utf8.ValidString(body):
		return App{}, &InvalidError{Field: "logBody", Code: "invalid_utf8", Msg: "logBody must be valid UTF-8"}
	}
	if len(metricsID) > MaxMetricsID {
		return App{}, &InvalidError{Field: "metricsId", Code: "too_long", Msg: fmt.Sprintf("metricsId exceeds %d bytes", MaxMetricsID)}
	}
	return a, nil
}
