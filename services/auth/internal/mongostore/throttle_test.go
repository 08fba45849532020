package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/mongostore"
	"go.mongodb.org/mongo-driver/v2/bson"
)

var throttleRule = account.ThrottleRule{Max: 5, Window: time.Hour, Lock: time.Minute, LockMax: time.Hour}

// admitMany runs n attempts of key at once (each in its own goroutine,
// released together) and returns the tickets admitted and how many were
// throttled; any other error fails the test.
func admitMany(t *testing.T, th *mongostore.Throttle, key string, n int, rule account.ThrottleRule, now time.Time) ([]account.Ticket, int) {
	t.Helper()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		tickets   []account.Ticket
		throttled atomic.Int32
		start     = make(chan struct{})
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tk, err := admitOne(context.Background(), th, key, rule, now)
			var te *account.ThrottledError
			switch {
			case err == nil:
				mu.Lock()
				tickets = append(tickets, tk)
				mu.Unlock()
			case errors.As(err, &te):
				if te.RetryAfter <= 0 {
					t.Errorf("throttled with Retry-After %v", te.RetryAfter)
				}
				throttled.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return tickets, int(throttled.Load())
}

// Attempts racing on one key on the test's server (the embedded FerretDB,
// or MONGO_URL's server): exactly the limit is admitted, however many race,
// because each admission is the insert of a slot with a unique _id.
func TestThrottleConcurrentFailures(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for round := range 3 { // three keys, three races: no lucky run
		key := "account:race" + string(rune('a'+round))
		tickets, throttled := admitMany(t, th, key, 40, throttleRule, now)
		if len(tickets) != throttleRule.Max || throttled != 40-throttleRule.Max {
			t.Fatalf("40 concurrent attempts, limit %d: %d admitted, %d throttled", throttleRule.Max, len(tickets), throttled)
		}
		// The key is now locked: the next attempt is refused at once.
		if _, err := admitOne(context.Background(), th, key, throttleRule, now.Add(time.Second)); !isThrottled(err) {
			t.Fatalf("attempt after the limit: %v, want throttled", err)
		}
	}
}

// The same for second-factor codes: SignInMFA admits each code check on the
// account key and the address key under the sign-in rules; codes racing for
// one account and one address are checked at most the limit of times.
func TestThrottleConcurrentTOTPCodes(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	now := time.Now().UTC().Truncate(time.Millisecond)
	address := account.ThrottleRule{Max: 7, Window: time.Hour, Lock: time.Minute, LockMax: time.Hour}
	var checked atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := th.Admit(context.Background(), now,
				account.ThrottleRequest{Key: "address:192.0.2.9", Rule: address},
				account.ThrottleRequest{Key: "account:totp", Rule: throttleRule})
			if err != nil {
				if !isThrottled(err) {
					t.Error(err)
				}
				return
			}
			checked.Add(1) // the code would be checked here, and be wrong
		}()
	}
	close(start)
	wg.Wait()
	if n := checked.Load(); n != int32(throttleRule.Max) {
		t.Fatalf("40 concurrent codes: %d checked, want exactly %d", n, throttleRule.Max)
	}
}

// admitOne admits one attempt of key.
func admitOne(ctx context.Context, th *mongostore.Throttle, key string, rule account.ThrottleRule, now time.Time) (account.Ticket, error) {
	tks, err := th.Admit(ctx, now, account.ThrottleRequest{Key: key, Rule: rule})
	if err != nil {
		return account.Ticket{}, err
	}
	if len(tks) != 1 {
		return account.Ticket{}, fmt.Errorf("%d tickets for one key", len(tks))
	}
	return tks[0], nil
}

// Two keys at once (a sign-in's account and address) are admitted all or
// none: a second key that refuses names itself and leaves no slot of the
// first taken, whether it was locked before the attempt or found full by
// it; two tickets go back with one Release.
func TestThrottleAdmitsAllOrNone(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour).Add(time.Minute)
	earlier := now.Add(-10 * time.Second) // same window, no longer in flight
	acct := account.ThrottleRequest{Key: "account:both", Rule: throttleRule}
	locked := account.ThrottleRequest{Key: "address:192.0.2.44", Rule: throttleRule}
	full := account.ThrottleRequest{Key: "address:192.0.2.46", Rule: account.ThrottleRule{Max: 5, Window: time.Hour}}
	for range throttleRule.Max {
		if _, err := admitOne(ctx, th, locked.Key, locked.Rule, earlier); err != nil {
			t.Fatal(err)
		}
		if _, err := admitOne(ctx, th, full.Key, full.Rule, earlier); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admitOne(ctx, th, locked.Key, locked.Rule, now); !isThrottled(err) {
		t.Fatalf("the sixth attempt: %v, want the address locked", err)
	}
	for _, second := range []account.ThrottleRequest{locked, full} {
		_, err := th.Admit(ctx, now, acct, second)
		var te *account.ThrottledError
		if !errors.As(err, &te) || te.Key != second.Key {
			t.Fatalf("account and %s: %v, want throttled naming it", second.Key, err)
		}
		// Nothing of the account was kept: its next ticket takes slot 1.
		tk, err := admitOne(ctx, th, acct.Key, acct.Rule, now)
		if err != nil || !tk.Fresh {
			t.Fatalf("the account after a refused pair with %s: %+v %v, want a fresh ticket", second.Key, tk, err)
		}
		if err := th.Release(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}

	// Both admitted, both given back at once: both fresh again.
	other := account.ThrottleRequest{Key: "address:192.0.2.45", Rule: throttleRule}
	tks, err := th.Admit(ctx, now, acct, other)
	if err != nil || len(tks) != 2 || tks[0].Key != acct.Key || tks[1].Key != other.Key {
		t.Fatalf("a free pair: %+v %v", tks, err)
	}
	if err := th.Release(ctx, tks...); err != nil {
		t.Fatal(err)
	}
	again, err := th.Admit(ctx, now, acct, other)
	if err != nil || !again[0].Fresh || !again[1].Fresh {
		t.Fatalf("after releasing both: %+v %v, want both fresh", again, err)
	}
}

func isThrottled(err error) bool {
	var te *account.ThrottledError
	return errors.As(err, &te)
}

func TestThrottleLifecycle(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	ctx := context.Background()
	rule := account.ThrottleRule{Max: 3, Window: time.Hour, Lock: time.Minute, LockMax: 3 * time.Minute}
	// Inside one window, so the test does not straddle two.
	now := time.Now().UTC().Truncate(time.Hour).Add(time.Minute)
	admit := func(key string, at time.Time) (account.Ticket, error) { return admitOne(ctx, th, key, rule, at) }

	// A released attempt (a success) does not count; a kept one does.
	for range 5 {
		tk, err := admit("k", now)
		if err != nil {
			t.Fatal(err)
		}
		if !tk.Fresh {
			t.Fatalf("ticket %+v: want fresh (nothing else counted)", tk)
		}
		if err := th.Release(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		tk, err := admit("k", now)
		if err != nil {
			t.Fatalf("failure %d: %v", i+1, err)
		}
		if tk.Fresh != (i == 0) {
			t.Fatalf("failure %d: fresh %v", i+1, tk.Fresh)
		}
	}
	// The fourth locks for Lock, doubling with each further lock.
	_, err := admit("k", now)
	var te *account.ThrottledError
	if !errors.As(err, &te) || te.RetryAfter != time.Minute {
		t.Fatalf("fourth attempt: %v, want a 1 min lock", err)
	}
	if _, err := admit("k", now.Add(59*time.Second)); !isThrottled(err) {
		t.Fatalf("during the lock: %v", err)
	}
	locks, err := th.Check(ctx, []string{"k", "other"})
	if err != nil || len(locks) != 1 || !locks["k"].Equal(now.Add(time.Minute)) {
		t.Fatalf("Check: %v %v", locks, err)
	}
	after := now.Add(time.Minute)
	for i := range 3 { // a new round of three
		if _, err := admit("k", after); err != nil {
			t.Fatalf("after the lock, attempt %d: %v", i+1, err)
		}
	}
	if _, err := admit("k", after); !errors.As(err, &te) || te.RetryAfter != 2*time.Minute {
		t.Fatalf("second lock: %v, want 2 min", err)
	}
	// Reset forgets attempts and locks.
	if err := th.Reset(ctx, "k", after); err != nil {
		t.Fatal(err)
	}
	if tk, err := admit("k", after); err != nil || !tk.Fresh {
		t.Fatalf("after Reset: %+v %v", tk, err)
	}
	// The next window starts again.
	for range 3 {
		_, _ = admit("w", now)
	}
	if _, err := admit("w", now.Add(rule.Window)); err != nil {
		t.Fatalf("next window: %v", err)
	}
	// Forget deletes ended windows and quiet keys.
	if err := th.Forget(ctx, now.Add(3*time.Hour), now.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	testkit.AllowScan(db.Name(), mongostore.ThrottleCollection, "{}")
	if n, _ := db.Collection(mongostore.ThrottleCollection).CountDocuments(ctx, bson.M{}); n != 0 {
		t.Fatalf("%d documents left after Forget", n)
	}
}

// A large limit (a global cap) is probed at random ordinals: never more
// than the limit is admitted.
func TestThrottleLargeLimitNeverExceeded(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	rule := account.ThrottleRule{Max: 100, Window: time.Hour}
	now := time.Now().UTC().Truncate(time.Hour).Add(time.Minute)
	admitted := 0
	for range 300 {
		if _, err := admitOne(context.Background(), th, "cap", rule, now); err == nil {
			admitted++
		} else if !isThrottled(err) {
			t.Fatal(err)
		}
	}
	if admitted > rule.Max || admitted < rule.Max/2 {
		t.Fatalf("%d admitted of a cap of %d", admitted, rule.Max)
	}
}

// Right answers at once: more attempts than the limit, each giving its slot
// back shortly after (a success), are all admitted in turn, and the key is
// not locked: attempts in flight are waited for, not counted as failures.
func TestThrottleConcurrentSuccessesWait(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	ctx := context.Background()
	now := time.Now().UTC()
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			tk, err := admitOne(ctx, th, "acct:ok", throttleRule, now)
			if err != nil {
				t.Errorf("admit: %v", err)
				return
			}
			admitted.Add(1)
			time.Sleep(100 * time.Millisecond) // the hash
			if err := th.Release(ctx, tk); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 12 {
		t.Fatalf("%d of 12 right answers admitted, want all", n)
	}
	if locks, err := th.Check(ctx, []string{"acct:ok"}); err != nil || locks["acct:ok"].After(now) {
		t.Fatalf("locked after right answers only: %v, %v", locks, err)
	}
}

// A lock that reaches into later windows holds there too, though an
// attempt reads no state while its first slot is free: the lock filled
// round 0 of those windows. After the lock, the round the state names
// opens, and a window after that starts afresh.
func TestThrottleLockReachesLaterWindows(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	ctx := context.Background()
	rule := account.ThrottleRule{Max: 2, Window: time.Minute, Lock: 150 * time.Second, LockMax: time.Hour}
	start := time.Now().UTC().Truncate(time.Hour).Add(10 * time.Second)
	for range rule.Max {
		if _, err := admitOne(ctx, th, "k", rule, start); err != nil {
			t.Fatal(err)
		}
	}
	now := start.Add(10 * time.Second) // the failures ended
	if _, err := admitOne(ctx, th, "k", rule, now); !isThrottled(err) {
		t.Fatalf("third attempt: %v, want a lock", err)
	}
	for _, at := range []time.Duration{time.Minute, 2 * time.Minute, 149 * time.Second} { // later windows, still locked
		var te *account.ThrottledError
		if _, err := admitOne(ctx, th, "k", rule, now.Add(at)); !errors.As(err, &te) || te.RetryAfter != 150*time.Second-at {
			t.Fatalf("%v into the lock: %v, want refused until its end", at, err)
		}
	}
	after := now.Add(150 * time.Second) // the lock's window: its round 1 opens
	for i := range rule.Max {
		if tk, err := admitOne(ctx, th, "k", rule, after); err != nil || tk.Fresh {
			t.Fatalf("after the lock, attempt %d: %+v %v", i+1, tk, err)
		}
	}
	if _, err := admitOne(ctx, th, "k", rule, after.Add(5*time.Second)); !isThrottled(err) {
		t.Fatalf("round 1 used up: %v, want a second lock", err)
	}
	if tk, err := admitOne(ctx, th, "k", rule, after.Add(time.Hour)); err != nil {
		t.Fatalf("an hour later: %+v %v", tk, err)
	}
}

// An attempt admitted long before a lock (still in flight, or its answer
// lost) that gives its slot back during the lock does not reopen the
// round: the lock stopped its slots from being given back.
func TestThrottleLateReleaseDuringLock(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour).Add(time.Minute)
	var straggler account.Ticket
	for i := range throttleRule.Max {
		tk, err := admitOne(ctx, th, "k", throttleRule, now)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			straggler = tk
		}
	}
	later := now.Add(10 * time.Second)
	if _, err := admitOne(ctx, th, "k", throttleRule, later); !isThrottled(err) {
		t.Fatalf("sixth attempt: %v, want a lock", err)
	}
	if err := th.Release(ctx, straggler); err != nil {
		t.Fatal(err)
	}
	if _, err := admitOne(ctx, th, "k", throttleRule, later.Add(time.Second)); !isThrottled(err) {
		t.Fatalf("after a late release during the lock: %v, want still throttled", err)
	}
}

// A ticket held across a Reset does not delete the slot a later attempt
// took: its slot went with the Reset, and a release names the holder.
func TestThrottleReleaseAfterReset(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour).Add(time.Minute)
	old, err := admitOne(ctx, th, "k", throttleRule, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := th.Reset(ctx, "k", now); err != nil {
		t.Fatal(err)
	}
	fresh, err := admitOne(ctx, th, "k", throttleRule, now)
	if err != nil || fresh.Slot != old.Slot {
		t.Fatalf("after Reset: %+v %v, want slot 1 again", fresh, err)
	}
	if err := th.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	if tk, err := admitOne(ctx, th, "k", throttleRule, now); err != nil || tk.Fresh {
		t.Fatalf("the new holder's slot 1 must still count: %+v %v", tk, err)
	}
}

// Succeed (a success that was not the account's only attempt) forgets the
// account's failures and lock and gives the address's ticket back in one
// delete, leaving the address's other attempts counted.
func TestThrottleSucceed(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour).Add(time.Minute)
	acct := account.ThrottleRequest{Key: "account:s", Rule: throttleRule}
	addr := account.ThrottleRequest{Key: "address:192.0.2.50", Rule: account.ThrottleRule{Max: 2, Window: time.Hour}}
	if _, err := th.Admit(ctx, now, acct, addr); err != nil { // a failure of both
		t.Fatal(err)
	}
	tks, err := th.Admit(ctx, now, acct, addr)
	if err != nil || tks[0].Fresh {
		t.Fatalf("second attempt: %+v %v, want admitted, not fresh", tks, err)
	}
	if err := th.Succeed(ctx, acct.Key, tks...); err != nil {
		t.Fatal(err)
	}
	if tk, err := admitOne(ctx, th, acct.Key, acct.Rule, now); err != nil || !tk.Fresh {
		t.Fatalf("the account after the success: %+v %v, want fresh", tk, err)
	}
	// The address kept its failure and got the success's slot back: one
	// more attempt, then full.
	if _, err := admitOne(ctx, th, addr.Key, addr.Rule, now); err != nil {
		t.Fatalf("the address's second slot: %v", err)
	}
	if _, err := admitOne(ctx, th, addr.Key, addr.Rule, now.Add(10*time.Second)); !isThrottled(err) {
		t.Fatalf("the address's third attempt: %v, want throttled (its failure still counts)", err)
	}
}

// A state document written by the store's earlier version (gen, round, no
// lock count) is taken over by the next lock.
func TestThrottleLocksOverAnOldState(t *testing.T) {
	db := newDB(t)
	th := mongostore.NewThrottle(db)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour).Add(time.Minute)
	if _, err := db.Collection(mongostore.ThrottleCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: "old"},
		{Key: "gen", Value: "0123"}, {Key: "round", Value: 2}, {Key: "lockedUntil", Value: now.Add(-time.Hour)}, {Key: "touched", Value: now.Add(-time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	for range throttleRule.Max {
		if _, err := admitOne(ctx, th, "old", throttleRule, now); err != nil {
			t.Fatal(err)
		}
	}
	var te *account.ThrottledError
	if _, err := admitOne(ctx, th, "old", throttleRule, now.Add(10*time.Second)); !errors.As(err, &te) || te.RetryAfter != time.Minute {
		t.Fatalf("the sixth attempt: %v, want a 1 min lock", err)
	}
	locks, err := th.Check(ctx, []string{"old"})
	if err != nil || !locks["old"].Equal(now.Add(10*time.Second+time.Minute)) {
		t.Fatalf("Check after the lock: %v %v", locks, err)
	}
}
