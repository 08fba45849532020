package e2e

// Hostile-input suite, throttles and expiries (issue 34, rows 3, 10 and
// 11): parallel password guesses against one account, an API key used
// past its expiry, and a flood of anonymous passkey ceremonies. Each test
// replays the attack through the gateway against the real processes.

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/scripts/stack"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// awayFromWindowEdge waits, if needed, so that the next few seconds do not
// cross the end of a throttle window of length w (windows are fixed
// intervals since the Unix epoch): the limit holds per window.
func awayFromWindowEdge(w time.Duration) {
	if left := w - time.Duration(time.Now().UnixNano()%int64(w)); left < 15*time.Second {
		time.Sleep(left + time.Second)
	}
}

// 40 wrong passwords for one account at once (limit 5): at most 5 are
// tried (401), every other one is refused before its hash (429 throttled
// with Retry-After), and then the right password is refused too while the
// account is locked.
func TestHostileParallelSignInGuesses(t *testing.T) {
	p, sec, _ := platform(t, nil) // AUTH_THROTTLE_ACCOUNT_MAX 5, window 15 min
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "victim@example.com", "password": "the right password", "fullName": "Victim", "edv": "V-1",
	})
	awayFromWindowEdge(15 * time.Minute)

	const n = 40
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
		start    = make(chan struct{})
	)
	for i := range n {
		c := newClient(t, p.GatewayURL)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			st, m, h := c.do("POST", "/signin", map[string]string{"email": "victim@example.com", "password": "wrong guess " + strconv.Itoa(i)})
			if st == 429 {
				if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || m["code"] != "throttled" {
					t.Errorf("429 without a Retry-After or code: %q %v", h.Get("Retry-After"), m)
				}
			}
			mu.Lock()
			statuses[st]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if statuses[401] > 5 || statuses[401] < 1 || statuses[401]+statuses[429] != n {
		t.Fatalf("40 parallel wrong passwords: %v, want at most 5 answered 401 and the rest 429", statuses)
	}
	// The limit is reached: the right password is refused as well.
	victim := newClient(t, p.GatewayURL)
	if st, m, _ := victim.do("POST", "/signin", map[string]string{"email": "victim@example.com", "password": "the right password"}); st != 429 || m["code"] != "throttled" {
		t.Fatalf("the right password while throttled: %d %v, want 429 throttled", st, m)
	}
}

// An API key that expires in about 2 s, used (and so cached by the
// gateway) just before its expiry, is refused right after it, however long
// the gateway's cache keeps answers.
func TestHostileAPIKeyExpiry(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"GATEWAY_SESSION_CACHE_TTL": "30s"})
	admin := newClient(t, p.GatewayURL)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	expires := time.Now().Add(2500 * time.Millisecond).UTC().Truncate(time.Millisecond)
	created := admin.mustStatus(201, "POST", "/me/api-keys", map[string]any{
		"name": "short-lived", "scopes": []string{"files:read"}, "expiresAt": expires.Format(time.RFC3339Nano),
	})
	key := "Bearer " + created["secret"].(string)
	wantKey(t, p.GatewayURL, key, "GET", "/files", nil, 200, "")
	if d := time.Until(expires) - 500*time.Millisecond; d > 0 {
		time.Sleep(d)
	}
	wantKey(t, p.GatewayURL, key, "GET", "/files", nil, 200, "") // cached now, until after the expiry
	time.Sleep(time.Until(expires) + 200*time.Millisecond)
	if st, m := keyDo(t, p.GatewayURL, key, "GET", "/files", nil); st != 401 {
		t.Fatalf("the key %v after its expiry: %d %v, want 401", time.Since(expires), st, m)
	}
}

// 200 anonymous passkey sign-in begins from one address: past the
// per-address limit (AUTH_CEREMONY_THROTTLE_ADDRESS_MAX, 20 a minute) the
// answer is 429 throttled with Retry-After, and the ceremonies stored stay
// bounded by the limit.
func TestHostileAnonymousCeremonyFlood(t *testing.T) {
	p, _, _ := platform(t, nil)
	count := storedTokens(t, p)
	before := count()
	awayFromWindowEdge(time.Minute)

	c := newClient(t, p.GatewayURL)
	statuses := map[int]int{}
	for range 200 {
		st, m, h := c.do("POST", "/signin/passkey/begin", nil)
		statuses[st]++
		if st == 429 {
			if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || m["code"] != "throttled" {
				t.Fatalf("429 without a Retry-After or code: %q %v", h.Get("Retry-After"), m)
			}
		}
	}
	if statuses[200] > 20 || statuses[200] < 1 || statuses[200]+statuses[429] != 200 {
		t.Fatalf("200 anonymous begins: %v, want at most 20 answered 200 and the rest 429", statuses)
	}
	after := count()
	if after-before > 20 {
		t.Fatalf("account_tokens grew by %d for 200 anonymous begins, want at most 20", after-before)
	}
}

// storedTokens returns a function that counts the one-time tokens and
// ceremonies platform p keeps (account_tokens), for a test's own before and
// after.
func storedTokens(t *testing.T, p *stack.Platform) func() int64 {
	t.Helper()
	db := platformDB(t, p)
	tokens := db.Collection("account_tokens")
	testkit.AllowScan(db.Name(), "account_tokens", "{}") // this test's own count
	return func() int64 {
		t.Helper()
		n, err := tokens.EstimatedDocumentCount(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// platformDB is the database of platform p (started by platform or a
// variant of it), through a client of the test's own, closed when the
// test ends: for a test that sets or counts what the API does not show.
func platformDB(t *testing.T, p any) *mongo.Database {
	t.Helper()
	l, ok := launched.Load(p)
	if !ok {
		t.Fatal("platform not registered")
	}
	servers := l.(launch).servers
	mc, err := mongo.Connect(options.Client().ApplyURI(servers.MongoURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	return mc.Database(servers.MongoDB)
}
