package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
	"github.com/go-webauthn/webauthn/webauthn"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestLockMethodsOneHolder: 200 concurrent takers of one user's removal
// lock, each with its own holder id, get it exactly once between them (the
// conditional find-and-modify is atomic); it is released only by its
// holder, taken again once released or once its lease ended, and an
// unknown user is ErrUserNotFound.
func TestLockMethodsOneHolder(t *testing.T) {
	db := newDB(t)
	users := mongostore.NewUsers(db)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	u, err := users.Create(ctx, account.User{Email: "lock@example.com", FullName: "L", Role: "user", CreatedAt: now, UpdatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	const callers = 200
	var won atomic.Int32
	var winner atomic.Value
	race(func(i int) {
		holder := fmt.Sprintf("h%03d", i)
		ok, err := users.LockMethods(ctx, u.ID, holder, now, now.Add(time.Minute))
		if err != nil {
			t.Error(err)
			return
		}
		if ok {
			won.Add(1)
			winner.Store(holder)
		}
	})
	if n := won.Load(); n != 1 {
		t.Fatalf("%d of %d concurrent callers took the lock, want exactly 1", n, callers)
	}
	holder := winner.Load().(string)
	if err := users.UnlockMethods(ctx, u.ID, "not-the-holder"); err != nil {
		t.Fatal(err)
	}
	if ok, err := users.LockMethods(ctx, u.ID, "late", now.Add(time.Second), now.Add(time.Minute)); err != nil || ok {
		t.Fatalf("taken while held (after another's unlock): %v %v", ok, err)
	}
	if err := users.UnlockMethods(ctx, u.ID, holder); err != nil {
		t.Fatal(err)
	}
	if ok, err := users.LockMethods(ctx, u.ID, "next", now.Add(time.Second), now.Add(time.Second+10*time.Second)); err != nil || !ok {
		t.Fatalf("not taken once released: %v %v", ok, err)
	}
	// "next" died holding it: the lock is free once its lease ended.
	if ok, err := users.LockMethods(ctx, u.ID, "after", now.Add(5*time.Second), now.Add(time.Minute)); err != nil || ok {
		t.Fatalf("taken within the lease: %v %v", ok, err)
	}
	if ok, err := users.LockMethods(ctx, u.ID, "after", now.Add(11*time.Second), now.Add(time.Minute)); err != nil || !ok {
		t.Fatalf("not taken after the lease: %v %v", ok, err)
	}
	// The lock is not part of the user.
	if got, err := users.ByID(ctx, u.ID); err != nil || got.Email != "lock@example.com" {
		t.Fatalf("ByID with the lock held: %+v %v", got, err)
	}
	if _, err := users.LockMethods(ctx, "0123456789abcdef01234567", "h", now, now.Add(time.Minute)); !errors.Is(err, account.ErrUserNotFound) {
		t.Fatalf("an unknown user: %v", err)
	}
}

// methodsRig is the account service on the real stores, with passkeys and
// identities, for removals of ways to sign in: twice, as two replicas
// would run it (only the database's lock stands between them).
type methodsRig struct {
	db       *mongo.Database
	svc      [2]*account.Service
	ids      [2]*account.Identities
	users    *mongostore.Users
	passkeys *mongostore.Passkeys
	idStore  *mongostore.Identities
	n        atomic.Int64
}

func newMethodsRig(t *testing.T) *methodsRig {
	t.Helper()
	db := newDB(t)
	if err := mongostore.EnsureIdentityIndexes(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	r := &methodsRig{db: db, users: mongostore.NewUsers(db), passkeys: mongostore.NewPasskeys(db), idStore: mongostore.NewIdentities(db)}
	for i := range r.svc {
		r.svc[i] = account.NewService(r.users, mongostore.NewSessions(db), mongostore.NewThrottle(db), nil, nil, account.Config{},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := r.svc[i].SetPasskeys(r.passkeys, mongostore.NewTokens(db), account.PasskeyConfig{RPID: "localhost", Origins: []string{"http://localhost:8080"}}); err != nil {
			t.Fatal(err)
		}
		r.ids[i] = account.NewIdentities(r.svc[i], r.idStore)
	}
	return r
}

// user makes a user without a password, with identities and passkeys;
// it returns the user's id and the ids of both.
func (r *methodsRig) user(t *testing.T, identities, passkeys int) (string, []string, []string) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Millisecond)
	k := r.n.Add(1)
	u, err := r.users.Create(ctx, account.User{Email: fmt.Sprintf("m%d@example.com", k), FullName: "M", Role: "user", CreatedAt: at, UpdatedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	var idIDs, pkIDs []string
	for i := range identities {
		id, err := r.idStore.Create(ctx, account.Identity{UserID: u.ID, Provider: "corp", Issuer: "https://id.example",
			Subject: fmt.Sprintf("s%d-%d", k, i), CreatedAt: at, LastUsedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		idIDs = append(idIDs, id.ID)
	}
	for i := range passkeys {
		cred := webauthn.Credential{ID: fmt.Appendf(nil, "cred-%d-%d", k, i), PublicKey: []byte("cose key"), AttestationFormat: "none",
			Authenticator: webauthn.Authenticator{AAGUID: make([]byte, 16)}}
		p := account.Passkey{ID: account.PasskeyID(cred.ID), UserID: u.ID, Name: "P", Credential: cred, CreatedAt: at}
		if err := r.passkeys.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		pkIDs = append(pkIDs, p.ID)
	}
	return u.ID, idIDs, pkIDs
}

// left counts the user's ways to sign in in the stores.
func (r *methodsRig) left(t *testing.T, userID string) int {
	t.Helper()
	ids, err := r.idStore.ListByUser(context.Background(), userID)
	if err != nil {
		t.Fatal(err)
	}
	pks, err := r.passkeys.ListByUser(context.Background(), userID)
	if err != nil {
		t.Fatal(err)
	}
	return len(ids) + len(pks)
}

// TestLastSignInMethodUnderConcurrency: an account with exactly one
// linked identity and one passkey (no password), whose identity is
// unlinked while its passkey is deleted, at once: one removal passes, the
// other is refused (ErrLastSignInMethod), and one way in is left. Repeated,
// alternating which starts first, on one replica and on two.
func TestLastSignInMethodUnderConcurrency(t *testing.T) {
	r := newMethodsRig(t)
	ctx := context.Background()
	for round := range 20 {
		uid, ids, pks := r.user(t, 1, 1)
		me := account.Caller{UserID: uid}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		other := round / 2 % 2 // the passkey's replica: the same, or the other
		wg.Go(func() { <-start; errs[0] = r.ids[0].Unlink(ctx, me, ids[0]) })
		wg.Go(func() { <-start; errs[1] = r.svc[other].RemovePasskey(ctx, me, pks[0]) })
		if round%2 == 1 {
			time.Sleep(time.Millisecond)
		}
		close(start)
		wg.Wait()
		ok, last := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, account.ErrLastSignInMethod):
				last++
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if ok != 1 || last != 1 {
			t.Fatalf("round %d: unlink %v, passkey delete %v: want one removed and one ErrLastSignInMethod", round, errs[0], errs[1])
		}
		if n := r.left(t, uid); n != 1 {
			t.Fatalf("round %d: %d ways to sign in left, want 1", round, n)
		}
	}
	// With a password, both go: the password is a way in.
	uid, ids, pks := r.user(t, 1, 1)
	h := "$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"
	if _, err := r.users.Update(ctx, uid, account.UserPatch{PasswordHash: &h}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := r.ids[0].Unlink(ctx, account.Caller{UserID: uid}, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := r.svc[1].RemovePasskey(ctx, account.Caller{UserID: uid}, pks[0]); err != nil {
		t.Fatal(err)
	}
}

// TestLastSignInMethod200Removals: 200 concurrent removals of every way
// into one account (an identity and 199 passkeys, no password), spread
// over two replicas, leave at least one; those that did not remove were
// refused as the last way in or told to try again, never anything else.
func TestLastSignInMethod200Removals(t *testing.T) {
	r := newMethodsRig(t)
	ctx := context.Background()
	uid, ids, pks := r.user(t, 1, 199)
	me := account.Caller{UserID: uid}
	var removed, last, busy atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	remove := func(f func() error) {
		wg.Go(func() {
			<-start
			switch err := f(); {
			case err == nil:
				removed.Add(1)
			case errors.Is(err, account.ErrLastSignInMethod):
				last.Add(1)
			case errors.Is(err, account.ErrMethodsBusy):
				busy.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	remove(func() error { return r.ids[0].Unlink(ctx, me, ids[0]) })
	for i, id := range pks {
		remove(func() error { return r.svc[i%2].RemovePasskey(ctx, me, id) })
	}
	close(start)
	wg.Wait()
	left := r.left(t, uid)
	t.Logf("removed %d, refused as the last %d, busy %d, left %d", removed.Load(), last.Load(), busy.Load(), left)
	if left < 1 {
		t.Fatalf("200 concurrent removals left no way to sign in (%d removed)", removed.Load())
	}
	if int(removed.Load())+left != 200 || removed.Load()+last.Load()+busy.Load() != 200 {
		t.Fatalf("removed %d, last %d, busy %d, left %d: the counts do not add up to 200", removed.Load(), last.Load(), busy.Load(), left)
	}
	if busy.Load() == 0 && (left != 1 || last.Load() != 1) {
		t.Fatalf("every removal ran: want exactly one left and one refused, got %d left, %d refused", left, last.Load())
	}
}
