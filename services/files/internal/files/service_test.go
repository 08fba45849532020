package files_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/files"
)

// store is a files.Store of function fields; a nil field answers as an
// empty store would. The share-link methods come from the embedded
// LinkStore, nil here: these tests do not reach them.
type store struct {
	files.LinkStore

	InsertFn      func(ctx context.Context, f *files.File) error
	GetFn         func(ctx context.Context, id string) (*files.File, error)
	ListByOwnerFn func(ctx context.Context, owner string, skip, limit int) ([]*files.File, error)
	ExistingFn    func(ctx context.Context, ids []string) (map[string]bool, error)
	DeleteFn      func(ctx context.Context, id string) error
	// AccountFn answers Account, and Reserve when ReserveFn is nil (as
	// the real store would against that account).
	AccountFn  func(ctx context.Context, owner string) (files.Account, error)
	ReserveFn  func(ctx context.Context, owner string, n int64, expect files.Account, max int64) (files.Account, bool, error)
	SetQuotaFn func(ctx context.Context, owner string, quota *int64) error
	released   []int64 // Release's bytes, in order
}

func (s *store) TakeVariant(context.Context, string, int64) (bool, error) { return true, nil }
func (s *store) GiveBackVariant(context.Context, string) error            { return nil }

func (s *store) Insert(ctx context.Context, f *files.File) error {
	if s.InsertFn == nil {
		return nil
	}
	return s.InsertFn(ctx, f)
}

func (s *store) Get(ctx context.Context, id string) (*files.File, error) {
	if s.GetFn == nil {
		return nil, files.ErrNotFound
	}
	return s.GetFn(ctx, id)
}

func (s *store) ListByOwner(ctx context.Context, owner string, skip, limit int) ([]*files.File, error) {
	if s.ListByOwnerFn == nil {
		return nil, nil
	}
	return s.ListByOwnerFn(ctx, owner, skip, limit)
}

func (s *store) Existing(ctx context.Context, ids []string) (map[string]bool, error) {
	if s.ExistingFn == nil {
		return map[string]bool{}, nil
	}
	return s.ExistingFn(ctx, ids)
}

func (s *store) Delete(ctx context.Context, id string) error {
	if s.DeleteFn == nil {
		return files.ErrNotFound
	}
	return s.DeleteFn(ctx, id)
}

func (s *store) ForgetUsage(context.Context, string) error { return nil } // AccountFn answers each time

func (s *store) Account(ctx context.Context, owner string) (files.Account, error) {
	if s.AccountFn == nil {
		return files.Account{}, nil
	}
	return s.AccountFn(ctx, owner)
}

func (s *store) Reserve(ctx context.Context, owner string, n int64, expect files.Account, max int64) (files.Account, bool, error) {
	if s.ReserveFn != nil {
		return s.ReserveFn(ctx, owner, n, expect, max)
	}
	a, err := s.Account(ctx, owner)
	if err != nil {
		return a, false, err
	}
	same := a.OwnQuota == expect.OwnQuota && (!a.OwnQuota || a.Quota == expect.Quota)
	if !same || max >= 0 && a.Bytes > max-n {
		return a, false, nil
	}
	a.Bytes += n
	a.Count++
	return a, true, nil
}

func (s *store) Release(_ context.Context, _ string, n int64) error {
	s.released = append(s.released, n)
	return nil
}

func (s *store) SetQuota(ctx context.Context, owner string, quota *int64) error {
	if s.SetQuotaFn == nil {
		return nil
	}
	return s.SetQuotaFn(ctx, owner, quota)
}

// objects is an in-memory files.ObjectStore; PutFn, when set, replaces
// Put. Put reads its reader to the end and keeps nothing if that fails, as
// the real store does.
type objects struct {
	mu      sync.Mutex
	data    map[string][]byte
	types   map[string]string
	listed  []files.ObjectInfo
	removed []string
	PutFn   func(ctx context.Context, key string, r io.Reader, size int64, contentType string) (files.PutResult, error)
}

func newObjects() *objects {
	return &objects{data: map[string][]byte{}, types: map[string]string{}}
}

func (o *objects) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (files.PutResult, error) {
	if o.PutFn != nil {
		return o.PutFn(ctx, key, r, size, contentType)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return files.PutResult{}, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.data[key], o.types[key] = b, contentType
	return files.PutResult{Size: int64(len(b))}, nil
}

func (o *objects) Get(_ context.Context, key string, start, end int64) (*files.Object, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.data[key]
	if !ok {
		return nil, files.ErrNotFound
	}
	if end >= 0 {
		b = b[start : end+1]
	}
	return &files.Object{Body: io.NopCloser(bytes.NewReader(b)), Size: int64(len(b))}, nil
}

func (o *objects) Remove(_ context.Context, key string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.data, key)
	o.removed = append(o.removed, key)
	return nil
}

func (o *objects) List(_ context.Context, prefix string) iter.Seq2[files.ObjectInfo, error] {
	return func(yield func(files.ObjectInfo, error) bool) {
		for _, info := range o.listed {
			if strings.HasPrefix(info.Key, prefix) && !yield(info, nil) {
				return
			}
		}
	}
}

func (o *objects) PutNew(_ context.Context, key string, data []byte, contentType, _ string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.data[key]; ok {
		return files.ErrConflict
	}
	o.data[key], o.types[key] = bytes.Clone(data), contentType
	return nil
}

func (o *objects) Stat(_ context.Context, key string) (files.ObjectStat, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.data[key]
	if !ok {
		return files.ObjectStat{}, files.ErrNotFound
	}
	return files.ObjectStat{Size: int64(len(b))}, nil
}

func (o *objects) keys() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ks []string
	for k := range o.data {
		ks = append(ks, k)
	}
	return ks
}

var ctx = context.Background()

func newService(cfg files.Config) (*files.Service, *store, *objects) {
	st, obj := &store{}, newObjects()
	return files.NewService(st, obj, nil, cfg), st, obj
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Text is sniffed, hashed and counted as uploaded, and stored gzip-encoded;
// binary content is stored as it is.
func TestStoreFileHashesSniffsAndCompresses(t *testing.T) {
	svc, st, obj := newService(files.Config{MaxUpload: 1 << 20})
	text := []byte(strings.Repeat("a line of text\n", 500))
	p, err := svc.StoreFile(ctx, "u1", bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if p.File.Size != int64(len(text)) || p.File.SHA256 != sha(text) || !strings.HasPrefix(p.File.Type, "text/plain") || p.File.Encoding != files.EncodingGzip {
		t.Fatalf("pending %+v", p.File)
	}
	zr, err := gzip.NewReader(bytes.NewReader(obj.data[p.File.Key]))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(zr); err != nil || !bytes.Equal(got, text) {
		t.Fatalf("stored object does not gunzip to the upload: %v", err)
	}
	if p.File.Stored != int64(len(obj.data[p.File.Key])) || p.File.Stored >= p.File.Size {
		t.Fatalf("stored %d bytes of %d, object %d", p.File.Stored, p.File.Size, len(obj.data[p.File.Key]))
	}
	var inserted *files.File
	st.InsertFn = func(_ context.Context, f *files.File) error {
		inserted = f
		return nil
	}
	f, err := p.Commit(ctx, "u1", "../notes.txt", nil)
	if err != nil || inserted == nil || f.Owner != "u1" || f.Name != "notes.txt" || inserted.Key != p.File.Key {
		t.Fatalf("commit: %+v %v, inserted %+v", f, err, inserted)
	}

	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0}, 100)...)
	p, err = svc.StoreFile(ctx, "u1", bytes.NewReader(png))
	if err != nil {
		t.Fatal(err)
	}
	if p.File.Type != "image/png" || p.File.Encoding != "" || !bytes.Equal(obj.data[p.File.Key], png) {
		t.Fatalf("binary upload %+v", p.File)
	}
}

func TestStoreFileRefusals(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		svc, _, obj := newService(files.Config{MaxUpload: 100})
		if _, err := svc.StoreFile(ctx, "u1", strings.NewReader("")); !errors.Is(err, files.ErrEmpty) {
			t.Fatalf("empty upload: %v", err)
		}
		if len(obj.keys()) != 0 {
			t.Fatalf("objects left: %v", obj.keys())
		}
	})
	t.Run("tooLarge", func(t *testing.T) {
		svc, _, obj := newService(files.Config{MaxUpload: 1000})
		if _, err := svc.StoreFile(ctx, "u1", bytes.NewReader(make([]byte, 1001))); !errors.Is(err, files.ErrTooLarge) {
			t.Fatalf("1001 bytes with a 1000-byte limit: %v", err)
		}
		if len(obj.keys()) != 0 {
			t.Fatalf("objects left: %v", obj.keys())
		}
		if _, err := svc.StoreFile(ctx, "u1", bytes.NewReader(make([]byte, 1000))); err != nil {
			t.Fatalf("exactly the limit: %v", err)
		}
	})
	t.Run("overQuota", func(t *testing.T) {
		svc, st, _ := newService(files.Config{MaxUpload: 1 << 20, DefaultQuota: 1000})
		st.AccountFn = func(context.Context, string) (files.Account, error) { return files.Account{Bytes: 900, Count: 3}, nil }
		if _, err := svc.StoreFile(ctx, "u1", bytes.NewReader(make([]byte, 101))); !errors.Is(err, files.ErrQuotaExceeded) {
			t.Fatalf("101 bytes with 100 left: %v", err)
		}
		if err := svc.CheckSpace(ctx, "u1", 100); err != nil {
			t.Fatalf("CheckSpace(100) with 100 left: %v", err)
		}
		// A user's own quota replaces the default.
		st.AccountFn = func(context.Context, string) (files.Account, error) {
			return files.Account{Bytes: 900, Count: 3, Quota: 10_000, OwnQuota: true}, nil
		}
		if _, err := svc.StoreFile(ctx, "u1", bytes.NewReader(make([]byte, 101))); err != nil {
			t.Fatalf("with an own quota of 10000: %v", err)
		}
	})
	t.Run("clientGone", func(t *testing.T) {
		svc, _, obj := newService(files.Config{MaxUpload: 1 << 20})
		broken := io.MultiReader(bytes.NewReader(make([]byte, 600)), iotestErr{errors.New("connection reset")})
		_, err := svc.StoreFile(ctx, "u1", broken)
		var se *files.SourceError
		if !errors.As(err, &se) {
			t.Fatalf("broken upload: %v, want a SourceError", err)
		}
		if len(obj.keys()) != 0 {
			t.Fatalf("objects left: %v", obj.keys())
		}
	})
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

// A record that cannot be written takes its object with it, unless the
// record is there after all (the write reached the store).
func TestCommitFailure(t *testing.T) {
	svc, st, obj := newService(files.Config{MaxUpload: 1 << 20})
	outage := errors.New("write timed out")
	st.InsertFn = func(context.Context, *files.File) error { return outage }

	p, err := svc.StoreFile(ctx, "u1", strings.NewReader("some content"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(ctx, "u1", "a.txt", nil); !errors.Is(err, outage) {
		t.Fatalf("commit: %v, want the store's error", err)
	}
	if !slices.Contains(obj.removed, p.File.Key) {
		t.Fatalf("object %s kept without a record", p.File.Key)
	}
	if !slices.Equal(st.released, []int64{p.File.Size}) {
		t.Fatalf("released %v, want the reservation of %d bytes given back", st.released, p.File.Size)
	}
	st.released = nil

	p, err = svc.StoreFile(ctx, "u1", strings.NewReader("other content"))
	if err != nil {
		t.Fatal(err)
	}
	st.GetFn = func(_ context.Context, id string) (*files.File, error) {
		f := p.File
		return &f, nil
	}
	f, err := p.Commit(ctx, "u1", "b.txt", nil)
	if err != nil || f.ID != p.File.ID || slices.Contains(obj.removed, p.File.Key) || len(st.released) != 0 {
		t.Fatalf("ambiguous insert that did land: %+v %v, removed %v, released %v", f, err, obj.removed, st.released)
	}
	p.Discard() // settled: nothing more happens
	if slices.Contains(obj.removed, p.File.Key) {
		t.Fatal("Discard after Commit removed the object")
	}
}

// An upload whose reservation is refused (another upload took the space
// while it streamed) is never inserted, and its object goes.
func TestCommitRefusedReservation(t *testing.T) {
	svc, st, obj := newService(files.Config{MaxUpload: 1 << 20, DefaultQuota: 100})
	used := int64(0)
	st.AccountFn = func(context.Context, string) (files.Account, error) { return files.Account{Bytes: used}, nil }
	p, err := svc.StoreFile(ctx, "u1", bytes.NewReader(make([]byte, 80)))
	if err != nil {
		t.Fatal(err)
	}
	used = 60 // another upload reserved meanwhile
	inserted := 0
	st.InsertFn = func(context.Context, *files.File) error { inserted++; return nil }
	if _, err := p.Commit(ctx, "u1", "x.bin", nil); !errors.Is(err, files.ErrQuotaExceeded) {
		t.Fatalf("commit over quota: %v", err)
	}
	if inserted != 0 || !slices.Contains(obj.removed, p.File.Key) || len(st.released) != 0 {
		t.Fatalf("inserted %d, removed %v, released %v; want no record, the object gone, nothing to give back", inserted, obj.removed, st.released)
	}
}

// A reservation checked against a quota an administrator changed since
// the account was read is tried again against the new one.
func TestCommitFollowsAChangedQuota(t *testing.T) {
	svc, st, _ := newService(files.Config{MaxUpload: 1 << 20, DefaultQuota: 100})
	acct := files.Account{Bytes: 10}
	st.AccountFn = func(context.Context, string) (files.Account, error) { return acct, nil }
	p, err := svc.StoreFile(ctx, "u1", bytes.NewReader(make([]byte, 80)))
	if err != nil {
		t.Fatal(err)
	}
	acct = files.Account{Bytes: 50, Quota: 1000, OwnQuota: true} // raised meanwhile, and 40 more bytes used: 80 would not fit under the default
	var maxes []int64
	st.ReserveFn = func(_ context.Context, _ string, n int64, expect files.Account, max int64) (files.Account, bool, error) {
		maxes = append(maxes, max)
		if expect.OwnQuota != acct.OwnQuota || expect.Quota != acct.Quota || acct.Bytes+n > max {
			return acct, false, nil
		}
		return acct, true, nil
	}
	if _, err := p.Commit(ctx, "u1", "x.bin", nil); err != nil {
		t.Fatalf("commit under a raised quota: %v", err)
	}
	if !slices.Equal(maxes, []int64{100, 1000}) {
		t.Fatalf("reservations against %v, want the default then the new own quota", maxes)
	}
}

func TestReadRules(t *testing.T) {
	file := &files.File{ID: files.NewID(), Kind: files.KindFile, Owner: "alice"}
	image := &files.File{ID: files.NewID(), Kind: files.KindImage, Owner: "alice"}
	byID := func(_ context.Context, id string) (*files.File, error) {
		switch id {
		case file.ID:
			return file, nil
		case image.ID:
			return image, nil
		}
		return nil, files.ErrNotFound
	}
	alice, bob, admin, anon := files.Reader{UserID: "alice"}, files.Reader{UserID: "bob"}, files.Reader{UserID: "root", Admin: true}, files.Reader{}
	for _, tc := range []struct {
		name    string
		readAll bool
		id      string
		r       files.Reader
		get     error // of Get
		dl      error // of Download
	}{
		{"owner200", false, file.ID, alice, nil, nil},
		{"admin200", false, file.ID, admin, nil, nil},
		{"other404", false, file.ID, bob, files.ErrNotFound, files.ErrNotFound},
		{"anonymous404", true, file.ID, anon, files.ErrNotFound, files.ErrNotFound},
		{"otherReadAll200", true, file.ID, bob, nil, nil},
		{"malformed404", false, "../" + file.ID, admin, files.ErrNotFound, files.ErrNotFound},
		{"unknown404", false, files.NewID(), admin, files.ErrNotFound, files.ErrNotFound},
		{"imageDownload", false, image.ID, alice, nil, files.ErrIsImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, st, _ := newService(files.Config{ReadAll: tc.readAll})
			st.GetFn = byID
			if _, err := svc.Get(ctx, tc.id, tc.r); !errors.Is(err, tc.get) {
				t.Errorf("Get: %v, want %v", err, tc.get)
			}
			if _, err := svc.Download(ctx, tc.id, tc.r); !errors.Is(err, tc.dl) {
				t.Errorf("Download: %v, want %v", err, tc.dl)
			}
		})
	}
	svc, st, _ := newService(files.Config{})
	st.GetFn = byID
	if _, err := svc.Image(ctx, file.ID); !errors.Is(err, files.ErrNotFound) {
		t.Fatalf("a file served as a public image: %v", err)
	}
	if f, err := svc.Image(ctx, image.ID); err != nil || f != image {
		t.Fatalf("image: %v", err)
	}
	if file.CanModify(bob) || !file.CanModify(admin) || !file.CanModify(alice) || file.CanModify(anon) {
		t.Fatal("CanModify: only the owner and administrators")
	}
}

func TestListPages(t *testing.T) {
	svc, st, _ := newService(files.Config{})
	all := make([]*files.File, 25)
	for i := range all {
		all[i] = &files.File{ID: files.NewID()}
	}
	st.ListByOwnerFn = func(_ context.Context, _ string, skip, limit int) ([]*files.File, error) {
		return all[min(skip, len(all)):min(skip+limit, len(all))], nil
	}
	for _, tc := range []struct {
		page, limit, n int
		more           bool
	}{{1, 10, 10, true}, {3, 10, 5, false}, {1, 25, 25, false}, {4, 10, 0, false}} {
		got, more, err := svc.List(ctx, "u1", tc.page, tc.limit)
		if err != nil || len(got) != tc.n || more != tc.more {
			t.Fatalf("page %d of %d: %d records, more %v, %v; want %d, %v", tc.page, tc.limit, len(got), more, err, tc.n, tc.more)
		}
		if tc.n > 0 && got[0] != all[(tc.page-1)*tc.limit] {
			t.Fatalf("page %d starts at the wrong record", tc.page)
		}
	}
}

// The sweep removes old objects of this service that have no record, and
// keeps recorded ones, recent ones and keys it did not make.
func TestSweepRemovesOnlyOldOrphans(t *testing.T) {
	svc, st, obj := newService(files.Config{})
	old, recent := time.Now().Add(-2*time.Hour), time.Now()
	orphan := files.ObjectKey(files.KindFile, files.NewID(), old)
	orphanImage := files.ObjectKey(files.KindImage, files.NewID(), old)
	recorded := files.ObjectKey(files.KindFile, files.NewID(), old)
	young := files.ObjectKey(files.KindFile, files.NewID(), recent)
	foreign := "files/not/ours"
	obj.listed = []files.ObjectInfo{{orphan, old}, {orphanImage, old}, {recorded, old}, {young, recent}, {foreign, old}}
	recordedID, _ := files.IDFromKey(recorded)
	st.ExistingFn = func(_ context.Context, ids []string) (map[string]bool, error) {
		return map[string]bool{recordedID: slices.Contains(ids, recordedID)}, nil
	}
	n, err := svc.Sweep(ctx, time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("Sweep: %d %v, want 2", n, err)
	}
	slices.Sort(obj.removed)
	want := []string{orphan, orphanImage}
	slices.Sort(want)
	if !slices.Equal(obj.removed, want) {
		t.Fatalf("removed %v, want %v", obj.removed, want)
	}
	// A store that cannot tell keeps every object.
	obj.removed = nil
	st.ExistingFn = func(context.Context, []string) (map[string]bool, error) { return nil, files.ErrUnavailable }
	if _, err := svc.Sweep(ctx, time.Hour); !errors.Is(err, files.ErrUnavailable) || len(obj.removed) != 0 {
		t.Fatalf("sweep with the store down: %v, removed %v", err, obj.removed)
	}
}

func TestUsageAndQuota(t *testing.T) {
	svc, st, _ := newService(files.Config{DefaultQuota: 5000})
	st.AccountFn = func(context.Context, string) (files.Account, error) { return files.Account{Bytes: 1200, Count: 4}, nil }
	u, err := svc.Usage(ctx, "u1")
	if err != nil || u != (files.Usage{Used: 1200, Quota: 5000, Limited: true, Files: 4}) {
		t.Fatalf("usage %+v %v", u, err)
	}
	var set *int64
	st.SetQuotaFn = func(_ context.Context, _ string, q *int64) error {
		set = q
		return nil
	}
	if err := svc.SetQuota(ctx, "u1", ptr(int64(-1))); !errors.Is(err, files.ErrBadQuota) || set != nil {
		t.Fatalf("negative quota: %v, stored %v", err, set)
	}
	if err := svc.SetQuota(ctx, "u1", ptr(int64(0))); err != nil || set == nil || *set != 0 {
		t.Fatalf("zero quota: %v, stored %v", err, set)
	}
	unlimited, _, _ := newService(files.Config{})
	if u, err := unlimited.Usage(ctx, "u1"); err != nil || u.Limited {
		t.Fatalf("no default quota: %+v %v", u, err)
	}
}

func ptr[T any](v T) *T { return &v }
