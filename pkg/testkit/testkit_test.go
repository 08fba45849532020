package testkit

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/minio/minio-go/v7"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestMain(m *testing.M) { Main(m) }

// The kit's servers are real: a document written through the driver is read
// back, an object put in MinIO is read back, a JetStream message is consumed.
func TestServersAreReal(t *testing.T) {
	s := Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	coll := s.Mongo.Database(s.Database(t)).Collection("c")
	if _, err := coll.InsertOne(ctx, bson.M{"_id": "a", "n": 42}); err != nil {
		t.Fatal(err)
	}
	var got bson.M
	if err := coll.FindOne(ctx, bson.M{"_id": "a"}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if n, _ := got["n"].(int32); n != 42 {
		t.Fatalf("mongo: got %v, want 42", got["n"])
	}

	bucket := s.Bucket(t)
	payload := []byte("hello object")
	if _, err := s.S3.PutObject(ctx, bucket, "k", bytes.NewReader(payload), int64(len(payload)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := s.S3.GetObject(ctx, bucket, "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(b, payload) {
		t.Fatalf("s3: got %q, %v", b, err)
	}

	p := s.SubjectPrefix(t)
	st, err := s.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "T" + p[1:] + "X", Subjects: []string{p + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = st
	if _, err := s.JS.Publish(ctx, p+".x", []byte("m1")); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("jetstream: %+v %v", info, err)
	}
	_ = s.JS.DeleteStream(ctx, "T"+p[1:]+"X")
}

func TestIdentityRoundTrip(t *testing.T) {
	id := NewIdentity(t)
	pub, err := identity.ParsePublicKey(id.PublicPEM)
	if err != nil {
		t.Fatal(err)
	}
	tok := id.Token(t, identity.Claims{Role: identity.RoleAdmin, RegisteredClaims: jwtSubject("u1")}, "files")
	c, err := identity.NewVerifier(pub, "files").Verify(tok)
	if err != nil || c.UserID() != "u1" || !c.IsAdmin() {
		t.Fatalf("verify: %+v %v", c, err)
	}
	if _, err := identity.NewVerifier(pub, "logs").Verify(tok); err == nil {
		t.Fatal("token for files accepted by logs")
	}
	other := NewIdentity(t)
	opub, _ := identity.ParsePublicKey(other.PublicPEM)
	if _, err := identity.NewVerifier(opub, "files").Verify(tok); err == nil {
		t.Fatal("token accepted under another key")
	}
	// Change one character well inside the signature (the last ones may
	// carry padding bits, and "AA" may be what was there).
	b := []byte(tok)
	i := len(b) - 10
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	if _, err := identity.NewVerifier(pub, "files").Verify(string(b)); err == nil {
		t.Fatal("tampered token accepted")
	}
}

// Asking for one server starts only that one; the others start when a
// later test asks for them. (The kit is shared by the binary, so this test
// stops it first to see what a fresh binary does.)
func TestGetStartsOnlyWhatIsAskedFor(t *testing.T) {
	SkipShort(t)
	Stop()
	t.Cleanup(Stop)
	s := Get(t, NATS)
	if s.NATS == nil || s.Mongo != nil || s.S3 != nil || s.FerretDB != nil || s.MinIO != nil {
		t.Fatalf("Get(NATS) started %+v", s)
	}
	env := s.NewEnv(t)
	if env["NATS_URL"] == "" || env["NATS_SUBJECT_PREFIX"] == "" {
		t.Fatalf("env without NATS: %v", env)
	}
	for _, k := range []string{"MONGO_URL", "MONGO_DB", "S3_ENDPOINT", "S3_BUCKET"} {
		if _, ok := env[k]; ok {
			t.Fatalf("env of a NATS-only test has %s: %v", k, env)
		}
	}
	m := Get(t, Mongo)
	if m.Mongo == nil || m.NATS == nil || m.S3 != nil {
		t.Fatalf("Get(Mongo) after Get(NATS): mongo %v nats %v s3 %v", m.Mongo != nil, m.NATS != nil, m.S3 != nil)
	}
	mu.Lock()
	got := started
	mu.Unlock()
	if got != NATS|Mongo {
		t.Fatalf("started %b, want NATS and Mongo only", got)
	}
}
