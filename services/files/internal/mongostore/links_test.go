package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/files"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func newLink(t *testing.T, s *Store, max int64) *files.Link {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	l := &files.Link{ID: files.NewID(), FileID: files.NewID(), Owner: "u1", TokenHash: files.NewID(), CreatedAt: now,
		ExpiresAt: now.Add(time.Hour), MaxDownloads: max}
	if err := s.InsertLink(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCountDownloadIsAtomic: 240 concurrent downloads of a link limited to
// 50 on the embedded server: exactly 50 are counted, and the link says 50.
func TestCountDownloadIsAtomic(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const callers, max = 240, 50
	l := newLink(t, s, max)
	var (
		wg      sync.WaitGroup
		counted atomic.Int64
		start   = make(chan struct{})
		errs    = make(chan error, callers)
	)
	for range callers {
		wg.Go(func() {
			<-start
			ok, err := s.CountDownload(ctx, l.ID, max)
			if err != nil {
				errs <- err
			}
			if ok {
				counted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := counted.Load(); n != max {
		t.Fatalf("%d of %d concurrent downloads counted, want exactly %d", n, callers, max)
	}
	got, err := s.LinkByTokenHash(ctx, l.TokenHash)
	if err != nil || got.Downloads != max {
		t.Fatalf("link after the race: %+v %v, want downloads %d", got, err, max)
	}
	if ok, err := s.CountDownload(ctx, l.ID, max); ok || err != nil {
		t.Fatalf("one more: %v %v, want refused", ok, err)
	}
	if _, err := s.CountDownload(ctx, files.NewID(), max); !errors.Is(err, files.ErrLinkNotFound) {
		t.Fatalf("unknown link: %v, want ErrLinkNotFound", err)
	}
}

// TestDownloadSlotsFoldIntoLinks: download slots of the former slot
// collection raise their links' counts at start-up (never lower them),
// and the collection goes.
func TestDownloadSlotsFoldIntoLinks(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	behind, ahead := newLink(t, s, 10), newLink(t, s, 10)
	if _, err := s.links.UpdateOne(ctx, bson.D{{Key: "_id", Value: behind.ID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "downloads", Value: int64(1)}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.links.UpdateOne(ctx, bson.D{{Key: "_id", Value: ahead.ID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "downloads", Value: int64(5)}}}}); err != nil {
		t.Fatal(err)
	}
	var slots []any
	for i := 1; i <= 3; i++ {
		for _, l := range []*files.Link{behind, ahead} {
			slots = append(slots, bson.D{{Key: "_id", Value: fmt.Sprintf("%s/%d", l.ID, i)}, {Key: "linkId", Value: l.ID}, {Key: "fileId", Value: l.FileID}})
		}
	}
	if _, err := s.slots.InsertMany(ctx, slots); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		l    *files.Link
		want int64
	}{{behind, 3}, {ahead, 5}} {
		if got, err := s.LinkByTokenHash(ctx, c.l.TokenHash); err != nil || got.Downloads != c.want {
			t.Fatalf("link %+v %v, want downloads %d", got, err, c.want)
		}
	}
	names, err := s.slots.Database().ListCollectionNames(ctx, bson.D{})
	if err != nil || slices.Contains(names, SlotsCollection) {
		t.Fatalf("collections %v %v, want %s gone", names, err, SlotsCollection)
	}
}
