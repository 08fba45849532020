package backup

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Platform is the data a backup is taken from or restored into.
type Platform struct {
	DB      *mongo.Database
	Objects *minio.Client
	Bucket  string
	// MFAKey is auth's AUTH_MFA_KEY ("" when the platform has none).
	MFAKey  string
	Version string
}

// Options of Take.
type Options struct {
	Keys Keys
	// Workers copy objects at once (default 4).
	Workers int
	// DevSecrets, when set, are stored as devstack/dev-secrets.json
	// (`make backup`).
	DevSecrets []byte
	// Progress receives a line per step (nil: none).
	Progress func(format string, args ...any)
	// now is the clock (tests).
	now func() time.Time
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	if o.now == nil {
		o.now = time.Now
	}
}

// The collections the files service keys objects by, and its accounts.
const (
	filesCollection = "files"
	usageCollection = "file_usage"
	mfaCollection   = "mfa_factors"
	// DevSecretsName is `make run`'s secrets in a backup of it.
	DevSecretsName = "devstack/dev-secrets.json"
)

// dumpOrder puts a chain's head hints and write log before its chunks
// (log-store.md): a hint read first names a chunk that is then read too.
func dumpOrder(names []string) []string {
	rank := map[string]int{"log_heads": -2, "log_ids": -1}
	slices.SortStableFunc(names, func(a, b string) int {
		if d := rank[a] - rank[b]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return names
}

// Take writes a backup of p to t, which must not hold one: the records of
// every collection first, then every object they name and every object
// older than the cut, then the manifest. It runs while the platform serves
// writes.
func Take(ctx context.Context, p Platform, t Target, o Options) (*Manifest, error) {
	o.defaults()
	if hasManifest(ctx, t) {
		return nil, fmt.Errorf("%s already holds a backup", t)
	}
	s := &store{t: t, keys: o.Keys, encrypt: len(o.Keys.Recipients) > 0}
	m := &Manifest{Format: Format, PlatformVersion: p.Version, Database: p.DB.Name(), Bucket: p.Bucket,
		Encrypted: s.encrypt, MFAKeyCheck: MFAKeyCheck(p.MFAKey), Cut: o.now().UTC()}

	specs, err := p.DB.ListCollectionSpecifications(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("listing the collections: %w", err)
	}
	byName := map[string]mongo.CollectionSpecification{}
	var names []string
	for _, sp := range specs {
		if strings.HasPrefix(sp.Name, "system.") || sp.Type == "view" {
			continue
		}
		byName[sp.Name] = sp
		names = append(names, sp.Name)
	}
	keys := map[string]bool{} // objects named by the records
	for _, name := range dumpOrder(names) {
		c, files, err := dumpCollection(ctx, s, p.DB, byName[name], keys)
		if err != nil {
			return nil, fmt.Errorf("collection %s: %w", name, err)
		}
		m.Collections = append(m.Collections, c)
		m.Files = append(m.Files, files...)
		o.Progress("collection %s: %d documents", name, c.Documents)
	}
	m.CutEnd = o.now().UTC()

	objs, files, missing, err := copyObjects(ctx, s, p, m.Cut, keys, o)
	if err != nil {
		return nil, err
	}
	m.Objects, m.Files = objs, append(m.Files, files...)
	o.Progress("objects: %d", len(objs))
	if len(missing) > 0 {
		// Records whose object was removed after they were read: the
		// file was deleted while the backup ran. They are left out, so
		// every record of the backup has its object.
		if err := dropRecords(ctx, s, m, missing); err != nil {
			return nil, err
		}
	}
	if o.DevSecrets != nil {
		fw, err := s.create(ctx, DevSecretsName, int64(len(o.DevSecrets)))
		if err != nil {
			return nil, err
		}
		fw.Write(o.DevSecrets)
		f, err := fw.Close()
		if err != nil {
			return nil, err
		}
		m.Files, m.DevSecrets = append(m.Files, f), true
	}
	m.Finished = o.now().UTC()
	return m, writeManifest(ctx, s, m)
}

func writeManifest(ctx context.Context, s *store, m *Manifest) error {
	b, err := jsonIndent(m)
	if err != nil {
		return err
	}
	fw, err := s.create(ctx, ManifestName, int64(len(b)))
	if err != nil {
		return err
	}
	if _, err := fw.Write(b); err != nil {
		fw.Close()
		return err
	}
	_, err = fw.Close()
	return err
}

// metadata is mongodump's <collection>.metadata.json.
type metadata struct {
	Options        bson.Raw   `bson:"options"`
	Indexes        []bson.Raw `bson:"indexes"`
	UUID           string     `bson:"uuid"`
	CollectionName string     `bson:"collectionName"`
	Type           string     `bson:"type"`
}

func dumpCollection(ctx context.Context, s *store, db *mongo.Database, sp mongo.CollectionSpecification, keys map[string]bool) (Collection, []File, error) {
	coll := db.Collection(sp.Name)
	c := Collection{Name: sp.Name}
	// Metadata first: mongorestore creates the collection with its options
	// and indexes from it.
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		return c, nil, err
	}
	md := metadata{Options: sp.Options, CollectionName: sp.Name, Type: "collection"}
	if md.Options == nil {
		md.Options, _ = bson.Marshal(bson.D{})
	}
	for cur.Next(ctx) {
		md.Indexes = append(md.Indexes, slices.Clone(cur.Current))
	}
	if err := cur.Err(); err != nil {
		return c, nil, err
	}
	cur.Close(ctx)
	mdJSON, err := bson.MarshalExtJSON(md, true, false)
	if err != nil {
		return c, nil, err
	}
	fw, err := s.create(ctx, collectionFile(db.Name(), sp.Name, ".metadata.json"), int64(len(mdJSON)))
	if err != nil {
		return c, nil, err
	}
	fw.Write(mdJSON)
	mdFile, err := fw.Close()
	if err != nil {
		return c, nil, err
	}

	fw, err = s.create(ctx, collectionFile(db.Name(), sp.Name, ".bson"), -1)
	if err != nil {
		return c, nil, err
	}
	bw := bufio.NewWriterSize(fw, 1<<20)
	docs, err := coll.Find(ctx, bson.D{})
	if err != nil {
		fw.Close()
		return c, nil, err
	}
	defer docs.Close(ctx)
	for docs.Next(ctx) {
		doc := docs.Current
		switch sp.Name {
		case filesCollection:
			if k, ok := doc.Lookup("key").StringValueOK(); ok {
				keys[k] = true
			}
		case usageCollection:
			if doc, err = forgetUsage(doc); err != nil {
				fw.Close()
				return c, nil, err
			}
		}
		if _, err := bw.Write(doc); err != nil {
			fw.Close()
			return c, nil, err
		}
		c.Documents++
	}
	if err := docs.Err(); err != nil {
		fw.Close()
		return c, nil, err
	}
	if err := bw.Flush(); err != nil {
		fw.Close()
		return c, nil, err
	}
	c.Bytes, c.SHA256 = fw.n, fw.plainSum()
	bsonFile, err := fw.Close()
	return c, []File{mdFile, bsonFile}, err
}

// forgetUsage drops an account's bytes and count, keeping its quota: the
// files service makes them again from the records at the first use
// (services/files mongostore, usage.go), so the restored usage is the sum
// of the restored records, not the count of another moment with uploads in
// flight.
func forgetUsage(doc bson.Raw) (bson.Raw, error) {
	var d bson.D
	if err := bson.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	d = slices.DeleteFunc(d, func(e bson.E) bool { return e.Key == "bytes" || e.Key == "count" })
	return bson.Marshal(d)
}

type objectJob struct {
	info minio.ObjectInfo
	i    int
}

// copyObjects copies the objects the records name and every other object
// last modified before the cut; the rest were written after the cut. It
// returns the keys named by records that are not in the bucket.
func copyObjects(ctx context.Context, s *store, p Platform, cut time.Time, keys map[string]bool, o Options) ([]Object, []File, []string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var list []minio.ObjectInfo
	for info := range p.Objects.ListObjectsIter(ctx, p.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if info.Err != nil {
			return nil, nil, nil, fmt.Errorf("listing bucket %s: %w", p.Bucket, info.Err)
		}
		named := keys[info.Key]
		if !named && info.LastModified.After(cut) {
			continue // written after the cut, and no record of the backup names it
		}
		if err := safeName(info.Key); err != nil {
			return nil, nil, nil, fmt.Errorf("object %w", err)
		}
		list = append(list, info)
	}
	found := map[string]bool{}
	for _, info := range list {
		found[info.Key] = true
	}
	var missing []string
	for k := range keys {
		if !found[k] {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)

	objs := make([]Object, len(list))
	files := make([]File, len(list))
	gone := make([]bool, len(list))
	jobs := make(chan objectJob)
	errs := make(chan error, o.Workers)
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() {
			for j := range jobs {
				obj, f, err := copyObject(ctx, s, p, j.info)
				if errors.Is(err, errObjectGone) {
					gone[j.i] = true // removed since the listing (a record naming it goes too)
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("object %s: %w", j.info.Key, err)
					cancel()
					return
				}
				objs[j.i], files[j.i] = obj, f
			}
		})
	}
	func() {
		defer close(jobs)
		for i, info := range list {
			select {
			case jobs <- objectJob{info: info, i: i}:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	var outObjs []Object
	var outFiles []File
	for i := range list {
		if gone[i] {
			if keys[list[i].Key] {
				missing = append(missing, list[i].Key)
			}
			continue
		}
		outObjs, outFiles = append(outObjs, objs[i]), append(outFiles, files[i])
	}
	return outObjs, outFiles, missing, nil
}

var errObjectGone = errors.New("object removed")

func copyObject(ctx context.Context, s *store, p Platform, info minio.ObjectInfo) (Object, File, error) {
	r, err := p.Objects.GetObject(ctx, p.Bucket, info.Key, minio.GetObjectOptions{})
	if err != nil {
		return Object{}, File{}, err
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return Object{}, File{}, errObjectGone
		}
		return Object{}, File{}, err
	}
	fw, err := s.create(ctx, objectFile(p.Bucket, info.Key), st.Size)
	if err != nil {
		return Object{}, File{}, err
	}
	n, err := io.Copy(fw, r)
	if err == nil && n != st.Size {
		err = fmt.Errorf("read %d bytes of %d", n, st.Size)
	}
	if err != nil {
		fw.Close()
		return Object{}, File{}, err
	}
	f, err := fw.Close()
	return Object{Key: info.Key, Size: n, SHA256: fw.plainSum(), ContentType: st.ContentType}, f, err
}

// dropRecords writes the files collection again without the records of
// the keys gone.
func dropRecords(ctx context.Context, s *store, m *Manifest, gone []string) error {
	drop := map[string]bool{}
	for _, k := range gone {
		drop[k] = true
	}
	name := collectionFile(m.Database, filesCollection, ".bson")
	r, err := s.open(ctx, name)
	if err != nil {
		return err
	}
	var kept [][]byte
	var ids []string
	err = eachDocument(r, func(doc bson.Raw) error {
		if k, _ := doc.Lookup("key").StringValueOK(); drop[k] {
			id, _ := doc.Lookup("_id").StringValueOK()
			ids = append(ids, id)
			return nil
		}
		kept = append(kept, slices.Clone(doc))
		return nil
	})
	r.Close()
	if err != nil {
		return err
	}
	fw, err := s.create(ctx, name, -1)
	if err != nil {
		return err
	}
	for _, d := range kept {
		fw.Write(d)
	}
	f, err := fw.Close()
	if err != nil {
		return err
	}
	for i := range m.Collections {
		if m.Collections[i].Name == filesCollection {
			m.Collections[i].Documents, m.Collections[i].Bytes, m.Collections[i].SHA256 = int64(len(kept)), fw.n, fw.plainSum()
		}
	}
	for i := range m.Files {
		if m.Files[i].Name == f.Name {
			m.Files[i] = f
		}
	}
	m.Dropped = ids
	return nil
}

// eachDocument calls fn with each document of a .bson stream (the buffer
// is reused: clone to keep).
func eachDocument(r io.Reader, fn func(bson.Raw) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var buf []byte
	for {
		var head [4]byte
		if _, err := io.ReadFull(br, head[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("truncated document: %w", err)
		}
		n := int(binary.LittleEndian.Uint32(head[:]))
		if n < 5 || n > 48<<20 {
			return fmt.Errorf("document length %d is not a BSON document's", n)
		}
		buf = append(buf[:0], head[:]...)
		buf = slices.Grow(buf, n-4)[:n]
		if _, err := io.ReadFull(br, buf[4:]); err != nil {
			return fmt.Errorf("truncated document: %w", err)
		}
		if err := bson.Raw(buf).Validate(); err != nil {
			return fmt.Errorf("damaged document: %w", err)
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
}
