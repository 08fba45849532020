package backup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// RestoreOptions of Restore.
type RestoreOptions struct {
	Keys Keys
	// Replace lets a restore remove what a platform holds that is more
	// than its first start made.
	Replace  bool
	Workers  int
	Progress func(format string, args ...any)
}

// ErrNotEmpty is a restore refused because the platform holds data.
var ErrNotEmpty = errors.New("refused: the platform is not empty")

// Contents lists what makes a platform more than what its first start
// made (the first administrator, the log apps, and the records of that
// start): file records, objects, other users, API keys and passkeys.
func Contents(ctx context.Context, p Platform) ([]string, error) {
	var held []string
	for _, c := range []struct {
		coll string
		max  int64
		what string
	}{{"users", 1, "users"}, {filesCollection, 0, "file records"}, {"api_keys", 0, "API keys"}, {"passkeys", 0, "passkeys"}} {
		n, err := p.DB.Collection(c.coll).CountDocuments(ctx, bson.D{})
		if err != nil {
			return nil, fmt.Errorf("counting %s: %w", c.coll, err)
		}
		if n > c.max {
			held = append(held, fmt.Sprintf("%d %s", n, c.what))
		}
	}
	for o := range p.Objects.ListObjectsIter(ctx, p.Bucket, minio.ListObjectsOptions{Recursive: true, MaxKeys: 1}) {
		if o.Err != nil {
			return nil, fmt.Errorf("listing bucket %s: %w", p.Bucket, o.Err)
		}
		held = append(held, "objects in bucket "+p.Bucket)
		break
	}
	return held, nil
}

// Restore puts the backup at t into p, which must hold nothing but what
// its first start made (or Replace is set); that is removed first. The
// backup is verified before anything changes, and refused if any count
// or hash differs from its manifest, or if its TOTP secrets were sealed
// with another AUTH_MFA_KEY than p's.
func Restore(ctx context.Context, p Platform, t Target, o RestoreOptions) (*Manifest, error) {
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	m, s, err := readManifest(ctx, t, o.Keys)
	if err != nil {
		return nil, err
	}
	if err := checkMFAKey(m, p.MFAKey); err != nil {
		return m, err
	}
	o.Progress("verifying the backup...")
	rep, err := VerifyBackup(ctx, t, o.Keys, o.Workers)
	if err != nil {
		return m, err
	}
	if !rep.OK() {
		return m, fmt.Errorf("refused: the backup differs from its manifest:\n  %s", strings.Join(rep.Problems, "\n  "))
	}
	held, err := Contents(ctx, p)
	if err != nil {
		return m, err
	}
	if len(held) > 0 && !o.Replace {
		return m, fmt.Errorf("%w: it holds %s (restore replaces a platform's data only when told to: --replace)", ErrNotEmpty, strings.Join(held, ", "))
	}
	o.Progress("removing what the platform held...")
	if err := clear(ctx, p); err != nil {
		return m, err
	}
	for _, c := range m.Collections {
		if err := restoreCollection(ctx, s, p, m, c); err != nil {
			return m, fmt.Errorf("collection %s: %w", c.Name, err)
		}
		o.Progress("collection %s: %d documents", c.Name, c.Documents)
	}
	var failed []string
	var mu = make(chan struct{}, 1)
	err = forEach(ctx, m.Objects, o.Workers, func(obj Object) {
		if err := restoreObject(ctx, s, p, m, obj); err != nil {
			mu <- struct{}{}
			failed = append(failed, fmt.Sprintf("object %s: %v", obj.Key, err))
			<-mu
		}
	})
	if err != nil {
		return m, err
	}
	if len(failed) > 0 {
		slices.Sort(failed)
		return m, fmt.Errorf("restoring objects:\n  %s", strings.Join(failed, "\n  "))
	}
	o.Progress("objects: %d", len(m.Objects))
	after, err := VerifyPlatform(ctx, p, m, false, o.Workers)
	if err != nil {
		return m, err
	}
	if !after.OK() {
		return m, fmt.Errorf("the restored platform differs from the manifest:\n  %s", strings.Join(after.Problems, "\n  "))
	}
	return m, nil
}

func checkMFAKey(m *Manifest, key string) error {
	sealed := false // the backup holds second factors
	for _, c := range m.Collections {
		if c.Name == mfaCollection && c.Documents > 0 {
			sealed = true
		}
	}
	if !sealed && m.MFAKeyCheck == "" {
		return nil
	}
	mine := MFAKeyCheck(key)
	if m.MFAKeyCheck != mine && (sealed || mine != "") {
		return ErrMFAKey{Backup: m.MFAKeyCheck != "", Platform: key != ""}
	}
	return nil
}

// clear drops the platform's collections and removes its objects.
func clear(ctx context.Context, p Platform) error {
	names, err := p.DB.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return err
	}
	for _, n := range names {
		if strings.HasPrefix(n, "system.") {
			continue
		}
		if err := p.DB.Collection(n).Drop(ctx); err != nil {
			return fmt.Errorf("dropping %s: %w", n, err)
		}
	}
	objs := p.Objects.ListObjectsIter(ctx, p.Bucket, minio.ListObjectsOptions{Recursive: true})
	results, err := p.Objects.RemoveObjectsWithIter(ctx, p.Bucket, objs, minio.RemoveObjectsOptions{})
	if err != nil {
		return err
	}
	for r := range results {
		if r.Err != nil {
			return fmt.Errorf("removing %s: %w", r.ObjectName, r.Err)
		}
	}
	return nil
}

func restoreCollection(ctx context.Context, s *store, p Platform, m *Manifest, c Collection) error {
	r, err := s.open(ctx, collectionFile(m.Database, c.Name, ".metadata.json"))
	if err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(r, 16<<20))
	r.Close()
	if err != nil {
		return err
	}
	var md metadata
	if err := bson.UnmarshalExtJSON(b, true, &md); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	create := bson.D{{Key: "create", Value: c.Name}}
	if md.Options != nil {
		elems, _ := md.Options.Elements()
		for _, e := range elems {
			create = append(create, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	if err := p.DB.RunCommand(ctx, create).Err(); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	var indexes bson.A
	for _, ix := range md.Indexes {
		if name, _ := ix.Lookup("name").StringValueOK(); name == "_id_" {
			continue
		}
		var d bson.D
		if err := bson.Unmarshal(ix, &d); err != nil {
			return err
		}
		indexes = append(indexes, slices.DeleteFunc(d, func(e bson.E) bool { return e.Key == "v" || e.Key == "ns" }))
	}
	// One index per command, as pkg/mongox.EnsureIndexes does (FerretDB
	// 1.24 drops the connection on some commands with several).
	for _, ix := range indexes {
		if err := p.DB.RunCommand(ctx, bson.D{{Key: "createIndexes", Value: c.Name}, {Key: "indexes", Value: bson.A{ix}}}).Err(); err != nil {
			return fmt.Errorf("createIndexes: %w", err)
		}
	}

	r, err = s.open(ctx, collectionFile(m.Database, c.Name, ".bson"))
	if err != nil {
		return err
	}
	defer r.Close()
	coll := p.DB.Collection(c.Name)
	var batch []any
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := coll.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false))
		batch, size = batch[:0], 0
		return err
	}
	err = eachDocument(r, func(doc bson.Raw) error {
		batch = append(batch, slices.Clone(doc))
		size += len(doc)
		if len(batch) >= 1000 || size >= 8<<20 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

func restoreObject(ctx context.Context, s *store, p Platform, m *Manifest, o Object) error {
	r, err := s.open(ctx, objectFile(m.Bucket, o.Key))
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = p.Objects.PutObject(ctx, p.Bucket, o.Key, r, o.Size, minio.PutObjectOptions{ContentType: cmp.Or(o.ContentType, "application/octet-stream")})
	return err
}
