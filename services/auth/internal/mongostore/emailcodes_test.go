package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
)

func putCode(t *testing.T, st *mongostore.EmailCodes, id, nonce, link string, now time.Time) {
	t.Helper()
	if err := st.Put(context.Background(), account.EmailCode{ID: id, Purpose: account.PurposeSignInCode, Email: "a@example.com",
		CodeHash: "h", LinkHash: link, Nonce: nonce, CreatedAt: now, ExpiresAt: now.Add(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
}

// 200 concurrent tries of one request: exactly MaxCodeTries are counted
// (each sees a distinct count), the others find it void; then neither a
// try nor the link takes it.
func TestEmailCodeTriesBounded(t *testing.T) {
	st := mongostore.NewEmailCodes(newDB(t))
	ctx := context.Background()
	now := time.Now().UTC()
	putCode(t, st, "signin-email:a", "n1", "L", now)
	var mu sync.Mutex
	seen := map[int]bool{}
	var void atomic.Int32
	race(func(int) {
		c, err := st.Try(ctx, "signin-email:a", account.PurposeSignInCode, account.MaxCodeTries, now)
		switch {
		case err == nil:
			mu.Lock()
			if seen[c.Tries] {
				t.Errorf("two tries saw count %d", c.Tries)
			}
			seen[c.Tries] = true
			mu.Unlock()
		case errors.Is(err, account.ErrEmailCodeVoid):
			void.Add(1)
		default:
			t.Errorf("try: %v", err)
		}
	})
	if len(seen) != account.MaxCodeTries || void.Load() != int32(200-account.MaxCodeTries) {
		t.Fatalf("%d tries counted (%v), %d void; want %d and %d", len(seen), seen, void.Load(), account.MaxCodeTries, 200-account.MaxCodeTries)
	}
	if _, err := st.TakeLink(ctx, "signin-email:a", "L", account.MaxCodeTries, now); !errors.Is(err, account.ErrEmailCodeVoid) {
		t.Fatalf("the link of a request tried %d times: %v, want void", account.MaxCodeTries, err)
	}
}

// Of 200 concurrent uses of one request (100 by its code's nonce, 100 by
// its link), exactly one takes it; 5 rounds.
func TestEmailCodeTakenOnce(t *testing.T) {
	st := mongostore.NewEmailCodes(newDB(t))
	ctx := context.Background()
	now := time.Now().UTC()
	for round := range 5 {
		id := fmt.Sprintf("signin-email:%d", round)
		putCode(t, st, id, "n1", "L", now)
		var won atomic.Int32
		race(func(i int) {
			var c account.EmailCode
			var err error
			if i%2 == 0 {
				c, err = st.Take(ctx, id, account.PurposeSignInCode, "n1", now)
			} else {
				c, err = st.TakeLink(ctx, id, "L", account.MaxCodeTries, now)
			}
			switch {
			case err == nil && c.Email == "a@example.com":
				won.Add(1)
			case errors.Is(err, account.ErrEmailCodeVoid):
			default:
				t.Errorf("take: %+v, %v", c, err)
			}
		})
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d: %d of 200 concurrent uses took the request, want 1", round, n)
		}
	}
}

// The refusals of the store: a replaced request's nonce and link, an
// expired request, another purpose.
func TestEmailCodeRefusals(t *testing.T) {
	st := mongostore.NewEmailCodes(newDB(t))
	ctx := context.Background()
	now := time.Now().UTC()
	putCode(t, st, "signin-email:r", "old", "L1", now)
	putCode(t, st, "signin-email:r", "new", "L2", now) // a newer request
	if _, err := st.Take(ctx, "signin-email:r", account.PurposeSignInCode, "old", now); !errors.Is(err, account.ErrEmailCodeVoid) {
		t.Fatalf("replaced nonce: %v", err)
	}
	if _, err := st.TakeLink(ctx, "signin-email:r", "L1", account.MaxCodeTries, now); !errors.Is(err, account.ErrEmailCodeVoid) {
		t.Fatalf("replaced link: %v", err)
	}
	if _, err := st.Try(ctx, "signin-email:r", account.PurposePasswordCode, account.MaxCodeTries, now); !errors.Is(err, account.ErrEmailCodeVoid) {
		t.Fatalf("another purpose: %v", err)
	}
	if c, err := st.Try(ctx, "signin-email:r", account.PurposeSignInCode, account.MaxCodeTries, now); err != nil || c.Nonce != "new" || c.Tries != 1 {
		t.Fatalf("try: %+v %v", c, err)
	}
	later := now.Add(11 * time.Minute)
	if _, err := st.Try(ctx, "signin-email:r", account.PurposeSignInCode, account.MaxCodeTries, later); !errors.Is(err, account.ErrEmailCodeVoid) {
		t.Fatalf("expired try: %v", err)
	}
	if _, err := st.Take(ctx, "signin-email:r", account.PurposeSignInCode, "new", later); !errors.Is(err, account.ErrEmailCodeVoid) {
		t.Fatalf("expired take: %v", err)
	}
	if _, err := st.Take(ctx, "signin-email:r", account.PurposeSignInCode, "new", now); err != nil {
		t.Fatalf("take: %v", err)
	}
}
