package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/smtp"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/scripts/devstack/devenv"
	"github.com/acme/platform/scripts/stack"
)

// holdMailpitPort listens where make run's Mailpit would (127.0.0.1:8025)
// with handler (nil: a server that accepts and never answers). When
// something else on this machine already holds 8025, a free port stands in
// for it and make run is pointed there (MAILPIT_ADDR).
func holdMailpitPort(t *testing.T, handler http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:8025")
	if err != nil {
		t.Logf("8025 is held by another process here (%v): a free port stands in for it", err)
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { l.Close() })
	if handler == nil {
		var mu sync.Mutex
		var held []net.Conn
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				held = append(held, c) // read nothing, answer nothing
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range held {
				c.Close()
			}
		})
	} else {
		hs := &http.Server{Handler: handler}
		go func() { _ = hs.Serve(l) }()
		t.Cleanup(func() { hs.Close() })
	}
	return l.Addr().String()
}

// fakeMailpit answers Mailpit's readiness and API for anyone, as another
// stack's Mailpit without a login would, and counts what it was asked.
type fakeMailpit struct{ requests atomic.Int64 }

func (f *fakeMailpit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/readyz" || r.URL.Path == "/livez":
		fmt.Fprint(w, "ok")
	case r.URL.Path == "/api/v1/info":
		fmt.Fprint(w, `{"Version":"v1.27.11","Messages":0}`)
	default:
		fmt.Fprint(w, `{"total":0,"unread":0,"count":0,"messages":[]}`)
	}
}

// lineWriter keeps what a process printed, for waiting on a line.
type lineWriter struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// devstackRun is a running `make run`.
type devstackRun struct {
	out     *lineWriter
	dataDir string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// child returns the pid of make run's child process named comm (0: none).
func (r *devstackRun) child(comm string) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", r.cmd.Process.Pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, pid := range strings.Fields(string(b)) {
			if c, _ := os.ReadFile("/proc/" + pid + "/comm"); strings.TrimSpace(string(c)) == comm {
				var n int
				fmt.Sscan(pid, &n)
				return n
			}
		}
	}
	return 0
}

// runDevstack runs `make run` (scripts/devstack, built here) with its data
// in a temporary DATA_DIR, the gateway on a free port and Mailpit asked for
// mailpitAddr, and returns once the banner is out.
func runDevstack(t *testing.T, mailpitAddr string) *devstackRun {
	t.Helper()
	root, err := stack.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "devstack")
	build := exec.Command("go", "build", "-o", bin, "./scripts/devstack")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build devstack: %v\n%s", err, b)
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	out := &lineWriter{}
	cmd := exec.Command(bin)
	cmd.Dir = root // as make run: the services are built into ./bin
	cmd.Env = append(os.Environ(), "DATA_DIR="+dataDir, "GATEWAY_ADDR=127.0.0.1:0", "MAILPIT_ADDR="+mailpitAddr)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("make run's output:\n%s", out)
		}
	})
	deadline := time.After(10 * time.Minute)
	for !strings.Contains(out.String(), "The platform is running") {
		select {
		case <-exited:
			t.Fatalf("make run ended before its banner:\n%s", out)
		case <-deadline:
			t.Fatalf("no banner within 10 minutes:\n%s", out)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return &devstackRun{out: out, dataDir: dataDir, cmd: cmd, exited: exited}
}

// Issue 43, row 8: `make run` while another stack's Mailpit held 8025: our
// Mailpit died ("address already in use"), the other answered the
// readiness check, the banner pointed at it and mail was lost; with 8025
// held by a server that never answers, make run never became ready; and
// the catcher took anonymous, spoofed mail. Now Mailpit takes a free port
// when 8025 is taken, named in the banner, is known ready by its own login,
// and its SMTP server takes only auth's login.
func TestHostileDevMailpit(t *testing.T) {
	testkit.SkipShort(t)

	t.Run("anotherMailpitHolds8025", func(t *testing.T) {
		fake := &fakeMailpit{}
		held := holdMailpitPort(t, fake)
		run := runDevstack(t, held)
		out, dataDir := run.out, run.dataDir
		banner := out.String()[strings.LastIndex(out.String(), "The platform is running"):]

		api := regexp.MustCompile(`curl -s -u (\S+):(\S+) '(http://[^/']+)/api/v1/messages'`).FindStringSubmatch(banner)
		smtpAddr := regexp.MustCompile(`Mailpit SMTP (\S+)`).FindStringSubmatch(banner)
		gw := regexp.MustCompile(`The platform is running: (http://\S+)`).FindStringSubmatch(banner)
		if api == nil || gw == nil {
			t.Fatalf("the banner names no Mailpit API or gateway:\n%s", banner)
		}
		if api[3] == "http://"+held {
			t.Fatalf("the banner points at %s, the other Mailpit", api[3])
		}
		if smtpAddr == nil {
			t.Fatalf("the banner names no Mailpit SMTP address:\n%s", banner)
		}
		if !strings.Contains(out.String(), held+" is taken") {
			t.Errorf("the output does not say %s is taken", held)
		}
		mp := &embedded.MailpitClient{API: api[3], User: api[1], Password: api[2]}

		// A password reset: the mail arrives at our Mailpit, on the port
		// the banner names.
		var sec devenv.Secrets
		b, err := os.ReadFile(filepath.Join(dataDir, "dev-secrets.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &sec); err != nil {
			t.Fatal(err)
		}
		newClient(t, gw[1]).mustStatus(202, "POST", "/password/forgot", map[string]string{"email": sec.AdminEmail})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := mp.WaitFor(ctx, sec.AdminEmail, "Reset your password", 1); err != nil {
			t.Fatalf("the reset mail did not reach the Mailpit of the banner: %v", err)
		}

		// An anonymous client, and a wrong login, are refused a spoofed
		// reset mail.
		anonymousSMTPRefused(t, smtpAddr[1], sec.AdminEmail)
		if msgs, err := mp.To(ctx, sec.AdminEmail); err != nil || len(msgs) != 1 {
			t.Fatalf("messages to %s: %d %v, want the one reset mail", sec.AdminEmail, len(msgs), err)
		}

		// Mailpit killed: make run says so at once and stops, rather than
		// running on with mail going nowhere.
		pid := run.child("mailpit")
		if pid == 0 {
			t.Fatal("no mailpit process under make run")
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case <-run.exited:
		case <-time.After(time.Minute):
			t.Fatal("make run still runs a minute after its Mailpit was killed")
		}
		if !strings.Contains(out.String(), "Mailpit ("+api[3]+") exited") {
			t.Errorf("make run did not say its Mailpit exited")
		}
		if run.cmd.ProcessState.Success() {
			t.Errorf("make run exited with success after losing its Mailpit")
		}
	})

	t.Run("aSilentServerHolds8025", func(t *testing.T) {
		held := holdMailpitPort(t, nil)
		bins := builtServices(t)
		out := &stack.Output{}
		done := make(chan struct{})
		var srv *devenv.Servers
		var err error
		go func() {
			defer close(done)
			srv, err = devenv.Start(context.Background(), devenv.Config{DataDir: filepath.Join(t.TempDir(), "data"),
				GatewayAddr: "127.0.0.1:0", MailpitAddr: held, Out: out, Log: out})
		}()
		select {
		case <-done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("the backing servers are not up 3 minutes after the start (Mailpit waiting on the server holding %s?):\n%s", held, out)
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Cleanup(srv.Stop)
		if srv.Mailpit.API == "http://"+held {
			t.Fatalf("Mailpit's API is %s, the address the other server holds", srv.Mailpit.API)
		}
		if !strings.Contains(out.String(), held+" is taken") {
			t.Errorf("the output does not say %s is taken:\n%s", held, out)
		}
		p, err := srv.Launch(bins)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Cleanup(func() { p.Stop(10 * time.Second) })
		newClient(t, p.GatewayURL).mustStatus(202, "POST", "/password/forgot", map[string]string{"email": srv.Secrets.AdminEmail})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := srv.Mailpit.Client().WaitFor(ctx, srv.Secrets.AdminEmail, "Reset your password", 1); err != nil {
			t.Fatalf("the reset mail did not reach Mailpit: %v\n%s", err, out.Tail(50))
		}
		anonymousSMTPRefused(t, fmt.Sprintf("%s:%d", srv.Mailpit.SMTPHost, srv.Mailpit.SMTPPort), srv.Secrets.AdminEmail)
	})
}

// anonymousSMTPRefused sends a spoofed reset mail to addr without a login
// (want 530) and with a wrong one (want 535).
func anonymousSMTPRefused(t *testing.T, addr, to string) {
	t.Helper()
	send := func(auth smtp.Auth) error {
		c, err := smtp.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Hello("attacker.example"); err != nil {
			return err
		}
		if auth != nil {
			if err := c.Auth(auth); err != nil {
				return err
			}
		}
		if err := c.Mail("no-reply@acme.local"); err != nil {
			return err
		}
		if err := c.Rcpt(to); err != nil {
			return err
		}
		w, err := c.Data()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "From: ACME Platform <no-reply@acme.local>\r\nTo: %s\r\nSubject: Reset your password\r\n\r\nGo to http://evil.example/reset\r\n", to)
		if err := w.Close(); err != nil {
			return err
		}
		return c.Quit()
	}
	host, _, _ := net.SplitHostPort(addr)
	for _, c := range []struct {
		name string
		auth smtp.Auth
		code int
	}{
		{"anonymous", nil, 530},
		{"wrongLogin", smtp.PlainAuth("", "acme-auth", "wrong", host), 535},
	} {
		err := send(c.auth)
		var te *textproto.Error
		switch {
		case err == nil:
			t.Errorf("%s: Mailpit accepted a spoofed reset mail", c.name)
		case !errors.As(err, &te) || te.Code != c.code:
			t.Errorf("%s: %v, want %d", c.name, err, c.code)
		}
	}
}
