package mongostore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/embedded"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// cpuTicks is utime+stime of process pid, in clock ticks (1/100 s).
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// TestThrottleCommandCosts is the measurement beside the throttle's slot
// documents (throttle.go): the embedded server's CPU per command of the
// shapes a slot and a counter design send, one client, 1,000 commands
// each, on a server of its own without the test kit's scan report (which
// asks SQLite for every query's plan). It asserts nothing: a measurement,
// run with THROTTLE_COSTS=1 (-v prints it).
func TestThrottleCommandCosts(t *testing.T) {
	if os.Getenv("THROTTLE_COSTS") == "" {
		t.Skip("a measurement: THROTTLE_COSTS=1 runs it")
	}
	ctx := context.Background()
	fp, mc := costServer(t)
	c := mc.Database("costs").Collection("throttle")
	const n = 1000
	costs := map[string]float64{}
	run := func(name string, f func(i int) error) {
		if err := f(-1); err != nil { // creates the collection, warms up
			t.Fatalf("%s: %v", name, err)
		}
		t0 := cpuTicks(t, fp.Pid())
		for i := range n {
			if err := f(i); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		costs[name] = float64(cpuTicks(t, fp.Pid())-t0) * 1e4 / n // µs
		t.Logf("%-44s %5.0f µs", name, costs[name])
	}
	id := func(p string, i int) string { return p + strconv.Itoa(i) }
	inc := func(d int) bson.D { return bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: d}}}} }
	below := func(k string) bson.D {
		return bson.D{{Key: "_id", Value: k}, {Key: "n", Value: bson.D{{Key: "$lt", Value: 1 << 30}}}}
	}
	in := func(ids ...string) bson.D { return bson.D{{Key: "$in", Value: ids}} }

	run("insertOne (a slot)", func(i int) error {
		_, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: id("a", i)}, {Key: "t", Value: "x"}})
		return err
	})
	run("insertMany of 2 (two first slots)", func(i int) error {
		_, err := c.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: id("b", i)}, {Key: "t", Value: "x"}}, bson.D{{Key: "_id", Value: id("c", i)}, {Key: "t", Value: "x"}}},
			options.InsertMany().SetOrdered(false))
		return err
	})
	run("deleteMany of 2 by _id $in, t $in", func(i int) error {
		_, err := c.DeleteMany(ctx, bson.D{{Key: "_id", Value: in(id("b", i), id("c", i))}, {Key: "t", Value: in("x")}})
		return err
	})
	run("findOne by _id (a state)", func(i int) error {
		err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "a1"}}).Err()
		return err
	})
	run("findOneAndUpdate {_id, n<max} $inc upsert", func(i int) error {
		return c.FindOneAndUpdate(ctx, below("k"), inc(1), options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Err()
	})
	run("updateOne {_id} $inc", func(int) error {
		_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k"}}, inc(1))
		return err
	})
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "l"}, {Key: "n", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	run("updateMany {_id $in 2} $inc -1", func(int) error {
		_, err := c.UpdateMany(ctx, bson.D{{Key: "_id", Value: in("k", "l")}}, inc(-1))
		return err
	})
	t.Logf("a sign-in's two keys, admitted and given back: slots %.0f µs (insertMany, deleteMany), counters %.0f µs (2 findOneAndUpdate, updateMany)",
		costs["insertMany of 2 (two first slots)"]+costs["deleteMany of 2 by _id $in, t $in"],
		2*costs["findOneAndUpdate {_id, n<max} $inc upsert"]+costs["updateMany {_id $in 2} $inc -1"])
}

// costServer starts an embedded server of a measurement's own, without
// the test kit's scan report (which asks SQLite for every query's plan),
// and a client of it; both end with the test.
func costServer(t *testing.T) (*embedded.FerretDBProc, *mongo.Client) {
	t.Helper()
	fp, err := embedded.StartFerretDB(context.Background(), embedded.FerretDBOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fp.Stop)
	mc, err := mongo.Connect(options.Client().ApplyURI(fp.URI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	return fp, mc
}
