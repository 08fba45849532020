package mongostore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
)

// A token is taken once however many uses race (200 at once: one
// find-and-delete, atomic on MongoDB and on the embedded server through
// its patch's lock); a wrong purpose and an expired token take nothing.
func TestTokenTakenOnceUnderConcurrency(t *testing.T) {
	st := mongostore.NewTokens(newDB(t))
	ctx := context.Background()
	now := time.Now().UTC()
	for round := range 5 {
		id := "tok-" + string(rune('a'+round))
		if err := st.Create(ctx, account.Token{ID: id, Purpose: "verify", UserID: "u1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Take(ctx, id, "reset", now); !errors.Is(err, account.ErrInvalidToken) {
			t.Fatalf("another purpose: %v, want ErrInvalidToken", err)
		}
		var won atomic.Int32
		race(func(int) {
			tok, err := st.Take(ctx, id, "verify", now)
			switch {
			case err == nil && tok.UserID == "u1":
				won.Add(1)
			case errors.Is(err, account.ErrInvalidToken):
			default:
				t.Errorf("take: %+v, %v", tok, err)
			}
		})
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d: %d of 200 concurrent uses took the token, want 1", round, n)
		}
	}
	if err := st.Create(ctx, account.Token{ID: "old", Purpose: "verify", CreatedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Take(ctx, "old", "verify", now); !errors.Is(err, account.ErrInvalidToken) {
		t.Fatalf("expired: %v, want ErrInvalidToken", err)
	}
}

// A two-sided confirmation (an address change confirmed from the current
// and the new address) completes once however many confirmations race:
// 100 confirm each side at once, then every one of them tries to take the
// token; exactly one gets it, with both sides recorded. A wrong change
// nonce confirms nothing.
func TestTokenConfirmedOnceUnderConcurrency(t *testing.T) {
	st := mongostore.NewTokens(newDB(t))
	ctx := context.Background()
	now := time.Now().UTC()
	sides := []string{"current", "new"}
	for round := range 3 {
		id := "chg-" + string(rune('a'+round))
		if err := st.Put(ctx, account.Token{ID: id, Purpose: "email-change", UserID: "u1", Change: "n1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Confirm(ctx, id, "email-change", "stale", "current", now); !errors.Is(err, account.ErrInvalidToken) {
			t.Fatalf("wrong nonce: %v, want ErrInvalidToken", err)
		}
		if _, err := st.TakeConfirmed(ctx, id, "email-change", "n1", sides, now); !errors.Is(err, account.ErrInvalidToken) {
			t.Fatalf("nothing confirmed yet, taken: %v", err)
		}
		var won atomic.Int32
		race(func(i int) {
			if _, err := st.Confirm(ctx, id, "email-change", "n1", sides[i%2], now); err != nil && !errors.Is(err, account.ErrInvalidToken) {
				t.Errorf("confirm: %v", err)
				return
			}
			tok, err := st.TakeConfirmed(ctx, id, "email-change", "n1", sides, now)
			switch {
			case err == nil && len(tok.Confirmed) == 2:
				won.Add(1)
			case errors.Is(err, account.ErrInvalidToken):
			default:
				t.Errorf("take confirmed: %+v, %v", tok, err)
			}
		})
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d: %d of 200 concurrent confirmations completed the change, want 1", round, n)
		}
	}
}
