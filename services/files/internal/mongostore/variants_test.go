package mongostore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/files"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestTakeVariantIsAtomic: 120 concurrent first requests of distinct
// variants of an image allowed 20, on the embedded server: exactly 20 are
// counted; given back, one more may be taken; a file (not an image) and an
// unknown id take none.
func TestTakeVariantIsAtomic(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	img := &files.File{ID: files.NewID(), Kind: files.KindImage, Owner: "u1", Type: "image/jpeg", Key: "k1", Size: 1, CreatedAt: now}
	doc := &files.File{ID: files.NewID(), Kind: files.KindFile, Owner: "u1", Type: "text/plain", Key: "k2", Size: 1, CreatedAt: now}
	for _, f := range []*files.File{img, doc} {
		if _, err := s.coll.InsertOne(ctx, toDoc(f)); err != nil {
			t.Fatal(err)
		}
	}
	const callers, max = 120, 20
	var wg sync.WaitGroup
	var taken atomic.Int64
	start := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-start
			ok, err := s.TakeVariant(ctx, img.ID, max)
			if err != nil {
				t.Error(err)
			}
			if ok {
				taken.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := taken.Load(); n != max {
		t.Fatalf("%d of %d concurrent takes counted, want exactly %d", n, callers, max)
	}
	var d struct {
		Variants int64 `bson:"variants"`
	}
	if err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: img.ID}}).Decode(&d); err != nil || d.Variants != max {
		t.Fatalf("stored count %d (%v), want %d", d.Variants, err, max)
	}
	if ok, err := s.TakeVariant(ctx, img.ID, max); ok || err != nil {
		t.Fatalf("take past the bound: %v %v", ok, err)
	}
	if err := s.GiveBackVariant(ctx, img.ID); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.TakeVariant(ctx, img.ID, max); !ok || err != nil {
		t.Fatalf("take after a give back: %v %v", ok, err)
	}
	for _, id := range []string{doc.ID, files.NewID()} {
		if ok, err := s.TakeVariant(ctx, id, max); ok || err != nil {
			t.Fatalf("take of %s: %v %v", id, ok, err)
		}
	}
	// The record still decodes as before (the counter is not part of it).
	if got, err := s.Get(ctx, img.ID); err != nil || got.ID != img.ID {
		t.Fatalf("get %v %v", got, err)
	}
}
