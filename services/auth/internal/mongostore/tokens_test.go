package mongostore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
)

// A token is taken once however many uses race, on the embedded server
// too (whose find-and-delete is not atomic); a wrong purpose and an
// expired token take nothing.
func TestTokenTakenOnceUnderConcurrency(t *testing.T) {
	st := mongostore.NewTokens(newDB(t))
	ctx := context.Background()
	now := time.Now().UTC()
	for round := range 10 {
		id := "tok-" + string(rune('a'+round))
		if err := st.Create(ctx, account.Token{ID: id, Purpose: "verify", UserID: "u1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Take(ctx, id, "reset", now); !errors.Is(err, account.ErrInvalidToken) {
			t.Fatalf("another purpose: %v, want ErrInvalidToken", err)
		}
		var won atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				tok, err := st.Take(ctx, id, "verify", now)
				switch {
				case err == nil && tok.UserID == "u1":
					won.Add(1)
				case errors.Is(err, account.ErrInvalidToken):
				default:
					t.Errorf("take: %+v, %v", tok, err)
				}
			})
		}
		wg.Wait()
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d: %d of 20 concurrent uses took the token, want 1", round, n)
		}
	}
	if err := st.Create(ctx, account.Token{ID: "old", Purpose: "verify", CreatedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Take(ctx, "old", "verify", now); !errors.Is(err, account.ErrInvalidToken) {
		t.Fatalf("expired: %v, want ErrInvalidToken", err)
	}
}
