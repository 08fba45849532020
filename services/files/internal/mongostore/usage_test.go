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

// TestUsageCountsConcurrentChanges: an owner's usage equals the sum of the
// records left after concurrent inserts and deletes, the first of them
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				f := record("u1", time.Now())
				f.Size = int64(1000*w + i + 1)
				if err := s.Insert(ctx, f); err != nil {
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
		}()
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
	bytes, n, err := s.Usage(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
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
		if b2, n2, _ := s.Usage(ctx, "u1"); b2 != bytes-kept[id] || n2 != n-1 {
			t.Fatalf("after a delete: %d in %d, want %d in %d", b2, n2, bytes-kept[id], n-1)
		}
		break
	}
	// An owner without records has zero usage.
	if b, n, err := s.Usage(ctx, "nobody"); err != nil || b != 0 || n != 0 {
		t.Fatalf("empty owner: %d, %d, %v", b, n, err)
	}
}

// TestForgetUsageRecounts: a count left off (as by a process killed
// between a record's delete and its count) is made again from the records
// after ForgetUsage.
func TestForgetUsageRecounts(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := record("u2", time.Now())
	f.Size = 300
	if err := s.Insert(ctx, f); err != nil {
		t.Fatal(err)
	}
	// The record goes, its count stays: what a kill in between leaves.
	if _, err := s.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: f.ID}}); err != nil {
		t.Fatal(err)
	}
	if b, n, err := s.Usage(ctx, "u2"); err != nil || b != 300 || n != 1 {
		t.Fatalf("before: %d bytes, %d records, %v; want the count left off (300, 1)", b, n, err)
	}
	if err := s.ForgetUsage(ctx, "u2"); err != nil {
		t.Fatal(err)
	}
	if b, n, err := s.Usage(ctx, "u2"); err != nil || b != 0 || n != 0 {
		t.Fatalf("after ForgetUsage: %d bytes, %d records, %v; want 0, 0", b, n, err)
	}
}
