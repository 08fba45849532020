package mongostore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Several replicas seeding the apps at once end up with one record per name
// and agree on the ids.
func TestEnsureAppsConcurrently(t *testing.T) {
	s := testkit.Get(t)
	ctx := context.Background()
	db := s.Mongo.Database(s.Database(t))
	names := logs.DefaultAppNames("ACME")
	const replicas = 4
	results := make([][]logs.App, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		st := mongostore.New(db)
		if err := st.EnsureIndexes(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			apps, err := st.EnsureApps(ctx, names)
			if err != nil {
				t.Error(err)
			}
			results[i] = apps
		})
	}
	wg.Wait()
	n, err := db.Collection(mongostore.AppsCollection).CountDocuments(ctx, bson.M{})
	if err != nil || n != int64(len(names)) {
		t.Fatalf("%d app records (%v), want %d", n, err, len(names))
	}
	for i := 1; i < replicas; i++ {
		for j := range names {
			if results[i][j] != results[0][j] || results[i][j].Name != names[j] {
				t.Fatalf("replica %d app %d: %+v vs %+v", i, j, results[i][j], results[0][j])
			}
		}
	}
}

func TestInsertDuplicateAndGet(t *testing.T) {
	s := testkit.Get(t)
	ctx := context.Background()
	st := mongostore.New(s.Mongo.Database(s.Database(t)))
	if err := st.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := st.Insert(ctx, logs.Record{AppID: "a", App: "LOGGING", Type: "log", LogBody: "x", MsgID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Insert(ctx, logs.Record{AppID: "a", Type: "log", LogBody: "y", MsgID: "m1"}); err != logs.ErrDuplicate {
		t.Fatalf("second insert: %v, want ErrDuplicate", err)
	}
	per, err := st.InsertBatch(ctx, []logs.Record{{Type: "log", LogBody: "z", MsgID: "m1"}, {Type: "log", LogBody: "w", MsgID: "m2"}})
	if err != nil || per[0] != logs.ErrDuplicate || per[1] != nil {
		t.Fatalf("batch: %v %v", per, err)
	}
	if got, err := st.Get(ctx, r.ID); err != nil || got.LogBody != "x" {
		t.Fatalf("get: %+v %v", got, err)
	}
	for _, id := range []string{"nothex", "0123456789abcdef01234567", ""} {
		if _, err := st.Get(ctx, id); err != logs.ErrNotFound {
			t.Fatalf("get %q: %v, want ErrNotFound", id, err)
		}
	}
}
