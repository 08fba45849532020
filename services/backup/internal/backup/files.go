package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"strings"

	"filippo.io/age"
)

const ageSuffix = ".age"

// Keys are the age keys of a backup: recipients to encrypt one, identities
// to read an encrypted one. None: the backup is in clear.
type Keys struct {
	Recipients []age.Recipient
	Identities []age.Identity
}

// store reads and writes one backup's files on a target, encrypting and
// decrypting them and hashing both what is stored and what it holds.
type store struct {
	t       Target
	keys    Keys
	encrypt bool
}

// fileWriter is a file being written: plain bytes in, stored bytes out.
type fileWriter struct {
	name          string // as stored
	file          io.WriteCloser
	enc           io.WriteCloser // nil in clear
	stored, sum   hash.Hash
	storedN, n    int64
	storedCounter *counter
}

type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

func (s *store) storedName(name string) string {
	if s.encrypt {
		return name + ageSuffix
	}
	return name
}

func (s *store) create(ctx context.Context, name string, size int64) (*fileWriter, error) {
	fw := &fileWriter{name: s.storedName(name), stored: sha256.New(), sum: sha256.New()}
	if s.encrypt {
		size = -1
	}
	f, err := s.t.Create(ctx, fw.name, size)
	if err != nil {
		return nil, err
	}
	fw.file = f
	fw.storedCounter = &counter{w: io.MultiWriter(f, fw.stored)}
	if s.encrypt {
		if fw.enc, err = age.Encrypt(fw.storedCounter, s.keys.Recipients...); err != nil {
			f.Close()
			return nil, err
		}
	}
	return fw, nil
}

func (fw *fileWriter) Write(b []byte) (int, error) {
	var n int
	var err error
	if fw.enc != nil {
		n, err = fw.enc.Write(b)
	} else {
		n, err = fw.storedCounter.Write(b)
	}
	fw.sum.Write(b[:n])
	fw.n += int64(n)
	return n, err
}

// Close finishes the file; File is what was stored.
func (fw *fileWriter) Close() (File, error) {
	var err error
	if fw.enc != nil {
		err = fw.enc.Close()
	}
	if cerr := fw.file.Close(); err == nil {
		err = cerr
	}
	return File{Name: fw.name, Bytes: fw.storedCounter.n, SHA256: hex.EncodeToString(fw.stored.Sum(nil))}, err
}

func (fw *fileWriter) plainSum() string { return hex.EncodeToString(fw.sum.Sum(nil)) }

// fileReader reads a stored file's plain content and hashes what was stored.
type fileReader struct {
	io.Reader
	file   io.ReadCloser
	stored *hashReader
}

type hashReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashReader) Read(b []byte) (int, error) {
	n, err := h.r.Read(b)
	h.h.Write(b[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashReader) sum() string { return hex.EncodeToString(h.h.Sum(nil)) }

func (s *store) open(ctx context.Context, name string) (*fileReader, error) {
	f, err := s.t.Open(ctx, s.storedName(name))
	if err != nil {
		return nil, err
	}
	fr := &fileReader{file: f, stored: &hashReader{r: f, h: sha256.New()}}
	fr.Reader = fr.stored
	if s.encrypt {
		if len(s.keys.Identities) == 0 {
			f.Close()
			return nil, errors.New("the backup is encrypted: give its age identity (BACKUP_AGE_IDENTITY_FILE)")
		}
		d, err := age.Decrypt(fr.stored, s.keys.Identities...)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", s.storedName(name), err)
		}
		fr.Reader = d
	}
	return fr, nil
}

func (fr *fileReader) Close() error { return fr.file.Close() }

// drain reads the rest of the stored file, so its stored hash is complete
// even where the plain reader stopped early.
func (fr *fileReader) drain() { io.Copy(io.Discard, fr.stored) }

// readManifest finds the manifest, in clear or encrypted, and reads it; it
// also says whether the backup is encrypted.
func readManifest(ctx context.Context, t Target, keys Keys) (*Manifest, *store, error) {
	s := &store{t: t, keys: keys}
	if ok, err := t.Exists(ctx, ManifestName+ageSuffix); err != nil {
		return nil, nil, err
	} else if ok {
		s.encrypt = true
	} else if ok, err := t.Exists(ctx, ManifestName); err != nil {
		return nil, nil, err
	} else if !ok {
		return nil, nil, fmt.Errorf("%s holds no backup (no %s: none was taken there, or it did not finish)", t, ManifestName)
	}
	r, err := s.open(ctx, ManifestName)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 1<<30))
	if err != nil {
		return nil, nil, err
	}
	m, err := parseManifest(b)
	return m, s, err
}

// objectFile is the backup's file of an object.
func objectFile(bucket, key string) string { return "objects/" + bucket + "/" + key }

func collectionFile(db, coll, ext string) string { return "mongo/" + db + "/" + coll + ext }

// safeName refuses names that would leave the backup's folder as a path.
func safeName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || strings.ContainsRune(name, 0) {
		return fmt.Errorf("%q cannot be a file of a backup", name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%q cannot be a file of a backup", name)
		}
	}
	if path.Clean(name) != name {
		return fmt.Errorf("%q cannot be a file of a backup", name)
	}
	return nil
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// ReadManifest reads the manifest of the backup at t.
func ReadManifest(ctx context.Context, t Target, keys Keys) (*Manifest, error) {
	m, _, err := readManifest(ctx, t, keys)
	return m, err
}

// ReadDevSecrets returns `make run`'s secrets kept in the backup at t.
func ReadDevSecrets(ctx context.Context, t Target, keys Keys) ([]byte, error) {
	m, s, err := readManifest(ctx, t, keys)
	if err != nil {
		return nil, err
	}
	if !m.DevSecrets {
		return nil, fmt.Errorf("%s holds no %s (it was not taken by `make backup`)", t, DevSecretsName)
	}
	r, err := s.open(ctx, DevSecretsName)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, 1<<20))
}
