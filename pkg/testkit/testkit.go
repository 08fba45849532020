// Package testkit gives tests real servers: NATS with JetStream (in-process),
// a MongoDB-wire server (FerretDB on SQLite, as a child process built once
// without the race detector) and MinIO (a child process), started once per
// test binary and shared, with a database, bucket and subject prefix of its
// own for every test. MONGO_URL, S3_ENDPOINT (with S3_ACCESS_KEY and
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

// Servers are the shared servers of one test binary.
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

	stops []func()
}

var (
	mu       sync.Mutex
	shared   *Servers
	startErr error
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
	if shared != nil {
		for i := len(shared.stops) - 1; i >= 0; i-- {
			shared.stops[i]()
		}
		shared = nil
	}
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

// Get starts the servers on first use and returns them; it fails the test
// if they cannot start, and skips it under -short.
func Get(t testing.TB) *Servers {
	t.Helper()
	SkipShort(t) // the fast tier starts no server; `make test` runs these
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && startErr == nil {
		shared, startErr = start()
	}
	if startErr != nil {
		t.Fatalf("testkit: %v", startErr)
	}
	return shared
}

func start() (*Servers, error) {
	s := &Servers{}
	var err error
	tmpRoot, err = os.MkdirTemp("", "acme-testkit-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Servers, error) {
		for i := len(s.stops) - 1; i >= 0; i-- {
			s.stops[i]()
		}
		return nil, err
	}
	ctx := context.Background()

	// NATS
	if u := os.Getenv("NATS_URL"); u != "" {
		s.NATSURL = u
	} else {
		ns, err := embedded.NATS(filepath.Join(tmpRoot, "nats"), "127.0.0.1", 0)
		if err != nil {
			return fail(err)
		}
		s.stops = append(s.stops, func() { ns.Shutdown(); ns.WaitForShutdown() })
		s.NATSURL = ns.ClientURL()
	}
	if s.NATS, err = nats.Connect(s.NATSURL, nats.MaxReconnects(-1)); err != nil {
		return fail(fmt.Errorf("nats connect: %w", err))
	}
	s.stops = append(s.stops, func() { s.NATS.Close() })
	if s.JS, err = jetstream.New(s.NATS); err != nil {
		return fail(err)
	}

	// MongoDB wire
	if u := os.Getenv("MONGO_URL"); u != "" {
		s.MongoURL = u
	} else {
		m, err := embedded.StartFerretDB(ctx, embedded.FerretDBOptions{Dir: filepath.Join(tmpRoot, "mongo"), Log: os.Stderr})
		if err != nil {
			return fail(err)
		}
		s.stops = append(s.stops, m.Stop)
		s.FerretDB = m
		s.MongoURL = m.URI
	}
	if s.Mongo, err = mongodrv.Connect(options.Client().ApplyURI(s.MongoURL).SetServerSelectionTimeout(10 * time.Second)); err != nil {
		return fail(fmt.Errorf("mongo connect: %w", err))
	}
	s.stops = append(s.stops, func() { _ = s.Mongo.Disconnect(context.Background()) })
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := s.Mongo.Ping(pctx, nil); err != nil {
		return fail(fmt.Errorf("mongo ping: %w", err))
	}

	// S3
	if e := os.Getenv("S3_ENDPOINT"); e != "" {
		s.S3Endpoint, s.S3Access, s.S3Secret = e, os.Getenv("S3_ACCESS_KEY"), os.Getenv("S3_SECRET_KEY")
	} else {
		mi, err := embedded.StartMinIO(ctx, embedded.MinIOOptions{
			Dir:       filepath.Join(tmpRoot, "minio"),
			AccessKey: "testkit-" + randHex(4),
			SecretKey: randHex(16),
			Log:       os.Stderr,
		})
		if err != nil {
			return fail(err)
		}
		s.stops = append(s.stops, mi.Stop)
		s.MinIO = mi
		s.S3Endpoint, s.S3Access, s.S3Secret = mi.Endpoint, mi.AccessKey, mi.SecretKey
	}
	if s.S3, err = minio.New(s.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.S3Access, s.S3Secret, "")}); err != nil {
		return fail(err)
	}
	return s, nil
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
	name := Name(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Mongo.Database(name).Drop(ctx)
	})
	return name
}

// Bucket creates a bucket, emptied and removed when the test ends.
func (s *Servers) Bucket(t testing.TB) string {
	t.Helper()
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

// NewEnv returns an Env pointing at the servers with a fresh database,
// bucket and subject prefix.
func (s *Servers) NewEnv(t testing.TB) Env {
	t.Helper()
	return Env{
		"MONGO_URL":           s.MongoURL,
		"MONGO_DB":            s.Database(t),
		"NATS_URL":            s.NATSURL,
		"NATS_SUBJECT_PREFIX": s.SubjectPrefix(t),
		"S3_ENDPOINT":         s.S3Endpoint,
		"S3_ACCESS_KEY":       s.S3Access,
		"S3_SECRET_KEY":       s.S3Secret,
		"S3_BUCKET":           s.Bucket(t),
	}
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
