package mongox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/web"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Indexes can be ensured twice (a restart) and a unique index makes a second
// insert and a conflicting update report IsDuplicate on the real server.
func TestIndexesAndDuplicates(t *testing.T) {
	s := testkit.Get(t, testkit.Mongo)
	ctx := context.Background()
	mc, disconnect, err := mongox.Connect(ctx, options.Client().ApplyURI(s.MongoURL), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer disconnect()
	c := mc.Database(s.Database(t)).Collection("c")
	models := []mongo.IndexModel{
		{Keys: bson.D{{Key: "k", Value: 1}}, Options: options.Index().SetUnique(true).SetName("k_unique")},
		{Keys: bson.D{{Key: "t", Value: 1}}, Options: options.Index().SetName("t")},
	}
	for range 2 {
		if err := mongox.EnsureIndexes(ctx, c, models...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.InsertOne(ctx, bson.M{"_id": 1, "k": "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertOne(ctx, bson.M{"_id": 2, "k": "b"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.InsertOne(ctx, bson.M{"_id": 3, "k": "a"})
	if !mongox.IsDuplicate(err) {
		t.Fatalf("second insert of a unique key: %v", err)
	}
	err = c.FindOneAndUpdate(ctx, bson.M{"_id": 2}, bson.M{"$set": bson.M{"k": "a"}}).Err()
	if !mongox.IsDuplicate(err) {
		t.Fatalf("update into a unique key: %v", err)
	}
	if mongox.IsDuplicate(nil) || mongox.IsDuplicate(errors.New("other")) {
		t.Fatal("non-duplicates reported as duplicates")
	}
}

func TestConnectGivesUp(t *testing.T) {
	start := time.Now()
	_, _, err := mongox.Connect(context.Background(),
		options.Client().ApplyURI("mongodb://127.0.0.1:1").SetServerSelectionTimeout(200*time.Millisecond), time.Second)
	if err == nil {
		t.Fatal("connected to nothing")
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("took %s to give up", time.Since(start))
	}
}

// Importing mongox teaches web.IsUnavailable the driver's errors of an
// unreachable server, and nothing else.
func TestUnavailableErrorsAnswer503(t *testing.T) {
	for _, err := range []error{topology.ServerSelectionError{}, fmt.Errorf("find: %w", mongo.ErrClientDisconnected)} {
		if !web.IsUnavailable(err) {
			t.Errorf("%T %v: not unavailable", err, err)
		}
	}
	for _, err := range []error{mongo.ErrNoDocuments, errors.New("E11000 duplicate key")} {
		if web.IsUnavailable(err) || mongox.IsUnavailable(err) {
			t.Errorf("%v: unavailable", err)
		}
	}
}
