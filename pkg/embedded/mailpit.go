package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// MailpitModule and MailpitVersion pin the mail catcher used by tests and
// `make run`: Mailpit's SMTP server and HTTP API build from its module (its
// web UI's compiled assets are not in the module, so the UI pages are
// empty; the API does not need them).
const (
	MailpitModule  = "github.com/axllent/mailpit"
	MailpitVersion = "v1.27.11"
)

// MailpitBinary returns the path of the pinned Mailpit, building it once
// into the cache. $MAILPIT_BINARY overrides.
func MailpitBinary(ctx context.Context, progress io.Writer) (string, error) {
	return Pinned{Name: "Mailpit", Package: MailpitModule, Version: MailpitVersion, Dir: "mailpit", File: "mailpit",
		Env: "MAILPIT_BINARY"}.Binary(ctx, progress)
}

// Mailpit TLS modes of the SMTP listener.
const (
	MailpitPlain    = ""         // no TLS
	MailpitStartTLS = "starttls" // STARTTLS required, self-signed certificate
	MailpitTLS      = "tls"      // implicit TLS, self-signed certificate
)

// MailpitOptions configure StartMailpit.
type MailpitOptions struct {
	SMTPAddr string // host:port; empty picks a free loopback port
	HTTPAddr string // host:port of the API; empty picks a free loopback port
	TLS      string // MailpitPlain, MailpitStartTLS or MailpitTLS
	// AuthFile, if set, is an htpasswd-style file ("user:password" lines):
	// the SMTP server then requires authentication.
	AuthFile string
	// SMTPUser and SMTPPassword, if set, are the one SMTP login (instead
	// of AuthFile): the SMTP server then refuses mail from a client that
	// has not logged in (530) and a wrong login (535). Over MailpitPlain
	// the password travels in clear: a loopback listener only.
	SMTPUser, SMTPPassword string
	// UIUser and UIPassword, if set, are the one login the web UI and the
	// HTTP API accept (HTTP basic authentication); without them both are
	// open to anyone who reaches HTTPAddr. /readyz and /livez stay open,
	// so readiness is checked on the API with this login (below).
	UIUser, UIPassword string
	Log                io.Writer // server output; nil discards
}

// Mailpit is a running Mailpit process.
type Mailpit struct {
	SMTPHost string
	SMTPPort int
	API      string // http://host:port
	// UIUser and UIPassword are the API's login (MailpitOptions), empty
	// when it has none.
	UIUser, UIPassword string
	// SMTPUser and SMTPPassword are the SMTP login (MailpitOptions),
	// empty when it takes none.
	SMTPUser, SMTPPassword string
	cmd                    *exec.Cmd
	exited                 chan struct{}
}

// ErrAddrTaken is StartMailpit's answer when one of its addresses is in
// use by another process before it starts.
var ErrAddrTaken = errors.New("mailpit: address in use")

// AddrFree reports whether nothing listens on addr (host:port) now.
func AddrFree(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// StartMailpit starts a Mailpit that keeps messages in memory and waits
// until it is ready: with a UI login, until its API refuses a request
// without the login and answers one with it, which no other Mailpit (or
// other server) on the same address does; without one, until /readyz
// answers. An address already in use is refused at once (ErrAddrTaken);
// if the process exits during start-up, or nothing answers within 30
// seconds, StartMailpit says so rather than waiting on.
func StartMailpit(ctx context.Context, o MailpitOptions) (*Mailpit, error) {
	bin, err := MailpitBinary(ctx, o.Log)
	if err != nil {
		return nil, err
	}
	for _, a := range []*string{&o.SMTPAddr, &o.HTTPAddr} {
		if *a == "" {
			if *a, err = FreeAddr(); err != nil {
				return nil, err
			}
		} else if !AddrFree(*a) {
			return nil, fmt.Errorf("%w: %s", ErrAddrTaken, *a)
		}
	}
	host, port, err := splitHostPort(o.SMTPAddr)
	if err != nil {
		return nil, err
	}
	args := []string{"--smtp", o.SMTPAddr, "--listen", o.HTTPAddr, "--disable-version-check",
		"--quiet", "--max", "0"}
	switch o.TLS {
	case MailpitPlain:
	case MailpitStartTLS:
		args = append(args, "--smtp-tls-cert", "sans:localhost,127.0.0.1", "--smtp-tls-key", "sans:localhost,127.0.0.1", "--smtp-require-starttls")
	case MailpitTLS:
		args = append(args, "--smtp-tls-cert", "sans:localhost,127.0.0.1", "--smtp-tls-key", "sans:localhost,127.0.0.1", "--smtp-require-tls")
	default:
		return nil, fmt.Errorf("mailpit: unknown TLS mode %q", o.TLS)
	}
	if (o.SMTPUser == "") != (o.SMTPPassword == "") {
		return nil, errors.New("mailpit: SMTPUser and SMTPPassword go together")
	}
	switch {
	case o.AuthFile != "" && o.SMTPUser != "":
		return nil, errors.New("mailpit: AuthFile or SMTPUser, not both")
	case o.AuthFile != "":
		args = append(args, "--smtp-auth-file", o.AuthFile)
	case o.SMTPUser == "":
		args = append(args, "--smtp-auth-accept-any")
	}
	if o.TLS == MailpitPlain {
		args = append(args, "--smtp-auth-allow-insecure")
	}
	cmd := exec.Command(bin, args...)
	// No database named: Mailpit keeps its messages in a temporary file it
	// deletes on exit. Whatever MP_ settings the environment holds (another
	// stack's) are not ours.
	cmd.Env = append(withoutMailpitEnv(os.Environ()), "MP_DATABASE=")
	if o.SMTPUser != "" {
		if strings.Contains(o.SMTPUser, ":") || strings.ContainsAny(o.SMTPUser+o.SMTPPassword, " \t\r\n") {
			return nil, errors.New("mailpit: the SMTP login may hold no blank, and the user no colon")
		}
		// "user:password", through the environment, not the command line.
		cmd.Env = append(cmd.Env, "MP_SMTP_AUTH="+o.SMTPUser+":"+o.SMTPPassword)
	}
	if (o.UIUser == "") != (o.UIPassword == "") {
		return nil, errors.New("mailpit: UIUser and UIPassword go together")
	}
	if o.UIUser != "" {
		if strings.Contains(o.UIUser, ":") || strings.ContainsAny(o.UIUser+o.UIPassword, " \t\r\n") {
			return nil, errors.New("mailpit: the UI login may hold no blank, and the user no colon")
		}
		// "user:password", a plain-text htpasswd line, through the
		// environment (a command line is visible to every local user).
		cmd.Env = append(cmd.Env, "MP_UI_AUTH="+o.UIUser+":"+o.UIPassword)
	}
	if o.Log != nil {
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("mailpit: %w", err)
	}
	m := &Mailpit{SMTPHost: host, SMTPPort: port, API: "http://" + o.HTTPAddr, UIUser: o.UIUser, UIPassword: o.UIPassword,
		SMTPUser: o.SMTPUser, SMTPPassword: o.SMTPPassword, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(m.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for !m.ready() {
		select {
		case <-m.exited:
			return nil, fmt.Errorf("mailpit exited during start-up (%s; address %s or %s taken?)", cmd.ProcessState, o.HTTPAddr, o.SMTPAddr)
		case <-ctx.Done():
			m.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.Stop()
			return nil, fmt.Errorf("mailpit: not ready after 30s on %s", m.API)
		}
	}
	// Ready, and still ours: not an answer from elsewhere just before it
	// exited.
	select {
	case <-m.exited:
		return nil, fmt.Errorf("mailpit exited during start-up (%s)", cmd.ProcessState)
	default:
	}
	return m, nil
}

// probeClient bounds every readiness request: a server that accepts and
// never answers does not hold the start-up.
var probeClient = &http.Client{Timeout: 2 * time.Second}

// ready reports whether this Mailpit answers: with a UI login, its API
// refuses a request without it (401) and answers one with it (200).
func (m *Mailpit) ready() bool {
	status := func(path string, login bool) int {
		req, err := http.NewRequest(http.MethodGet, m.API+path, nil)
		if err != nil {
			return 0
		}
		if login {
			req.SetBasicAuth(m.UIUser, m.UIPassword)
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return resp.StatusCode
	}
	if m.UIUser == "" {
		return status("/readyz", false) == http.StatusOK
	}
	return status("/api/v1/info", false) == http.StatusUnauthorized && status("/api/v1/info", true) == http.StatusOK
}

// Exited is closed when the Mailpit process has ended.
func (m *Mailpit) Exited() <-chan struct{} { return m.exited }

// withoutMailpitEnv is env without Mailpit's own settings (MP_...).
func withoutMailpitEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "MP_") {
			out = append(out, kv)
		}
	}
	return out
}

func splitHostPort(addr string) (string, int, error) {
	u, err := url.Parse("smtp://" + addr)
	if err != nil || u.Port() == "" {
		return "", 0, fmt.Errorf("mailpit: bad address %q", addr)
	}
	var port int
	if _, err := fmt.Sscanf(u.Port(), "%d", &port); err != nil {
		return "", 0, fmt.Errorf("mailpit: bad port in %q", addr)
	}
	return u.Hostname(), port, nil
}

// Stop terminates the server.
func (m *Mailpit) Stop() {
	if m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

// MailAddress is an address as Mailpit's API shows it.
type MailAddress struct {
	Name    string
	Address string
}

// MailSummary is one message in a listing.
type MailSummary struct {
	ID      string
	From    *MailAddress
	To      []MailAddress
	Subject string
}

// Mail is one message in full.
type Mail struct {
	MailSummary
	Text string
	HTML string
}

// MailpitClient reads what a Mailpit caught, through its HTTP API.
type MailpitClient struct {
	API  string // http://host:port
	HTTP *http.Client
	// User and Password, if set, log in to the API (basic authentication).
	User, Password string
}

// Client returns an API client of m, with its login.
func (m *Mailpit) Client() *MailpitClient {
	return &MailpitClient{API: m.API, User: m.UIUser, Password: m.UIPassword}
}

func (c *MailpitClient) get(ctx context.Context, path string, v any) error {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.API+path, nil)
	if err != nil {
		return err
	}
	if c.User != "" {
		req.SetBasicAuth(c.User, c.Password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("mailpit GET %s: %s: %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// To lists the messages sent to address, newest first.
func (c *MailpitClient) To(ctx context.Context, address string) ([]MailSummary, error) {
	var r struct {
		Messages []MailSummary `json:"messages"`
	}
	q := url.Values{"query": {fmt.Sprintf("to:%q", address)}}
	err := c.get(ctx, "/api/v1/search?"+q.Encode(), &r)
	return r.Messages, err
}

// Message reads one message in full.
func (c *MailpitClient) Message(ctx context.Context, id string) (Mail, error) {
	var m Mail
	err := c.get(ctx, "/api/v1/message/"+url.PathEscape(id), &m)
	return m, err
}

// WaitFor waits until at least n messages to address with this subject
// have arrived (or ctx ends) and returns the newest of them in full.
func (c *MailpitClient) WaitFor(ctx context.Context, address, subject string, n int) (Mail, error) {
	for {
		list, err := c.To(ctx, address)
		var match []MailSummary
		for _, m := range list {
			if m.Subject == subject {
				match = append(match, m)
			}
		}
		if err == nil && len(match) >= n {
			return c.Message(ctx, match[0].ID)
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("%d message(s) %q to %s, want %d", len(match), subject, address, n)
			}
			return Mail{}, fmt.Errorf("%w: %v", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
