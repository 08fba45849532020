package mongostore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// finds records the filters of the find commands a client sends.
type finds struct {
	mu      sync.Mutex
	filters []bson.Raw
}

func (f *finds) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "find" {
			return
		}
		filter, _ := e.Command.Lookup("filter").DocumentOK()
		f.mu.Lock()
		f.filters = append(f.filters, bson.Raw(filter))
		f.mu.Unlock()
	}}
}

func (f *finds) take() []bson.Raw {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.filters
	f.filters = nil
	return out
}

// A sign-in's lookup by address reads by _id only, known address or not:
// FerretDB on SQLite uses no other index, and a query on emailLower would
// read every user.
func TestByEmailReadsByIDOnly(t *testing.T) {
	kit := testkit.Get(t)
	var f finds
	client, err := mongo.Connect(options.Client().ApplyURI(kit.MongoURL).SetMonitor(f.monitor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	db := client.Database(kit.Database(t))
	ctx := context.Background()
	if err := mongostore.EnsureIndexes(ctx, db); err != nil {
		t.Fatal(err)
	}
	users := mongostore.NewUsers(db)
	a, err := users.Create(ctx, account.User{Email: "Ann@Example.com", FullName: "A", EDV: "1", Role: "user", PasswordHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	f.take()
	got, err := users.ByEmail(ctx, "ann@EXAMPLE.com")
	if err != nil || got.ID != a.ID {
		t.Fatalf("ByEmail: %+v %v", got, err)
	}
	if _, err := users.ByEmail(ctx, "nobody@example.com"); !errors.Is(err, account.ErrUserNotFound) {
		t.Fatalf("unknown address: %v", err)
	}
	filters := f.take()
	if len(filters) != 3 {
		t.Fatalf("%d finds for two lookups, want 3 (key and user, then the missing key)", len(filters))
	}
	for _, fl := range filters {
		elems, _ := fl.Elements()
		if len(elems) != 1 || elems[0].Key() != "_id" {
			t.Fatalf("a lookup by address sent the filter %s; only {_id: ...} uses FerretDB's index", fl)
		}
	}
}

func TestEmailKeysFollowChanges(t *testing.T) {
	db := newDB(t)
	users := mongostore.NewUsers(db)
	ctx := context.Background()
	now := time.Now().UTC()
	users.KeyGrace = time.Hour
	mk := func(email string) account.User {
		t.Helper()
		u, err := users.Create(ctx, account.User{Email: email, FullName: "x", EDV: "1", Role: "user", PasswordHash: "h", CreatedAt: now, UpdatedAt: now})
		if err != nil {
			t.Fatalf("create %s: %v", email, err)
		}
		return u
	}
	find := func(email string) (string, error) {
		u, err := users.ByEmail(ctx, email)
		return u.ID, err
	}
	a, b := mk("a@example.com"), mk("b@example.com")

	// An address change moves the key: the old address is free at once.
	newA := "A2@example.com"
	if _, err := users.Update(ctx, a.ID, account.UserPatch{Email: &newA}, now); err != nil {
		t.Fatal(err)
	}
	if id, err := find("a2@example.com"); err != nil || id != a.ID {
		t.Fatalf("new address: %s %v", id, err)
	}
	if _, err := find("a@example.com"); !errors.Is(err, account.ErrUserNotFound) {
		t.Fatalf("old address still finds: %v", err)
	}
	c := mk("a@example.com")
	// A change to a taken address is refused and changes nothing.
	taken := "B@EXAMPLE.com"
	if _, err := users.Update(ctx, c.ID, account.UserPatch{Email: &taken}, now); !errors.Is(err, account.ErrEmailTaken) {
		t.Fatalf("change to a taken address: %v", err)
	}
	for email, want := range map[string]string{"a@example.com": c.ID, "b@example.com": b.ID} {
		if id, err := find(email); err != nil || id != want {
			t.Fatalf("%s after the refused change: %s %v, want %s", email, id, err, want)
		}
	}
	// A change of case only keeps the key.
	upper := "B@Example.COM"
	if _, err := users.Update(ctx, b.ID, account.UserPatch{Email: &upper}, now); err != nil {
		t.Fatal(err)
	}
	if id, err := find("b@example.com"); err != nil || id != b.ID {
		t.Fatalf("after a change of case: %s %v", id, err)
	}

	// Deleting the user frees the address.
	if err := users.Delete(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := find("a@example.com"); !errors.Is(err, account.ErrUserNotFound) {
		t.Fatalf("deleted user's address: %v", err)
	}
	mk("a@example.com")

	// A key left behind (the user removed without it, as a crash between
	// the two deletes would) neither finds anyone nor blocks the address.
	d := mk("d@example.com")
	oid, _ := bson.ObjectIDFromHex(d.ID)
	if _, err := db.Collection(mongostore.UsersCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: oid}}); err != nil {
		t.Fatal(err)
	}
	if _, err := find("d@example.com"); !errors.Is(err, account.ErrUserNotFound) {
		t.Fatalf("a stale key found %v", err)
	}
	// Within KeyGrace its holder may still be on its way: the address is
	// taken; after it, the key is taken over.
	if _, err := users.Create(ctx, account.User{Email: "d@example.com", FullName: "x", EDV: "1", Role: "user", PasswordHash: "h"}); !errors.Is(err, account.ErrEmailTaken) {
		t.Fatalf("a fresh key without its user: %v, want ErrEmailTaken", err)
	}
	users.KeyGrace = 0
	if d2 := mk("d@example.com"); d2.ID == d.ID {
		t.Fatal("same id")
	}
}

// Users stored without key documents (by a version that had none) are found
// once BackfillEmails ran, as Run does at start-up.
func TestBackfillEmails(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	oid := bson.NewObjectID()
	if _, err := db.Collection(mongostore.UsersCollection).InsertOne(ctx, bson.D{
		{Key: "_id", Value: oid}, {Key: "email", Value: "Old@Example.com"}, {Key: "emailLower", Value: "old@example.com"},
		{Key: "fullName", Value: "Old"}, {Key: "roleName", Value: "user"}, {Key: "passwordHash", Value: "h"},
	}); err != nil {
		t.Fatal(err)
	}
	users := mongostore.NewUsers(db)
	if _, err := users.Create(ctx, account.User{Email: "new@example.com", FullName: "N", EDV: "1", Role: "user", PasswordHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := users.ByEmail(ctx, "old@example.com"); !errors.Is(err, account.ErrUserNotFound) {
		t.Fatalf("before the backfill: %v", err)
	}
	for i, want := range []int{1, 0} { // twice: the second finds nothing to do
		n, err := users.BackfillEmails(ctx)
		if err != nil || n != want {
			t.Fatalf("backfill #%d: %d %v, want %d", i+1, n, err, want)
		}
	}
	if u, err := users.ByEmail(ctx, "OLD@example.com"); err != nil || u.ID != oid.Hex() {
		t.Fatalf("after the backfill: %+v %v", u, err)
	}
	// The backfilled address is claimed like any other.
	if _, err := users.Create(ctx, account.User{Email: "old@example.com", FullName: "X", EDV: "1", Role: "user", PasswordHash: "h"}); !errors.Is(err, account.ErrEmailTaken) {
		t.Fatalf("taking a backfilled address: %v", err)
	}
}

// Concurrent sign-ups with one address: one user, and the address finds it.
func TestConcurrentClaimsOfOneAddress(t *testing.T) {
	db := newDB(t)
	users := mongostore.NewUsers(db)
	ctx := context.Background()
	for round := range 5 {
		email := "race" + string(rune('a'+round)) + "@example.com"
		var mu sync.Mutex
		var won []string
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				u, err := users.Create(ctx, account.User{Email: email, FullName: "x", EDV: "1", Role: "user", PasswordHash: "h"})
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, u.ID)
					mu.Unlock()
				case !errors.Is(err, account.ErrEmailTaken):
					t.Errorf("create: %v", err)
				}
			})
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("%s: %d users created, want 1", email, len(won))
		}
		if u, err := users.ByEmail(ctx, email); err != nil || u.ID != won[0] {
			t.Fatalf("%s finds %+v %v, want %s", email, u, err, won[0])
		}
	}
}
