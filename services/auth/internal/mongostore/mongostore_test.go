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
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func newDB(t *testing.T) *mongo.Database {
	t.Helper()
	s := testkit.Get(t, testkit.Mongo)
	db := s.Mongo.Database(s.Database(t))
	ctx := context.Background()
	// Twice: start-up on an existing database must succeed.
	for i := 0; i < 2; i++ {
		if err := mongostore.EnsureIndexes(ctx, db); err != nil {
			t.Fatalf("EnsureIndexes #%d: %v", i+1, err)
		}
	}
	return db
}

func TestUsersUniqueEmail(t *testing.T) {
	db := newDB(t)
	users := mongostore.NewUsers(db)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	a, err := users.Create(ctx, account.User{Email: "A@Example.com", FullName: "A", EDV: "1", Role: "user", PasswordHash: "h", CreatedAt: now, UpdatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := users.Create(ctx, account.User{Email: "a@example.COM", FullName: "A2", EDV: "1", Role: "user", PasswordHash: "h"}); !errors.Is(err, account.ErrEmailTaken) {
		t.Fatalf("duplicate insert: %v, want ErrEmailTaken", err)
	}
	b, err := users.Create(ctx, account.User{Email: "b@example.com", FullName: "B", EDV: "1", Role: "user", PasswordHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	taken := "A@EXAMPLE.COM"
	if _, err := users.Update(ctx, b.ID, account.UserPatch{Email: &taken}, now); !errors.Is(err, account.ErrEmailTaken) {
		t.Fatalf("duplicate update: %v, want ErrEmailTaken", err)
	}
	got, err := users.ByEmail(ctx, "a@EXAMPLE.com")
	if err != nil || got.ID != a.ID || !got.CreatedAt.Equal(now) {
		t.Fatalf("ByEmail: %+v %v", got, err)
	}
	if _, err := users.ByID(ctx, "zz"); !errors.Is(err, account.ErrUserNotFound) {
		t.Fatalf("malformed id: %v", err)
	}
	// Many concurrent creations of one e-mail: exactly one wins.
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := users.Create(ctx, account.User{Email: "race@example.com", FullName: "R", EDV: "1", Role: "user", PasswordHash: "h"})
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, account.ErrEmailTaken) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d concurrent creations succeeded, want 1", wins)
	}
}

func TestSessionsDeleteExpired(t *testing.T) {
	db := newDB(t)
	s := mongostore.NewSessions(db)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	mk := func(id string, lastSeen, expires time.Time) {
		if err := s.Create(ctx, account.Session{ID: id, PublicID: "p" + id, UserID: "u", CreatedAt: now, LastSeenAt: lastSeen, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	mk("live", now, now.Add(time.Hour))
	mk("abs", now, now.Add(-time.Second))
	mk("idle", now.Add(-2*time.Hour), now.Add(time.Hour))
	if live, err := s.CountLive(ctx, now, now.Add(-time.Hour)); err != nil || live != 1 {
		t.Fatalf("CountLive = %d, %v; want 1", live, err)
	}
	n, err := s.DeleteExpired(ctx, now, now.Add(-time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("DeleteExpired = %d, %v; want 2", n, err)
	}
	if _, err := s.ByID(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	ids, err := s.DeleteByUser(ctx, "u", "live")
	if err != nil || len(ids) != 0 {
		t.Fatalf("DeleteByUser except live: %v %v", ids, err)
	}
	ids, _ = s.DeleteByUser(ctx, "u", "")
	if len(ids) != 1 || ids[0] != "live" {
		t.Fatalf("DeleteByUser: %v", ids)
	}
}
