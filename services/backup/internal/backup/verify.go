package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/minio/minio-go/v7"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Report is what a verification found: nothing in Problems means every
// count and hash agrees with the manifest.
type Report struct {
	Manifest *Manifest
	Problems []string
	checked  sync.Mutex
}

func (r *Report) add(format string, args ...any) {
	r.checked.Lock()
	defer r.checked.Unlock()
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// OK tells whether nothing differs.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// VerifyBackup reads every file of the backup at t and compares what it
// holds with the manifest: each file's stored bytes and SHA-256, each
// collection's documents, each object's size and SHA-256.
func VerifyBackup(ctx context.Context, t Target, keys Keys, workers int) (*Report, error) {
	m, s, err := readManifest(ctx, t, keys)
	if err != nil {
		return nil, err
	}
	rep := &Report{Manifest: m}
	stored := map[string]File{}
	for _, f := range m.Files {
		stored[f.Name] = f
	}
	// checkStored compares what was read of a stored file with the
	// manifest's entry for it.
	checkStored := func(name string, fr *fileReader) {
		fr.drain()
		f, ok := stored[s.storedName(name)]
		switch {
		case !ok:
			rep.add("%s: not listed in the manifest", s.storedName(name))
		case fr.stored.n != f.Bytes || fr.stored.sum() != f.SHA256:
			rep.add("%s: %d bytes with SHA-256 %.12s…, the manifest says %d bytes with %.12s…", f.Name, fr.stored.n, fr.stored.sum(), f.Bytes, f.SHA256)
		}
	}
	for _, c := range m.Collections {
		if err := safeName(c.Name); err != nil {
			rep.add("collection %v", err)
			continue
		}
		for _, ext := range []string{".metadata.json", ".bson"} {
			name := collectionFile(m.Database, c.Name, ext)
			fr, err := s.open(ctx, name)
			if err != nil {
				rep.add("%s: %v", name, err)
				continue
			}
			if ext == ".bson" {
				h := sha256.New()
				var n int64
				err := eachDocument(io.TeeReader(fr, h), func(bson.Raw) error { n++; return nil })
				if err != nil {
					rep.add("collection %s: %s after %d documents: %v", c.Name, name, n, err)
				}
				if n != c.Documents {
					rep.add("collection %s: %d documents, the manifest says %d", c.Name, n, c.Documents)
				} else if sum := hex.EncodeToString(h.Sum(nil)); err == nil && sum != c.SHA256 {
					rep.add("collection %s: its documents' SHA-256 differs from the manifest's", c.Name)
				}
			}
			checkStored(name, fr)
			fr.Close()
		}
	}
	err = forEach(ctx, m.Objects, workers, func(o Object) {
		if err := safeName(o.Key); err != nil {
			rep.add("object %v", err)
			return
		}
		name := objectFile(m.Bucket, o.Key)
		fr, err := s.open(ctx, name)
		if err != nil {
			rep.add("object %s: %v", o.Key, err)
			return
		}
		defer fr.Close()
		h := sha256.New()
		n, err := io.Copy(h, fr)
		switch {
		case err != nil:
			rep.add("object %s: %v", o.Key, err)
		case n != o.Size || hex.EncodeToString(h.Sum(nil)) != o.SHA256:
			rep.add("object %s: %d bytes with SHA-256 %.12s…, the manifest says %d bytes with %.12s…", o.Key, n, hex.EncodeToString(h.Sum(nil)), o.Size, o.SHA256)
		}
		checkStored(name, fr)
	})
	if err != nil {
		return nil, err
	}
	if m.DevSecrets {
		if fr, err := s.open(ctx, DevSecretsName); err != nil {
			rep.add("%s: %v", DevSecretsName, err)
		} else {
			checkStored(DevSecretsName, fr)
			fr.Close()
		}
	}
	slices.Sort(rep.Problems)
	return rep, nil
}

// VerifyPlatform compares a platform with the manifest of the backup
// restored into it: each collection's documents and each object's size
// and, with hashes, its SHA-256 (the objects are read again). It is meant
// right after a restore: a platform in use changes its counts.
func VerifyPlatform(ctx context.Context, p Platform, m *Manifest, hashes bool, workers int) (*Report, error) {
	rep := &Report{Manifest: m}
	for _, c := range m.Collections {
		n, err := p.DB.Collection(c.Name).CountDocuments(ctx, bson.D{})
		if err != nil {
			return nil, fmt.Errorf("counting %s: %w", c.Name, err)
		}
		if n != c.Documents {
			rep.add("collection %s: %d documents, the manifest says %d", c.Name, n, c.Documents)
		}
	}
	err := forEach(ctx, m.Objects, workers, func(o Object) {
		if !hashes {
			st, err := p.Objects.StatObject(ctx, p.Bucket, o.Key, minio.StatObjectOptions{})
			if err != nil {
				rep.add("object %s: %v", o.Key, err)
			} else if st.Size != o.Size {
				rep.add("object %s: %d bytes, the manifest says %d", o.Key, st.Size, o.Size)
			}
			return
		}
		r, err := p.Objects.GetObject(ctx, p.Bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			rep.add("object %s: %v", o.Key, err)
			return
		}
		defer r.Close()
		h := sha256.New()
		n, err := io.Copy(h, r)
		switch {
		case err != nil:
			rep.add("object %s: %v", o.Key, err)
		case n != o.Size || hex.EncodeToString(h.Sum(nil)) != o.SHA256:
			rep.add("object %s: %d bytes with SHA-256 %.12s…, the manifest says %d bytes with %.12s…", o.Key, n, hex.EncodeToString(h.Sum(nil)), o.Size, o.SHA256)
		}
	})
	slices.Sort(rep.Problems)
	return rep, err
}

// forEach runs fn on every item with workers at once.
func forEach[T any](ctx context.Context, items []T, workers int, fn func(T)) error {
	if workers <= 0 {
		workers = 4
	}
	jobs := make(chan T)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for it := range jobs {
				fn(it)
			}
		})
	}
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		jobs <- it
	}
	close(jobs)
	wg.Wait()
	return ctx.Err()
}
