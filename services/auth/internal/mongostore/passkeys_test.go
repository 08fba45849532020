package mongostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
	"github.com/go-webauthn/webauthn/webauthn"
)

// The passkey store on the real server: the credential record round-trips,
// Used applies only over the sign count it read, and removal is per owner.
func TestPasskeys(t *testing.T) {
	db := newDB(t)
	s := mongostore.NewPasskeys(db)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Millisecond)
	cred := webauthn.Credential{ID: []byte{1, 2, 3}, PublicKey: []byte("cose key"), AttestationFormat: "none",
		Authenticator: webauthn.Authenticator{AAGUID: make([]byte, 16), SignCount: 4}}
	p := account.Passkey{ID: account.PasskeyID(cred.ID), UserID: "u1", Name: "Laptop", Credential: cred, CreatedAt: at}
	if err := s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, p); !errors.Is(err, account.ErrPasskeyExists) {
		t.Fatalf("second Create: %v", err)
	}
	got, err := s.ByID(ctx, p.ID)
	if err != nil || got.Name != "Laptop" || string(got.Credential.PublicKey) != "cose key" || got.Credential.Authenticator.SignCount != 4 ||
		!got.CreatedAt.Equal(at) || !got.LastUsedAt.IsZero() {
		t.Fatalf("ByID: %+v %v", got, err)
	}
	next := got.Credential
	next.Authenticator.SignCount = 5
	if err := s.Used(ctx, p.ID, 4, next, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// A second sign-in that read count 4 loses.
	if err := s.Used(ctx, p.ID, 4, next, at.Add(2*time.Second)); !errors.Is(err, account.ErrPasskeyMoved) {
		t.Fatalf("Used over a stale count: %v", err)
	}
	if err := s.Used(ctx, "nope", 0, next, at); !errors.Is(err, account.ErrPasskeyNotFound) {
		t.Fatalf("Used of an unknown passkey: %v", err)
	}
	if err := s.MarkCloned(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	other := p
	other.ID, other.UserID, other.CreatedAt = "other", "u2", at.Add(time.Minute)
	if err := s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListByUser(ctx, "u1")
	if err != nil || len(list) != 1 || list[0].Credential.Authenticator.SignCount != 5 || !list[0].LastUsedAt.Equal(at.Add(time.Second)) || !list[0].CloneWarning {
		t.Fatalf("ListByUser: %+v %v", list, err)
	}
	if err := s.Delete(ctx, "u2", p.ID); !errors.Is(err, account.ErrPasskeyNotFound) {
		t.Fatalf("another user's Delete: %v", err)
	}
	if err := s.Delete(ctx, "u1", p.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteByUser(ctx, "u2"); err != nil || n != 1 {
		t.Fatalf("DeleteByUser: %d %v", n, err)
	}
	if _, err := s.ByID(ctx, "other"); !errors.Is(err, account.ErrPasskeyNotFound) {
		t.Fatalf("after DeleteByUser: %v", err)
	}
}
