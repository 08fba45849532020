package stack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as a stand-in service: with STACK_TEST_SERVICE=1 the
// test binary serves /healthz and /pid on $LOGS_ADDR (the address Launch
// gives the logs service) instead of running the tests.
func TestMain(m *testing.M) {
	if os.Getenv("STACK_TEST_SERVICE") == "1" {
		http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
		http.HandleFunc("/pid", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, os.Getpid()) })
		fmt.Fprintln(os.Stderr, http.ListenAndServe(os.Getenv("LOGS_ADDR"), nil))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestBackoffDoublesUpToMax(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 30 * time.Second, Reset: time.Minute}
	var got []time.Duration
	d := time.Duration(0)
	for range 7 {
		d = b.next(d)
		got = append(got, d)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("delays %v, want %v seconds", got, want)
		}
	}
}

// A service process killed with SIGKILL is started again in its place, on
// its address, and serves; after Stop nothing is restarted.
func TestSuperviseRestartsAKilledService(t *testing.T) {
	out := &Output{}
	p, err := Launch(Options{Bins: map[string]string{"logs": os.Args[0]}, Env: map[string]string{"STACK_TEST_SERVICE": "1"}, Out: out},
		Servers{}, Secrets{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := p.Supervise(ctx, Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Reset: time.Minute}, out)

	first := p.Proc("logs")
	pid := servedPid(t, first.Addr)
	if pid != first.Pid() {
		t.Fatalf("/pid %d, want %d", pid, first.Pid())
	}
	for round := range 2 { // twice: the restarted process is supervised too
		old := p.Proc("logs")
		if err := syscall.Kill(old.Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for p.Proc("logs") == old {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: not restarted after 30s; output:\n%s", round, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		np := p.Proc("logs")
		if np.Addr != old.Addr {
			t.Fatalf("restarted on %s, want %s", np.Addr, old.Addr)
		}
		if got := servedPid(t, np.Addr); got != np.Pid() || got == old.Pid() {
			t.Fatalf("round %d: %s served by pid %d, want the new process %d (old %d)", round, np.Addr, got, np.Pid(), old.Pid())
		}
	}
	if s := out.String(); strings.Count(s, "supervisor: logs exited (signal: killed)") != 2 || strings.Count(s, "supervisor: logs restarted") != 2 {
		t.Fatalf("supervisor lines missing:\n%s", s)
	}

	// Stop ends the supervision: the stopped process stays stopped.
	last := p.Proc("logs")
	p.Stop(5 * time.Second)
	done()
	time.Sleep(300 * time.Millisecond) // more than the back-off
	if p.Proc("logs") != last {
		t.Fatal("a process was restarted after Stop")
	}
	if _, err := http.Get("http://" + last.Addr + "/healthz"); err == nil {
		t.Fatal("something still serves after Stop")
	}
}

func servedPid(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/pid")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatalf("/pid: %q", b)
	}
	return n
}
