package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/acme/platform/pkg/mongox"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The primitives the throttle store relies on, each under 200 concurrent
// callers on the test's server (the embedded FerretDB, or MONGO_URL's),
// with exact outcomes: what MongoDB documents as atomic holds there too.
const racers = 200

// race runs f(i) for i in 0..racers-1 at once.
func race(f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// One _id inserted by 200 callers at once: exactly one insert succeeds,
// every other one fails with a duplicate-key error (a slot is taken once).
func TestThrottlePrimitiveInsertOnce(t *testing.T) {
	c := newDB(t).Collection("slots")
	var won, dup atomic.Int32
	race(func(int) {
		_, err := c.InsertOne(context.Background(), bson.D{{Key: "_id", Value: "k#1#0#1"}})
		switch {
		case err == nil:
			won.Add(1)
		case mongox.IsDuplicate(err):
			dup.Add(1)
		default:
			t.Error(err)
		}
	})
	if won.Load() != 1 || dup.Load() != racers-1 {
		t.Fatalf("%d inserts of one _id: %d succeeded, %d duplicates", racers, won.Load(), dup.Load())
	}
}

// An unordered insert of two documents (a sign-in's two first slots), by
// 200 callers at once, each with one _id all share and one of its own:
// the shared one is inserted once, every own one is inserted, and each
// caller's duplicate-key error names the index of the shared document.
func TestThrottlePrimitiveInsertManyReportsEachSlot(t *testing.T) {
	ctx := context.Background()
	c := newDB(t).Collection("slots")
	var won atomic.Int32
	race(func(i int) {
		_, err := c.InsertMany(ctx, []any{
			bson.D{{Key: "_id", Value: fmt.Sprintf("own#%d", i)}},
			bson.D{{Key: "_id", Value: "shared"}},
		}, options.InsertMany().SetOrdered(false))
		if err == nil {
			won.Add(1)
			return
		}
		var bw mongo.BulkWriteException
		if !errors.As(err, &bw) || len(bw.WriteErrors) != 1 || bw.WriteErrors[0].Index != 1 || !mongox.IsDuplicate(bw.WriteErrors[0].WriteError) {
			t.Errorf("caller %d: %v, want one duplicate key at index 1", i, err)
		}
	})
	if won.Load() != 1 {
		t.Fatalf("the shared slot was taken by %d callers", won.Load())
	}
	if n, err := c.CountDocuments(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids("own#", racers)}}}}); err != nil || n != racers {
		t.Fatalf("own slots inserted: %d, %v; want %d", n, err, racers)
	}
}

// Deletes by _id $in and nonce $in, 200 callers each giving back two
// slots of 100 (every slot named by two callers): each slot is deleted
// once, so the deleted counts add up to exactly the slots there were.
func TestThrottlePrimitiveDeleteOnce(t *testing.T) {
	ctx := context.Background()
	c := newDB(t).Collection("slots")
	const slots = racers / 2
	docs := make([]any, slots)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("s#%d", i)}, {Key: "t", Value: fmt.Sprintf("n%d", i)}}
	}
	if _, err := c.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	var deleted atomic.Int64
	race(func(i int) {
		a, b := i%slots, (i+1)%slots
		res, err := c.DeleteMany(ctx, bson.D{
			{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{fmt.Sprintf("s#%d", a), fmt.Sprintf("s#%d", b)}}}},
			{Key: "t", Value: bson.D{{Key: "$in", Value: bson.A{fmt.Sprintf("n%d", a), fmt.Sprintf("n%d", b)}}}},
		})
		if err != nil {
			t.Error(err)
			return
		}
		deleted.Add(res.DeletedCount)
	})
	if deleted.Load() != slots {
		t.Fatalf("%d slots given back by %d callers: %d deletions counted", slots, racers, deleted.Load())
	}
}

// A conditional update (the lock: the state as it was read), by 200
// callers at once: exactly one matches; the others find the state changed.
func TestThrottlePrimitiveConditionalUpdateOnce(t *testing.T) {
	ctx := context.Background()
	c := newDB(t).Collection("states")
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "locks", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	var matched atomic.Int64
	race(func(int) {
		res, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "locks", Value: 0}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "locks", Value: 1}}}})
		if err != nil {
			t.Error(err)
			return
		}
		matched.Add(res.MatchedCount)
	})
	var st struct {
		Locks int `bson:"locks"`
	}
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "k"}}).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if matched.Load() != 1 || st.Locks != 1 {
		t.Fatalf("%d conditional updates: %d matched, locks %d; want 1 and 1", racers, matched.Load(), st.Locks)
	}
}

func ids(prefix string, n int) bson.A {
	out := make(bson.A, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}
