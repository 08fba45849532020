package main

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/argon2"
)

// The argon2id parameters of the bound: auth's defaults (OWASP's minimum,
// services/auth/internal/password.OWASP), which the bench leaves as they are.
const (
	boundMemoryKiB = 19456
	boundTime      = 2
	boundThreads   = 1
)

// hashBoundEnv, when set, makes this program the bound's hashing process
// (hashBoundMain) instead of the benchmark.
const hashBoundEnv = "ACME_BENCH_HASH_BOUND"

// hashBoundMain is the argon2id bound's own process: a process that does
// nothing but hash, as auth would if a sign-in cost nothing else. (Hashing
// inside the bench process would share its heap and garbage collector with
// the NATS server and the load generator.) It reads "WORKERS MILLIS" lines,
// hashes from WORKERS goroutines for MILLIS ms, and answers "COUNT NANOS":
// the hashes finished and the time they took.
func hashBoundMain() error {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var workers, millis int
		if _, err := fmt.Sscan(in.Text(), &workers, &millis); err != nil {
			return fmt.Errorf("hash bound: %q: %w", in.Text(), err)
		}
		var n atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		end := start.Add(time.Duration(millis) * time.Millisecond)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					argon2.IDKey([]byte("correct horse battery"), salt, boundTime, boundMemoryKiB, boundThreads, 32)
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		if _, err := fmt.Printf("%d %d\n", n.Load(), time.Since(start).Nanoseconds()); err != nil {
			return err
		}
	}
	return in.Err()
}

// hashBound is the running bound process.
type hashBound struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startHashBound() (*hashBound, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), hashBoundEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &hashBound{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

func (h *hashBound) Pid() int { return h.cmd.Process.Pid }

// round hashes from workers goroutines for d in the bound process.
func (h *hashBound) round(workers int, d time.Duration) (stats, error) {
	if _, err := fmt.Fprintf(h.in, "%d %d\n", workers, d.Milliseconds()); err != nil {
		return stats{}, err
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		return stats{}, fmt.Errorf("hash bound process: %w", err)
	}
	var n, nanos int64
	if _, err := fmt.Sscan(line, &n, &nanos); err != nil {
		return stats{}, fmt.Errorf("hash bound process: %q: %w", line, err)
	}
	return stats{n: int(n), dur: time.Duration(nanos)}, nil
}

// Stop ends the process (end of its input) and waits for it.
func (h *hashBound) Stop() {
	_ = h.in.Close()
	_ = h.cmd.Wait()
}
