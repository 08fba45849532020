package app_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/services/logs/internal/app"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/logs/storetest"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"github.com/acme/platform/services/logs/internal/natsingest"
	"github.com/golang-jwt/jwt/v5"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// svc is one running logs service of a test.
type svc struct {
	t      *testing.T
	s      *testkit.Servers
	env    testkit.Env
	id     testkit.Identity
	base   string
	run    *apptest.Service
	mu     sync.Mutex
	seqs   map[string]uint64 // msgID -> stream sequence of its last publish (publish, storeDirect)
	expect map[string]uint64 // msgID -> the sequence storeDirect stored it at
}

// newEnv is the environment of a test: fresh database and subject prefix,
// a fresh identity key, quick redeliveries.
func newEnv(t *testing.T, extra map[string]string) (*testkit.Servers, testkit.Env, testkit.Identity) {
	t.Helper()
	s := testkit.Get(t, testkit.Mongo, testkit.NATS)
	env, id := s.ServiceEnv(t, []string{"LOGS_ADDR"}, map[string]string{"LOGS_ACK_WAIT": "1s", "LOGS_FETCH_WAIT": "100ms"}, extra)
	return s, env, id
}

// start runs app.Run in the background and waits until it listens.
func start(t *testing.T, s *testkit.Servers, env testkit.Env, id testkit.Identity) *svc {
	t.Helper()
	run := apptest.Start(t, app.Run, env.Getenv, apptest.Options{})
	return &svc{t: t, s: s, env: env, id: id, base: run.URL, run: run}
}

func startService(t *testing.T, extra map[string]string) *svc {
	t.Helper()
	s, env, id := newEnv(t, extra)
	return start(t, s, env, id)
}

// stop cancels Run and waits for it (idempotent).
func (v *svc) stop() {
	v.t.Helper()
	if err := v.run.Stop(); err != nil {
		v.t.Errorf("Run: %v", err)
	}
}

func (v *svc) token(sub, role string) string {
	return v.id.Token(v.t, identity.Claims{Role: role, RegisteredClaims: jwtSubject(sub)}, "logs")
}

func (v *svc) admin() string { return v.token("admin-1", identity.RoleAdmin) }

// do sends a request with an optional identity token and JSON body and
// decodes a JSON answer.
func (v *svc) do(method, path, token string, body any) (int, map[string]any) {
	v.t.Helper()
	c := apptest.NewClient(v.t, v.base)
	c.HTTP = http.DefaultClient
	if token != "" {
		c = c.With(identity.Header, token)
	}
	r := c.Do(method, path, body)
	return r.Status, r.Object(v.t)
}

func (v *svc) store() *mongostore.Store {
	return mongostore.New(v.s.Mongo.Database(v.env["MONGO_DB"]))
}

// count reads every listed record of the type chains and counts those
// match accepts (all with nil), failing the test when one is listed twice.
func (v *svc) count(match func(logs.Record) bool) int64 {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	all, err := storetest.All(ctx, v.store(), "")
	if err != nil {
		v.t.Fatal(err)
	}
	seen := map[string]bool{}
	var n int64
	for _, r := range all {
		if seen[r.ID] {
			v.t.Fatalf("record %s listed twice", r.ID)
		}
		seen[r.ID] = true
		if match == nil || match(r) {
			n++
		}
	}
	return n
}

// checkChains fails the test unless the chains of each app list exactly
// the records of that app in the type chains, once (call it once writes
// have settled).
func (v *svc) checkChains() {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := v.store()
	all, err := storetest.All(ctx, st, "")
	if err != nil {
		v.t.Fatal(err)
	}
	want := map[string]map[string]bool{}
	for _, r := range all {
		if want[r.AppID] == nil {
			want[r.AppID] = map[string]bool{}
		}
		want[r.AppID][r.ID] = true
	}
	for app, ids := range want {
		rs, err := storetest.All(ctx, st, app)
		if err != nil {
			v.t.Fatal(err)
		}
		for _, r := range rs {
			if !ids[r.ID] {
				v.t.Fatalf("record %s listed again, or only, in the chains of app %s", r.ID, app)
			}
			delete(ids, r.ID)
		}
		if len(ids) > 0 {
			v.t.Fatalf("%d records of app %s missing from its chains", len(ids), app)
		}
	}
}

func byApp(name string) func(logs.Record) bool {
	return func(r logs.Record) bool { return r.App == name }
}

// recordID is the id of the record stored from the message published with
// msgID.
func (v *svc) recordID(msgID string) string {
	v.t.Helper()
	v.mu.Lock()
	seq := v.seqs[msgID]
	v.mu.Unlock()
	if seq == 0 {
		v.t.Fatalf("no message %q was published", msgID)
	}
	return logs.StreamRecordID(v.streamTag(), seq)
}

func (v *svc) streamTag() string {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tag, err := natsingest.Tag(ctx, v.s.JS, v.prefix())
	if err != nil {
		v.t.Fatal(err)
	}
	return tag
}

func (v *svc) byMsgID(msgID string) func(logs.Record) bool {
	id := v.recordID(msgID)
	return func(r logs.Record) bool { return r.ID == id }
}

// logsOf is the "logs" array of a listing.
func logsOf(t *testing.T, body map[string]any) []map[string]any {
	t.Helper()
	return apptest.Objects(t, body, "logs")
}

func jwtSubject(s string) jwt.RegisteredClaims { return jwt.RegisteredClaims{Subject: s} }

// storeDirect stores a record of type log as the delivery of the next
// message of the stream would, without NATS: publishing msgID next makes a
// redelivery of it (publish checks it gets that sequence).
func (v *svc) storeDirect(msgID, app, body string) {
	v.t.Helper()
	ctx := context.Background()
	st := v.store()
	apps, err := st.EnsureApps(ctx, []string{app})
	if err != nil {
		v.t.Fatal(err)
	}
	stream, err := v.s.JS.Stream(ctx, natsingest.StreamName(v.prefix()))
	if err != nil {
		v.t.Fatal(err)
	}
	seq := stream.CachedInfo().State.LastSeq + 1
	if per, err := st.InsertBatch(ctx, []logs.Record{{MsgID: msgID, Type: "log", App: app, AppID: apps[0].ID,
		LogBody: body, CreatedAt: time.Now(), Stream: v.streamTag(), Seq: seq}}); err != nil || per[0] != nil {
		v.t.Fatal(err, per)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seqs == nil {
		v.seqs = map[string]uint64{}
	}
	if v.expect == nil {
		v.expect = map[string]uint64{}
	}
	v.seqs[msgID], v.expect[msgID] = seq, seq
}
