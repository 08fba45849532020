package logs_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/acme/platform/services/logs/internal/logs"
)

// acquireAll calls Acquire for user from n goroutines released together,
// and returns the releases of those admitted and the refusals by error.
func acquireAll(t *testing.T, s *logs.TailSlots, user string, n int) ([]func(), map[error]int) {
	t.Helper()
	var (
		mu       sync.Mutex
		releases []func()
		refused  = map[error]int{}
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			release, err := s.Acquire(user)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused[err]++
				return
			}
			releases = append(releases, release)
		}()
	}
	close(start)
	wg.Wait()
	return releases, refused
}

// 200 parallel requests of one user: exactly PerUser get a slot, the rest
// ErrTooManyTails; another user still gets one, and the user gets one again
// once a slot is released.
func TestTailSlotsPerUserUnderParallelRequests(t *testing.T) {
	s := logs.NewTailSlots(100, 5)
	admitted, refused := acquireAll(t, s, "key-owner", 200)
	if got, want := len(admitted), 5; got != want {
		t.Fatalf("%d admitted, want %d", got, want)
	}
	if got, want := refused[logs.ErrTooManyTails], 195; got != want || len(refused) != 1 {
		t.Fatalf("refusals %v, want %d × ErrTooManyTails", refused, want)
	}
	if all, mine := s.Open("key-owner"); all != 5 || mine != 5 {
		t.Fatalf("open %d (user %d), want 5 (5)", all, mine)
	}

	other, err := s.Acquire("other-admin")
	if err != nil {
		t.Fatalf("another user refused: %v", err)
	}
	other()

	admitted[0]()
	admitted[0]() // a second release of the same slot gives nothing back twice
	if all, mine := s.Open("key-owner"); all != 4 || mine != 4 {
		t.Fatalf("after one release: open %d (user %d), want 4 (4)", all, mine)
	}
	again, err := s.Acquire("key-owner")
	if err != nil {
		t.Fatalf("a released slot was not free again: %v", err)
	}
	if _, err := s.Acquire("key-owner"); !errors.Is(err, logs.ErrTooManyTails) {
		t.Fatalf("sixth slot: %v, want ErrTooManyTails", err)
	}
	again()
	for _, r := range admitted[1:] {
		r()
	}
	if all, mine := s.Open("key-owner"); all != 0 || mine != 0 {
		t.Fatalf("after every release: open %d (user %d), want 0", all, mine)
	}
}

// The replica's bound holds across users under parallel requests, and is
// answered ErrTailsBusy, while a user at their own bound hears
// ErrTooManyTails even when the replica is full too.
func TestTailSlotsReplicaBound(t *testing.T) {
	s := logs.NewTailSlots(10, 3)
	var (
		mu       sync.Mutex
		admitted int
		refused  = map[error]int{}
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	users := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.Acquire(users[i%len(users)])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused[err]++
				return
			}
			admitted++
		}()
	}
	close(start)
	wg.Wait()
	if admitted != 10 {
		t.Fatalf("%d admitted, want the replica's 10", admitted)
	}
	if all, _ := s.Open(""); all != 10 {
		t.Fatalf("open %d, want 10", all)
	}
	for _, u := range users {
		if _, n := s.Open(u); n > 3 {
			t.Fatalf("user %s holds %d, over the per-user 3", u, n)
		}
	}
	if refused[logs.ErrTailsBusy] == 0 {
		t.Fatalf("refusals %v: none was ErrTailsBusy", refused)
	}

	full := logs.NewTailSlots(2, 2)
	for range 2 {
		if _, err := full.Acquire("a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := full.Acquire("a"); !errors.Is(err, logs.ErrTooManyTails) {
		t.Fatalf("user at their bound on a full replica: %v, want ErrTooManyTails", err)
	}
	if _, err := full.Acquire("b"); !errors.Is(err, logs.ErrTailsBusy) {
		t.Fatalf("another user on a full replica: %v, want ErrTailsBusy", err)
	}
}
