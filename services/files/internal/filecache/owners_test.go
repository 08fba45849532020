package filecache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/natsfence"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/nats-io/nats.go"
)

// memStore is an in-memory files.Store of records (the link and quota
// methods are not used here and panic); it counts the reads of listings
// and accounts, and fails Get when getErr is set. An account is the sum of
// the owner's records plus the reservations not inserted yet.
type memStore struct {
	files.Store
	mu                  sync.Mutex
	recs                map[string]files.File
	reserved            map[string]files.Account
	lists, usages, gets int
	getErr              error
}

func newMemStore() *memStore {
	return &memStore{recs: map[string]files.File{}, reserved: map[string]files.Account{}}
}

func (m *memStore) Insert(_ context.Context, f *files.File) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.recs[f.ID]; ok {
		return files.ErrConflict
	}
	m.recs[f.ID] = *f
	r := m.reserved[f.Owner]
	r.Bytes -= f.Size
	r.Count--
	m.reserved[f.Owner] = r
	return nil
}

func (m *memStore) Reserve(_ context.Context, owner string, n int64, _ files.Account, _ int64) (files.Account, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.reserved[owner]
	r.Bytes += n
	r.Count++
	m.reserved[owner] = r
	return m.accountLocked(owner), true, nil
}

// upload reserves f's bytes and inserts f through s, as Commit does.
func upload(ctx context.Context, s files.Store, f *files.File) error {
	if _, _, err := s.Reserve(ctx, f.Owner, f.Size, files.Account{}, -1); err != nil {
		return err
	}
	return s.Insert(ctx, f)
}

func (m *memStore) Get(_ context.Context, id string) (*files.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	if m.getErr != nil {
		return nil, m.getErr
	}
	f, ok := m.recs[id]
	if !ok {
		return nil, files.ErrNotFound
	}
	return &f, nil
}

func (m *memStore) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.recs[id]; !ok {
		return files.ErrNotFound
	}
	delete(m.recs, id)
	return nil
}

func (m *memStore) ListByOwner(_ context.Context, owner string, skip, limit int) ([]*files.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lists++
	var all []files.File
	for _, f := range m.recs {
		if f.Owner == owner {
			all = append(all, f)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].CreatedAt.Equal(all[j].CreatedAt) {
			return all[i].CreatedAt.After(all[j].CreatedAt)
		}
		return all[i].ID > all[j].ID
	})
	var out []*files.File
	for i := skip; i < len(all) && len(out) < limit; i++ {
		f := all[i]
		out = append(out, &f)
	}
	return out, nil
}

func (m *memStore) ForgetUsage(context.Context, string) error { return nil } // usage is summed each time

func (m *memStore) Account(_ context.Context, owner string) (files.Account, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.usages++
	return m.accountLocked(owner), nil
}

func (m *memStore) accountLocked(owner string) files.Account {
	a := m.reserved[owner]
	for _, f := range m.recs {
		if f.Owner == owner {
			a.Bytes += f.Size
			a.Count++
		}
	}
	return a
}

func (m *memStore) reads() (lists, usages int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lists, m.usages
}

var clock = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func record(id, owner string, size int64) *files.File {
	clock = clock.Add(time.Second)
	return &files.File{ID: id, Owner: owner, Name: id + ".txt", Size: size, CreatedAt: clock}
}

func ids(fs []*files.File) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.ID
	}
	return out
}

// On one replica: a listing and a usage are served from the cache until a
// write changes the owner's records (an insert, a delete, a delete whose
// owner cannot be read), which drops them at once and is announced with the
// owner; other owners' entries stay. Callers get copies.
func TestOwnerCacheOnOneReplica(t *testing.T) {
	inner := newMemStore()
	var announced []Deleted
	s := New(inner, NewCache(time.Minute, 100), NewOwnerCache(time.Minute, 1000), func(_ context.Context, d Deleted) { announced = append(announced, d) })
	ctx := context.Background()
	for _, f := range []*files.File{record("a1", "alice", 10), record("a2", "alice", 20), record("b1", "bob", 5)} {
		if err := upload(ctx, s, f); err != nil {
			t.Fatal(err)
		}
	}
	if len(announced) != 3 || !slices.Equal(announced[2].Owners, []string{"bob"}) || len(announced[2].Files) != 0 {
		t.Fatalf("inserts announced %+v, want each owner alone", announced)
	}

	list := func(owner string, want ...string) {
		t.Helper()
		got, err := s.ListByOwner(ctx, owner, 0, 21)
		if err != nil || !slices.Equal(ids(got), want) {
			t.Fatalf("list of %s: %v %v, want %v", owner, ids(got), err, want)
		}
		for _, f := range got {
			f.Name = "changed by a caller"
		}
	}
	usage := func(owner string, wantBytes, wantCount int64) {
		t.Helper()
		a, err := s.Account(ctx, owner)
		b, n := a.Bytes, a.Count
		if err != nil || b != wantBytes || n != wantCount {
			t.Fatalf("usage of %s: %d bytes %d files %v, want %d %d", owner, b, n, err, wantBytes, wantCount)
		}
	}
	reads := func(wantLists, wantUsages int) {
		t.Helper()
		if l, u := inner.reads(); l != wantLists || u != wantUsages {
			t.Fatalf("%d listing and %d usage reads of the database, want %d and %d", l, u, wantLists, wantUsages)
		}
	}

	for range 3 {
		list("alice", "a2", "a1")
		usage("alice", 30, 2) // kept from the reservation of a2
		list("bob", "b1")
	}
	reads(2, 0)
	got, _ := s.ListByOwner(ctx, "alice", 0, 21)
	if got[0].Name != "a2.txt" {
		t.Fatalf("cached record changed by a caller: %q", got[0].Name)
	}
	if _, err := s.ListByOwner(ctx, "alice", 1, 1); err != nil { // another page: its own entry
		t.Fatal(err)
	}
	reads(3, 0)

	// An upload of alice's drops her pages, not bob's, and keeps the
	// account its reservation answered.
	if err := upload(ctx, s, record("a3", "alice", 5)); err != nil {
		t.Fatal(err)
	}
	list("alice", "a3", "a2", "a1")
	usage("alice", 35, 3)
	list("bob", "b1")
	reads(4, 0)

	// A delete drops the record and its owner's entries, and announces both.
	announced = nil
	if err := s.Delete(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if len(announced) != 1 || !slices.Equal(announced[0].Files, []string{"a2"}) || !slices.Equal(announced[0].Owners, []string{"alice"}) {
		t.Fatalf("delete announced %+v, want files [a2] and owners [alice]", announced)
	}
	list("alice", "a3", "a1")
	usage("alice", 15, 2)
	reads(5, 1)

	// A delete whose record cannot be read first (not cached, storage
	// failing) does not know the owner: every owner goes, everywhere.
	inner.mu.Lock()
	inner.getErr = files.ErrUnavailable
	inner.mu.Unlock()
	announced = nil
	if err := s.Delete(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	if len(announced) != 1 || !slices.Equal(announced[0].Owners, []string{AllOwners}) {
		t.Fatalf("delete with an unknown owner announced %+v, want owners [*]", announced)
	}
	list("bob")
	list("alice", "a3", "a1")
	reads(7, 1)

	// A failed read is not cached; an expired entry is read again.
	c := NewOwnerCache(time.Minute, 1000)
	now := clock
	c.Now = func() time.Time { return now }
	calls := 0
	load := func(context.Context) (files.Account, error) {
		calls++
		if calls == 1 {
			return files.Account{}, files.ErrUnavailable
		}
		return files.Account{Bytes: 1, Count: 1}, nil
	}
	if _, err := c.Account(ctx, "u", load); !errors.Is(err, files.ErrUnavailable) {
		t.Fatal(err)
	}
	_, _ = c.Account(ctx, "u", load)
	_, _ = c.Account(ctx, "u", load)
	now = now.Add(time.Minute)
	_, _ = c.Account(ctx, "u", load)
	if calls != 3 {
		t.Fatalf("%d loads, want 3 (an error, a stored answer, its expiry)", calls)
	}
}

// A load that raced an invalidation of its owner is not stored: the next
// request reads the database again.
func TestOwnerCacheLoadRacingAWrite(t *testing.T) {
	c := NewOwnerCache(time.Minute, 1000)
	ctx := context.Background()
	stale := []*files.File{{ID: "old", Owner: "alice"}}
	loads := 0
	_, _ = c.List(ctx, "alice", 0, 21, func(context.Context) ([]*files.File, error) {
		loads++
		c.Invalidate("alice") // an insert landed while the page was read
		return stale, nil
	})
	got, _ := c.List(ctx, "alice", 0, 21, func(context.Context) ([]*files.File, error) {
		loads++
		return []*files.File{{ID: "new", Owner: "alice"}, {ID: "old", Owner: "alice"}}, nil
	})
	if loads != 2 || len(got) != 2 {
		t.Fatalf("%d loads, %v: the page read before the write was served", loads, ids(got))
	}
	// A failed fence serves nothing from the cache and stores nothing.
	c.SetFence(func(context.Context) error { return natsfence.ErrNotConnected })
	got, _ = c.List(ctx, "alice", 0, 21, func(context.Context) ([]*files.File, error) {
		loads++
		return stale, nil
	})
	if loads != 3 || len(got) != 1 {
		t.Fatalf("with the fence failing: %d loads, %v", loads, ids(got))
	}
	if _, _, bypassed := c.Stats(); bypassed != 1 {
		t.Fatalf("%d bypassed, want 1", bypassed)
	}
}

// The size bound counts records: pages and usages of many owners never
// hold more than the maximum, and a page larger than it is not kept.
func TestOwnerCacheBound(t *testing.T) {
	c := NewOwnerCache(time.Minute, 100)
	ctx := context.Background()
	page := func(n int) func(context.Context) ([]*files.File, error) {
		return func(context.Context) ([]*files.File, error) {
			out := make([]*files.File, n)
			for i := range out {
				out[i] = &files.File{ID: fmt.Sprint(i)}
			}
			return out, nil
		}
	}
	for i := range 50 {
		owner := fmt.Sprint("u", i)
		_, _ = c.List(ctx, owner, 0, 21, page(20))
		_, _ = c.Account(ctx, owner, func(context.Context) (files.Account, error) { return files.Account{Bytes: 1, Count: 1}, nil })
		for skip := range 30 { // more pages than one owner may keep
			_, _ = c.List(ctx, owner, skip, 1, page(1))
		}
		if h := c.Held(); h > 100 {
			t.Fatalf("%d held after %d owners, max 100", h, i+1)
		}
	}
	c.Clear()
	_, _ = c.List(ctx, "big", 0, 200, page(100))
	if c.Held() != 0 {
		t.Fatalf("a page of 100 records (weight 101) was kept under a maximum of 100")
	}
}

// Two replicas over one database and a real NATS server: a listing and a
// usage cached on B show every upload and deletion made through A from the
// very next request on B after A answered (the write is announced, flushed,
// before it answers; B fences before it serves). A message from another
// replica invalidates; the caches still serve between writes.
func TestOwnerCacheAcrossReplicas(t *testing.T) {
	testkit.SkipShort(t)
	srv, err := embedded.NATS(t.TempDir(), "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	db := newMemStore()
	replica := func() (*Store, *OwnerCache) {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		records, owners := NewCache(time.Minute, 100), NewOwnerCache(time.Minute, 1000)
		origin := files.NewID()
		fence, err := natsfence.New(nc, Subject("acme"), Apply(records, owners, origin, log), Reset(records, owners), log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(fence.Close)
		records.SetFence(fence.Sync)
		owners.SetFence(fence.Sync)
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return New(db, records, owners, Publisher(nc, "acme", origin, log)), owners
	}
	a, _ := replica()
	b, bOwners := replica()
	ctx := context.Background()

	var want []string // alice's ids, newest first
	var wantBytes int64
	check := func(step string) {
		t.Helper()
		for range 2 { // the second is served from B's cache
			got, err := b.ListByOwner(ctx, "alice", 0, 21)
			if err != nil || !slices.Equal(ids(got), want) {
				t.Fatalf("%s: listing on B %v %v, want %v", step, ids(got), err, want)
			}
			acct, err := b.Account(ctx, "alice")
			bytes, n := acct.Bytes, acct.Count
			if err != nil || bytes != wantBytes || n != int64(len(want)) {
				t.Fatalf("%s: usage on B %d bytes %d files %v, want %d %d", step, bytes, n, err, wantBytes, len(want))
			}
		}
	}
	check("empty")
	for i := range 20 {
		f := record(fmt.Sprint("f", i), "alice", int64(i+1))
		if err := upload(ctx, a, f); err != nil {
			t.Fatal(err)
		}
		want = append([]string{f.ID}, want...)
		wantBytes += f.Size
		check("after the upload of " + f.ID + " through A")
		if i%3 == 2 { // and a delete through A of an older one
			victim := want[len(want)-1]
			v, _ := db.Get(ctx, victim)
			if err := a.Delete(ctx, victim); err != nil {
				t.Fatal(err)
			}
			want = want[:len(want)-1]
			wantBytes -= v.Size
			check("after the delete of " + victim + " through A")
		}
	}
	hits, misses, _ := bOwners.Stats()
	if hits < misses {
		t.Fatalf("B: %d hits and %d misses; every second read should have been a hit", hits, misses)
	}

	// A keeps the account its own reservation answered: its own message,
	// applied before A serves again (the fence), does not drop it.
	f := record("last", "alice", 7)
	if err := upload(ctx, a, f); err != nil {
		t.Fatal(err)
	}
	_, before := db.reads()
	acct, err := a.Account(ctx, "alice")
	if err != nil || acct.Bytes != wantBytes+f.Size || acct.Count != int64(len(want)+1) {
		t.Fatalf("account on A after its upload: %+v %v, want %d bytes, %d files", acct, err, wantBytes+f.Size, len(want)+1)
	}
	if _, after := db.reads(); after != before {
		t.Fatalf("A read the account %d times after its own upload, want 0 (its reservation's answer kept)", after-before)
	}
}

// Reservations of one owner that overlap keep the later account (the one
// with more bytes) whatever order they end in, and an insert between
// (which changes the owner's pages, not the account) does not drop it; an
// invalidation between drops it, and a load racing a reservation is not
// stored.
func TestOwnerCacheOverlappingReservations(t *testing.T) {
	c := NewOwnerCache(time.Minute, 1000)
	ctx := context.Background()
	loads := 0
	load := func(a files.Account) func(context.Context) (files.Account, error) {
		return func(context.Context) (files.Account, error) { loads++; return a, nil }
	}
	account := func(want files.Account, wantLoads int) {
		t.Helper()
		got, err := c.Account(ctx, "alice", load(files.Account{Bytes: -1}))
		if err != nil || got != want || loads != wantLoads {
			t.Fatalf("account %+v (%v) after %d loads, want %+v after %d", got, err, loads, want, wantLoads)
		}
	}
	ta, tb := c.Token("alice"), c.Token("alice")
	c.PutAccount("alice", tb, files.Account{Bytes: 20, Count: 2}) // b ends first
	c.InvalidatePages("alice")                                    // b's record inserted
	c.PutAccount("alice", ta, files.Account{Bytes: 10, Count: 1}) // a, reserved before b
	account(files.Account{Bytes: 20, Count: 2}, 0)
	tc := c.Token("alice")
	c.PutAccount("alice", tc, files.Account{Bytes: 30, Count: 3})
	account(files.Account{Bytes: 30, Count: 3}, 0)

	td := c.Token("alice")
	c.Invalidate("alice") // a release or a delete
	c.PutAccount("alice", td, files.Account{Bytes: 40, Count: 4})
	account(files.Account{Bytes: -1}, 1)

	c.Invalidate("alice")
	te := c.Token("alice")
	_, _ = c.Account(ctx, "alice", func(context.Context) (files.Account, error) {
		loads++
		c.PutAccount("alice", te, files.Account{Bytes: 50, Count: 5}) // reserved meanwhile
		return files.Account{Bytes: 40, Count: 4}, nil
	})
	account(files.Account{Bytes: 50, Count: 5}, 2)
}
