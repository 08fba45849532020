package mongostore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/files"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// upload reserves f's bytes without a limit, then inserts f, as an upload
// does.
func upload(ctx context.Context, s *Store, f *files.File) error {
	a, err := s.Account(ctx, f.Owner)
	if err != nil {
		return err
	}
	if _, ok, err := s.Reserve(ctx, f.Owner, f.Size, a, -1); err != nil || !ok {
		return errors.Join(err, errors.New("reservation refused"))
	}
	return s.Insert(ctx, f)
}

func usage(t *testing.T, s *Store, owner string) (int64, int64) {
	t.Helper()
	a, err := s.Account(context.Background(), owner)
	if err != nil {
		t.Fatal(err)
	}
	return a.Bytes, a.Count
}

// TestUsageCountsConcurrentChanges: an owner's usage equals the sum of the
// records left after concurrent uploads and deletes, the first of them
// racing to make the usage document, and it starts from the records
// written before the document existed.
func TestUsageCountsConcurrentChanges(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	// Records written before any usage document (as by an older version).
	var before int64
	for i := range 5 {
		f := record("u1", time.Now())
		f.Size = int64(100 + i)
		if _, err := s.coll.InsertOne(ctx, toDoc(f)); err != nil {
			t.Fatal(err)
		}
		before += f.Size
	}
	const workers, each = 6, 8
	var (
		mu   sync.Mutex
		kept = map[string]int64{}
		wg   sync.WaitGroup
		errs = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				f := record("u1", time.Now())
				f.Size = int64(1000*w + i + 1)
				if err := upload(ctx, s, f); err != nil {
					errs <- err
					return
				}
				if i%3 == 0 { // every third one deleted again
					if err := s.Delete(ctx, f.ID); err != nil {
						errs <- err
						return
					}
					continue
				}
				mu.Lock()
				kept[f.ID] = f.Size
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want, wantN := before, int64(5+len(kept))
	for _, n := range kept {
		want += n
	}
	bytes, n := usage(t, s, "u1")
	if bytes != want || n != wantN {
		t.Fatalf("usage %d bytes in %d records, want %d in %d", bytes, n, want, wantN)
	}
	// The document agrees with the records themselves.
	sum, count, err := s.sumRecords(ctx, "u1")
	if err != nil || sum != bytes || count != n {
		t.Fatalf("records sum to %d in %d (%v); the usage says %d in %d", sum, count, err, bytes, n)
	}
	// A second delete of one record is not counted twice.
	for id := range kept {
		if err := s.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, id); !errors.Is(err, files.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		if b2, n2 := usage(t, s, "u1"); b2 != bytes-kept[id] || n2 != n-1 {
			t.Fatalf("after a delete: %d in %d, want %d in %d", b2, n2, bytes-kept[id], n-1)
		}
		break
	}
	// An owner without records has zero usage.
	if b, n := usage(t, s, "nobody"); b != 0 || n != 0 {
		t.Fatalf("empty owner: %d, %d", b, n)
	}
}

// TestReserveIsAtomic: 240 concurrent reservations of 1,000 bytes against
// a quota of 50,000 on the embedded server: exactly 50 are taken, each saw
// the account at a different value (no two read the same bytes), and the
// account ends at their sum. The first of them also races to make the
// account from the owner's records.
func TestReserveIsAtomic(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const callers, size, fits = 240, 1000, 50
	pre := record("r1", time.Now())
	pre.Size = 500 // counted when the account is made
	if _, err := s.coll.InsertOne(ctx, toDoc(pre)); err != nil {
		t.Fatal(err)
	}
	const max = fits*size + 500
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		seen  = map[int64]bool{}
		taken int
		start = make(chan struct{})
		errs  = make(chan error, callers)
	)
	for range callers {
		wg.Go(func() {
			<-start
			a, ok, err := s.Reserve(ctx, "r1", size, files.Account{}, max)
			if err != nil {
				errs <- err
				return
			}
			if !ok { // the account was not made yet: once more, as the service does
				if a, ok, err = s.Reserve(ctx, "r1", size, a, max); err != nil {
					errs <- err
					return
				}
			}
			if !ok {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			taken++
			if seen[a.Bytes] {
				errs <- errors.New("two reservations answered the same account: they read the same bytes")
			}
			seen[a.Bytes] = true
			if a.Bytes > max {
				errs <- errors.New("a reservation passed the quota")
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if taken != fits {
		t.Fatalf("%d of %d concurrent reservations taken, want exactly %d", taken, callers, fits)
	}
	if b, n := usage(t, s, "r1"); b != max || n != fits+1 {
		t.Fatalf("account %d bytes, %d records; want %d, %d", b, n, max, fits+1)
	}
}

// TestReserveChecksTheQuotaItWasGiven: a reservation made against a quota
// that changed since is refused, and the account it answers carries the
// quota now in force; a quota set before the owner's first upload is kept
// when the account is counted; ForgetUsage keeps an own quota and drops
// the count, SetQuota(nil) the quota.
func TestReserveChecksTheQuotaItWasGiven(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := record("q1", time.Now())
	f.Size = 40
	if _, err := s.coll.InsertOne(ctx, toDoc(f)); err != nil {
		t.Fatal(err)
	}
	q := int64(100)
	if err := s.SetQuota(ctx, "q1", &q); err != nil { // no account yet
		t.Fatal(err)
	}
	a, err := s.Account(ctx, "q1")
	if err != nil || a != (files.Account{Bytes: 40, Count: 1, Quota: 100, OwnQuota: true}) {
		t.Fatalf("account %+v %v", a, err)
	}
	// Checked against the default (no own quota): refused, whatever fits.
	if got, ok, err := s.Reserve(ctx, "q1", 10, files.Account{}, 1000); err != nil || ok || got != a {
		t.Fatalf("reservation against a stale quota: %+v %v %v, want refused with %+v", got, ok, err, a)
	}
	// Against an own quota of another value: refused too.
	if _, ok, err := s.Reserve(ctx, "q1", 10, files.Account{Quota: 1000, OwnQuota: true}, 1000); err != nil || ok {
		t.Fatalf("reservation against another own quota: %v %v", ok, err)
	}
	// Against the quota in force: the last byte fits, one more does not.
	if got, ok, err := s.Reserve(ctx, "q1", 60, a, 100); err != nil || !ok || got.Bytes != 100 || got.Count != 2 {
		t.Fatalf("reservation of the rest: %+v %v %v", got, ok, err)
	}
	if _, ok, err := s.Reserve(ctx, "q1", 1, a, 100); err != nil || ok {
		t.Fatalf("one byte over: %v %v", ok, err)
	}
	if err := s.Release(ctx, "q1", 60); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetUsage(ctx, "q1"); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Account(ctx, "q1"); err != nil || a != (files.Account{Bytes: 40, Count: 1, Quota: 100, OwnQuota: true}) {
		t.Fatalf("after ForgetUsage: %+v %v, want the records counted again and the own quota kept", a, err)
	}
	if err := s.SetQuota(ctx, "q1", nil); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Account(ctx, "q1"); err != nil || a.OwnQuota {
		t.Fatalf("after SetQuota(nil): %+v %v", a, err)
	}
}

// TestForgetUsageRecounts: a count left off (as by a process killed
// between a record's delete and its count) is made again from the records
// after ForgetUsage, and an erased owner's account (no own quota) is gone.
func TestForgetUsageRecounts(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := record("u2", time.Now())
	f.Size = 300
	if err := upload(ctx, s, f); err != nil {
		t.Fatal(err)
	}
	// The record goes, its count stays: what a kill in between leaves.
	if _, err := s.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: f.ID}}); err != nil {
		t.Fatal(err)
	}
	if b, n := usage(t, s, "u2"); b != 300 || n != 1 {
		t.Fatalf("before: %d bytes, %d records; want the count left off (300, 1)", b, n)
	}
	if err := s.ForgetUsage(ctx, "u2"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.usage.CountDocuments(ctx, byOwner("u2")); err != nil || n != 0 {
		t.Fatalf("%d account documents left after ForgetUsage (%v), want none", n, err)
	}
	if b, n := usage(t, s, "u2"); b != 0 || n != 0 {
		t.Fatalf("after ForgetUsage: %d bytes, %d records; want 0, 0", b, n)
	}
}

// TestQuotasMoveIntoAccounts: quotas found in the former quota collection
// are moved into the accounts at start-up, without overriding an own quota
// set there since.
func TestQuotasMoveIntoAccounts(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	newer := int64(7)
	if err := s.SetQuota(ctx, "set-since", &newer); err != nil {
		t.Fatal(err)
	}
	if _, err := s.quotas.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "old"}, {Key: "quota", Value: int64(5000)}},
		bson.D{{Key: "_id", Value: "set-since"}, {Key: "quota", Value: int64(9)}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Account(ctx, "old"); err != nil || !a.OwnQuota || a.Quota != 5000 {
		t.Fatalf("moved quota: %+v %v", a, err)
	}
	if a, err := s.Account(ctx, "set-since"); err != nil || !a.OwnQuota || a.Quota != 7 {
		t.Fatalf("quota set in the account since: %+v %v, want it kept (7)", a, err)
	}
	if n, err := s.quotas.CountDocuments(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: []string{"old", "set-since"}}}}}); err != nil || n != 0 {
		t.Fatalf("%d quotas left in the former collection (%v)", n, err)
	}
}
