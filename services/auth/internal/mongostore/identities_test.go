package mongostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
)

// The identity store on the real server: a provider subject is linked
// once, found by issuer and subject only, listed per user and removed by
// its owner only.
func TestIdentities(t *testing.T) {
	db := newDB(t)
	if err := mongostore.EnsureIdentityIndexes(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	if err := mongostore.EnsureIdentityIndexes(context.Background(), db); err != nil {
		t.Fatalf("second EnsureIdentityIndexes: %v", err)
	}
	s := mongostore.NewIdentities(db)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Millisecond)
	a, err := s.Create(ctx, account.Identity{UserID: "u1", Provider: "corp", Issuer: "https://id.example", Subject: "42", Email: "a@example.com", CreatedAt: at, LastUsedAt: at})
	if err != nil || a.ID == "" {
		t.Fatalf("Create: %+v %v", a, err)
	}
	if _, err := s.Create(ctx, account.Identity{UserID: "u2", Provider: "corp", Issuer: "https://id.example", Subject: "42"}); !errors.Is(err, account.ErrIdentityTaken) {
		t.Fatalf("the same subject for another user: %v, want ErrIdentityTaken", err)
	}
	// The same subject at another issuer is another person.
	b, err := s.Create(ctx, account.Identity{UserID: "u1", Provider: "github", Issuer: "https://github.com", Subject: "42", CreatedAt: at.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.BySubject(ctx, "https://id.example", "42")
	if err != nil || got.UserID != "u1" || got.Email != "a@example.com" || !got.CreatedAt.Equal(at) {
		t.Fatalf("BySubject: %+v %v", got, err)
	}
	if _, err := s.BySubject(ctx, "https://id.example", "43"); !errors.Is(err, account.ErrIdentityNotFound) {
		t.Fatalf("unknown subject: %v", err)
	}
	if err := s.Used(ctx, a.ID, "new@example.com", at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListByUser(ctx, "u1")
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID || list[0].Email != "new@example.com" || !list[0].LastUsedAt.Equal(at.Add(time.Minute)) {
		t.Fatalf("ListByUser: %+v %v", list, err)
	}
	if err := s.Delete(ctx, "u2", a.ID); !errors.Is(err, account.ErrIdentityNotFound) {
		t.Fatalf("another user's delete: %v", err)
	}
	if err := s.Delete(ctx, "u1", a.ID); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.ListByUser(ctx, "u1"); len(list) != 1 {
		t.Fatalf("after Delete: %+v", list)
	}

}

// Invitations: one per provider and address, listed as pending, removed
// like identities.
func TestIdentityInvitations(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	if err := mongostore.EnsureIdentityIndexes(ctx, db); err != nil {
		t.Fatal(err)
	}
	s := mongostore.NewIdentities(db)
	at := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := s.Create(ctx, account.Identity{UserID: "u1", Provider: "github", Issuer: "https://github.com", Subject: "42", CreatedAt: at.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	inv, err := s.Invite(ctx, account.Identity{UserID: "u1", Provider: "corp", Email: "a@example.com", CreatedAt: at})
	if err != nil || !inv.Pending {
		t.Fatalf("Invite: %+v %v", inv, err)
	}
	if _, err := s.Invite(ctx, account.Identity{UserID: "u2", Provider: "corp", Email: "a@example.com"}); !errors.Is(err, account.ErrIdentityTaken) {
		t.Fatalf("second invitation: %v", err)
	}
	if got, err := s.Invitation(ctx, "corp", "a@example.com"); err != nil || got.UserID != "u1" || !got.Pending {
		t.Fatalf("Invitation: %+v %v", got, err)
	}
	if _, err := s.Invitation(ctx, "github", "a@example.com"); !errors.Is(err, account.ErrIdentityNotFound) {
		t.Fatalf("another provider's invitation: %v", err)
	}
	if list, _ := s.ListByUser(ctx, "u1"); len(list) != 2 || !list[0].Pending || list[1].Pending {
		t.Fatalf("with the invitation: %+v", list)
	}
	if err := s.Delete(ctx, "u1", inv.ID); err != nil {
		t.Fatal(err)
	}
}
