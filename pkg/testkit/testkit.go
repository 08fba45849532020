// Package testkit gives tests real servers: NATS with JetStream (in-process),
// a MongoDB-wire server (FerretDB on SQLite, as a child process built once
// without the race detector) and MinIO (a child process), each started on
// first use by a test that asks for it (Get(t, testkit.NATS) starts only
// NATS) and shared by the test binary, with a database, bucket and subject
// prefix of its own for every test. MONGO_URL, S3_ENDPOINT (with S3_ACCESS_KEY and
// S3_SECRET_KEY) and NATS_URL point the kit at external servers instead.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { testkit.Main(m) }
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/identity"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	mongodrv "go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Server names one of the kit's servers, for Get.
type Server int

const (
	// NATS is NATS with JetStream, in this process.
	NATS Server = 1 << iota
	// Mongo is the MongoDB-wire server (FerretDB, a child process).
	Mongo
	// S3 is MinIO, a child process.
	S3

	all = NATS | Mongo | S3
)

// Servers are the shared servers of one test binary. A value returned by
// Get holds the servers it was asked for (and any other already started).
type Servers struct {
	MongoURL   string
	NATSURL    string
	S3Endpoint string
	S3Access   string
	S3Secret   string

	Mongo *mongodrv.Client
	S3    *minio.Client
	NATS  *nats.Conn
	JS    jetstream.JetStream

	// MinIO is the kit's own MinIO process (nil when S3_ENDPOINT is set).
	MinIO *embedded.MinIO
	// FerretDB is the kit's own MongoDB-wire server process (nil when
	// MONGO_URL is set).
	FerretDB *embedded.FerretDBProc
	// ScanLog is the file the embedded FerretDB reports every query no
	// index serves to (empty with MONGO_URL); Database checks it.
	ScanLog string

	need Server // what Get was asked for: the servers NewEnv points at
}

var (
	mu       sync.Mutex
	shared   Servers // the servers started so far
	started  Server  // which of them
	startErr = map[Server]error{}
	stops    []func() // in start order
	tmpRoot  string
)

// Main runs the tests and stops the servers afterwards.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the shared servers, if started.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	stops, shared, started, startErr = nil, Servers{}, 0, map[Server]error{}
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
		tmpRoot = ""
	}
}

// SkipShort skips a test that starts a real server (NATS, FerretDB, MinIO,
// Mailpit, the platform's processes) in the fast tier, `go test -short`.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real server; not in the fast tier (-short)")
	}
}

// Get starts the servers named (all three when none is) on first use and
// returns them; a server no test of the binary asks for is never started.
// It fails the test if one cannot start, and skips it under -short.
func Get(t testing.TB, need ...Server) *Servers {
	t.Helper()
	SkipShort(t) // the fast tier starts no server; `make test` runs these
	var want Server
	for _, n := range need {
		want |= n
	}
	if want == 0 {
		want = all
	}
	mu.Lock()
	defer mu.Unlock()
	if err := ensure(want); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	s := shared
	s.need = want
	return &s
}

// ensure starts the servers of want not started yet; mu is held.
func ensure(want Server) error {
	if tmpRoot == "" {
		dir, err := os.MkdirTemp("", "acme-testkit-")
		if err != nil {
			return err
		}
		tmpRoot = dir
	}
	for _, k := range []struct {
		s     Server
		start func() error
	}{{NATS, startNATS}, {Mongo, startMongo}, {S3, startS3}} {
		if want&k.s == 0 || started&k.s != 0 {
			continue
		}
		if err := startErr[k.s]; err != nil {
			return err // failed before: fail fast, do not try again
		}
		if err := k.start(); err != nil {
			startErr[k.s] = err
			return err
		}
		started |= k.s
	}
	return nil
}

// server returns the shared servers with s started, for the methods that
// need a server the value was not asked for.
func server(t testing.TB, s Server) *Servers {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if err := ensure(s); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	c := shared
	return &c
}

// onStop registers a stop function; a failed start runs those it added.
func onStop(f func()) { stops = append(stops, f) }

func startNATS() error {
	n := len(stops)
	fail := func(err error) error { unwind(n); return err }
	if u := os.Getenv("NATS_URL"); u != "" {
		shared.NATSURL = u
	} else {
		ns, err := embedded.NATS(filepath.Join(tmpRoot, "nats"), "127.0.0.1", 0)
		if err != nil {
			return fail(err)
		}
		onStop(func() { ns.Shutdown(); ns.WaitForShutdown() })
		shared.NATSURL = ns.ClientURL()
	}
	nc, err := nats.Connect(shared.NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		return fail(fmt.Errorf("nats connect: %w", err))
	}
	onStop(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	shared.NATS, shared.JS = nc, js
	return nil
}

func startMongo() error {
	n := len(stops)
	fail := func(err error) error { unwind(n); return err }
	ctx := context.Background()
	if u := os.Getenv("MONGO_URL"); u != "" {
		shared.MongoURL = u
	} else {
		scanLog := filepath.Join(tmpRoot, "scans.jsonl")
		m, err := embedded.StartFerretDB(ctx, embedded.FerretDBOptions{
			Dir: filepath.Join(tmpRoot, "mongo"), Log: os.Stderr,
			Env: []string{"ACME_FERRETDB_SCAN_LOG=" + scanLog},
		})
		if err != nil {
			return fail(err)
		}
		onStop(m.Stop)
		shared.FerretDB, shared.ScanLog = m, scanLog
		shared.MongoURL = m.URI
	}
	mc, err := mongodrv.Connect(options.Client().ApplyURI(shared.MongoURL).SetServerSelectionTimeout(10 * time.Second))
	if err != nil {
		return fail(fmt.Errorf("mongo connect: %w", err))
	}
	onStop(func() { _ = mc.Disconnect(context.Background()) })
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := mc.Ping(pctx, nil); err != nil {
		return fail(fmt.Errorf("mongo ping: %w", err))
	}
	shared.Mongo = mc
	return nil
}

func startS3() error {
	n := len(stops)
	fail := func(err error) error { unwind(n); return err }
	if e := os.Getenv("S3_ENDPOINT"); e != "" {
		shared.S3Endpoint, shared.S3Access, shared.S3Secret = e, os.Getenv("S3_ACCESS_KEY"), os.Getenv("S3_SECRET_KEY")
	} else {
		mi, err := embedded.StartMinIO(context.Background(), embedded.MinIOOptions{
			Dir:       filepath.Join(tmpRoot, "minio"),
			AccessKey: "testkit-" + randHex(4),
			SecretKey: randHex(16),
			Log:       os.Stderr,
		})
		if err != nil {
			return fail(err)
		}
		onStop(mi.Stop)
		shared.MinIO = mi
		shared.S3Endpoint, shared.S3Access, shared.S3Secret = mi.Endpoint, mi.AccessKey, mi.SecretKey
	}
	c, err := minio.New(shared.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(shared.S3Access, shared.S3Secret, "")})
	if err != nil {
		return fail(err)
	}
	shared.S3 = c
	return nil
}

// unwind stops what was started after the first n stop functions.
func unwind(n int) {
	for i := len(stops) - 1; i >= n; i-- {
		stops[i]()
	}
	stops = stops[:n]
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// Name returns a short lower-case name unique to this test: letters of the
// test name plus random hex, safe for databases, buckets and subjects.
func Name(t testing.TB) string {
	base := nonName.ReplaceAllString(strings.ToLower(t.Name()), "")
	if len(base) > 20 {
		base = base[len(base)-20:]
	}
	return "t" + base + randHex(4)
}

// Database returns a new database name, dropped when the test ends.
func (s *Servers) Database(t testing.TB) string {
	t.Helper()
	mc, scanLog := s.Mongo, s.ScanLog
	if mc == nil {
		srv := server(t, Mongo)
		mc, scanLog = srv.Mongo, srv.ScanLog
	}
	name := Name(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		checkScans(t, scanLog, name)
		_ = mc.Database(name).Drop(ctx)
	})
	return name
}

// Bucket creates a bucket, emptied and removed when the test ends.
func (s *Servers) Bucket(t testing.TB) string {
	t.Helper()
	if s.S3 == nil {
		s = server(t, S3)
	}
	name := strings.ReplaceAll(Name(t), "_", "-")
	ctx := context.Background()
	if err := s.S3.MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("testkit: make bucket: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		objs := s.S3.ListObjects(ctx, name, minio.ListObjectsOptions{Recursive: true})
		for e := range s.S3.RemoveObjects(ctx, name, objs, minio.RemoveObjectsOptions{}) {
			t.Logf("testkit: remove object %s: %v", e.ObjectName, e.Err)
		}
		_ = s.S3.RemoveBucket(ctx, name)
	})
	return name
}

// SubjectPrefix returns a NATS subject prefix for this test. JetStream
// streams whose names begin with the upper-cased prefix are deleted when the
// test ends.
func (s *Servers) SubjectPrefix(t testing.TB) string {
	t.Helper()
	if s.JS == nil {
		s = server(t, NATS)
	}
	p := Name(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		names := s.JS.StreamNames(ctx)
		for n := range names.Name() {
			if strings.HasPrefix(n, strings.ToUpper(p)) {
				_ = s.JS.DeleteStream(ctx, n)
			}
		}
	})
	return p
}

// Identity is a fresh gateway key pair for a test.
type Identity struct {
	Signer     *identity.Signer
	PublicPEM  string
	PrivatePEM string
}

// NewIdentity makes a key pair and a Signer with a 30 s token lifetime.
func NewIdentity(t testing.TB) Identity {
	t.Helper()
	pub, priv, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, _ := identity.EncodePublicKey(pub)
	privPEM, _ := identity.EncodePrivateKey(priv)
	return Identity{Signer: identity.NewSigner(priv, 30*time.Second), PublicPEM: pubPEM, PrivatePEM: privPEM}
}

// Token signs claims for audience or fails the test.
func (i Identity) Token(t testing.TB, c identity.Claims, audience string) string {
	t.Helper()
	tok, err := i.Signer.Sign(c, audience)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Env is an environment for a service's run function: the shared servers
// plus per-test database, bucket and subject prefix, and extra values.
type Env map[string]string

// Getenv looks a key up.
func (e Env) Getenv(k string) string { return e[k] }

// NewEnv returns an Env pointing at the servers Get was asked for, with a
// fresh database, bucket and subject prefix on each of them.
func (s *Servers) NewEnv(t testing.TB) Env {
	t.Helper()
	need := s.need
	if need == 0 {
		need = all
	}
	env := Env{}
	if need&Mongo != 0 {
		env["MONGO_URL"], env["MONGO_DB"] = s.MongoURL, s.Database(t)
	}
	if need&NATS != 0 {
		env["NATS_URL"], env["NATS_SUBJECT_PREFIX"] = s.NATSURL, s.SubjectPrefix(t)
	}
	if need&S3 != 0 {
		env["S3_ENDPOINT"], env["S3_ACCESS_KEY"], env["S3_SECRET_KEY"] = s.S3Endpoint, s.S3Access, s.S3Secret
		env["S3_BUCKET"] = s.Bucket(t)
	}
	return env
}

// ServiceEnv is the environment of a service under test: NewEnv (a fresh
// database, bucket and subject prefix), a fresh identity key pair whose
// public half the service trusts, the listen address settings named by
// addrs on 127.0.0.1:0 (the service picks a free port), then each of
// settings in turn (an empty value removes the setting). The key pair signs
// the identity tokens a gateway would send.
func (s *Servers) ServiceEnv(t testing.TB, addrs []string, settings ...map[string]string) (Env, Identity) {
	t.Helper()
	env := s.NewEnv(t)
	id := NewIdentity(t)
	env["IDENTITY_PUBLIC_KEY"] = id.PublicPEM
	for _, a := range addrs {
		env[a] = "127.0.0.1:0"
	}
	for _, m := range settings {
		for k, v := range m {
			if v == "" {
				delete(env, k)
			} else {
				env[k] = v
			}
		}
	}
	return env, id
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CutReader yields r's bytes and then fails after n of them, as a
// connection breaking mid-upload.
func CutReader(r io.Reader, n int64) io.Reader { return &cutReader{r: r, n: n} }

type cutReader struct {
	r io.Reader
	n int64
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, errors.New("connection cut")
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}
