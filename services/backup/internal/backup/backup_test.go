package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/acme/platform/pkg/testkit"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testkit.Stop()
	os.Exit(code)
}

// testPlatform is a database and a bucket of the test kit's servers.
func testPlatform(t *testing.T, mfaKey string) Platform {
	t.Helper()
	s := testkit.Get(t, testkit.Mongo|testkit.S3)
	mc, err := mongo.Connect(options.Client().ApplyURI(s.MongoURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Disconnect(context.Background()) })
	oc, err := minio.New(s.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.S3Access, s.S3Secret, "")})
	if err != nil {
		t.Fatal(err)
	}
	return Platform{DB: mc.Database(s.Database(t)), Objects: oc, Bucket: s.Bucket(t), MFAKey: mfaKey, Version: "test"}
}

func put(t *testing.T, p Platform, key string, b []byte) {
	t.Helper()
	if _, err := p.Objects.PutObject(context.Background(), p.Bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{ContentType: "image/png"}); err != nil {
		t.Fatal(err)
	}
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// seed gives p files with objects, an account with a quota and counts, a
// second factor, and an object written after cut that no record names.
func seed(t *testing.T, p Platform) {
	ctx := context.Background()
	for i, key := range []string{"files/2026/01/a1", "images/2026/01/b2", "files/2026/01/c3"} {
		put(t, p, key, random(1000*(i+1)))
		if _, err := p.DB.Collection("files").InsertOne(ctx, bson.D{{Key: "_id", Value: key[len(key)-2:]}, {Key: "key", Value: key}, {Key: "owner", Value: "u1"}, {Key: "size", Value: 1000 * (i + 1)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.DB.Collection("files").Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "owner", Value: 1}}, Options: options.Index().SetName("owner")}); err != nil {
		t.Fatal(err)
	}
	p.DB.Collection("file_usage").InsertOne(ctx, bson.D{{Key: "_id", Value: "u1"}, {Key: "bytes", Value: int64(99)}, {Key: "count", Value: int64(7)}, {Key: "quota", Value: int64(5000)}})
	p.DB.Collection("mfa_factors").InsertOne(ctx, bson.D{{Key: "_id", Value: "u1"}, {Key: "secret", Value: "sealed:x"}})
	p.DB.Collection("users").InsertOne(ctx, bson.D{{Key: "_id", Value: "u1"}, {Key: "email", Value: "a@b.c"}})
}

func TestTakeVerifyRestore(t *testing.T) {
	ctx := context.Background()
	src := testPlatform(t, strings.Repeat("k", 32))
	seed(t, src)
	dir := filepath.Join(t.TempDir(), "b1")
	late := time.Now().Add(time.Hour)
	m, err := Take(ctx, src, dirTarget(dir), Options{now: func() time.Time { return late.Add(-2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	// The cut was an hour before the objects were written and only the
	// records name them: the three named objects are in, nothing else.
	if got := len(m.Objects); got != 3 {
		t.Fatalf("objects %d, want 3", got)
	}
	for _, name := range []string{"mongo/" + src.DB.Name() + "/files.bson", "mongo/" + src.DB.Name() + "/files.metadata.json", "objects/" + src.Bucket + "/images/2026/01/b2", ManifestName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if rep, err := VerifyBackup(ctx, dirTarget(dir), Keys{}, 2); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", rep.Problems, err)
	}
	if _, err := Take(ctx, src, dirTarget(dir), Options{}); err == nil {
		t.Fatal("a second backup into the same place was taken")
	}

	// Another key is refused with its reason, before anything changes.
	dst := testPlatform(t, strings.Repeat("z", 32))
	if _, err := Restore(ctx, dst, dirTarget(dir), RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "AUTH_MFA_KEY") {
		t.Fatalf("restore with another key: %v", err)
	}
	dst.MFAKey = src.MFAKey
	put(t, dst, "files/2020/01/zz", []byte("x"))
	if _, err := Restore(ctx, dst, dirTarget(dir), RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore into a platform with an object: %v", err)
	}
	if _, err := Restore(ctx, dst, dirTarget(dir), RestoreOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	if rep, err := VerifyPlatform(ctx, dst, m, true, 2); err != nil || !rep.OK() {
		t.Fatalf("verify platform: %v %v", rep.Problems, err)
	}
	if _, err := dst.Objects.StatObject(ctx, dst.Bucket, "files/2020/01/zz", minio.StatObjectOptions{}); err == nil {
		t.Fatal("the replaced platform's object is still there")
	}
	var acct bson.M
	if err := dst.DB.Collection("file_usage").FindOne(ctx, bson.D{}).Decode(&acct); err != nil {
		t.Fatal(err)
	}
	if _, has := acct["bytes"]; has || acct["quota"] != int64(5000) {
		t.Fatalf("restored account %v: want the quota kept and bytes left to be counted from the records", acct)
	}
	specs, err := dst.DB.Collection("files").Indexes().ListSpecifications(ctx)
	if err != nil || len(specs) != 2 {
		t.Fatalf("restored indexes %v %v", specs, err)
	}

	// Damage: one object's bytes changed, one collection truncated.
	obj := filepath.Join(dir, "objects", src.Bucket, "files/2026/01/a1")
	b, _ := os.ReadFile(obj)
	b[10] ^= 1
	os.WriteFile(obj, b, 0o600)
	bs := filepath.Join(dir, "mongo", src.DB.Name(), "files.bson")
	b, _ = os.ReadFile(bs)
	os.WriteFile(bs, b[:len(b)-20], 0o600)
	rep, err := VerifyBackup(ctx, dirTarget(dir), Keys{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(rep.Problems, "\n")
	if !strings.Contains(all, "object files/2026/01/a1") || !strings.Contains(all, "collection files") {
		t.Fatalf("verify of a damaged backup:\n%s", all)
	}
	if _, err := Restore(ctx, dst, dirTarget(dir), RestoreOptions{Replace: true}); err == nil || !strings.Contains(err.Error(), "differs from its manifest") {
		t.Fatalf("restore of a damaged backup: %v", err)
	}
}

func TestEncryptedBackup(t *testing.T) {
	ctx := context.Background()
	src := testPlatform(t, strings.Repeat("k", 32))
	seed(t, src)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "b")
	if _, err := Take(ctx, src, dirTarget(dir), Options{Keys: Keys{Recipients: []age.Recipient{id.Recipient()}}, DevSecrets: []byte(`{"mfaKey":"secret-value"}`)}); err != nil {
		t.Fatal(err)
	}
	// Nothing is in clear: no file but *.age, and no secret readable.
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if d.IsDir() {
			return nil
		}
		if !strings.HasSuffix(path, ".age") {
			t.Errorf("%s is not encrypted", path)
		}
		if b, _ := os.ReadFile(path); bytes.Contains(b, []byte("secret-value")) || bytes.Contains(b, []byte("a@b.c")) {
			t.Errorf("%s holds data in clear", path)
		}
		return nil
	})
	if _, err := VerifyBackup(ctx, dirTarget(dir), Keys{}, 2); err == nil {
		t.Fatal("an encrypted backup was read without its identity")
	}
	rep, err := VerifyBackup(ctx, dirTarget(dir), Keys{Identities: []age.Identity{id}}, 2)
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", rep, err)
	}
	dst := testPlatform(t, src.MFAKey)
	if _, err := Restore(ctx, dst, dirTarget(dir), RestoreOptions{Keys: Keys{Identities: []age.Identity{id}}}); err != nil {
		t.Fatal(err)
	}
	if rep, err := VerifyPlatform(ctx, dst, rep.Manifest, true, 2); err != nil || !rep.OK() {
		t.Fatalf("verify platform: %v %v", rep.Problems, err)
	}
}
