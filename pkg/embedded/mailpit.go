package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// UIUser and UIPassword, if set, are the one login the web UI and the
	// HTTP API accept (HTTP basic authentication); without them both are
	// open to anyone who reaches HTTPAddr. /readyz and /livez stay open.
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
	cmd                *exec.Cmd
	exited             chan struct{}
}

// StartMailpit starts a Mailpit that keeps messages in memory and waits
// until its API answers.
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
	if o.AuthFile != "" {
		args = append(args, "--smtp-auth-file", o.AuthFile)
	} else {
		args = append(args, "--smtp-auth-accept-any")
		if o.TLS == MailpitPlain {
			args = append(args, "--smtp-auth-allow-insecure")
		}
	}
	cmd := exec.Command(bin, args...)
	// No database named: Mailpit keeps its messages in a temporary file it
	// deletes on exit.
	cmd.Env = append(os.Environ(), "MP_DATABASE=")
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
		cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(m.exited) }()
	switch err := waitReady(m.API+"/readyz", m.exited, 30*time.Second, 50*time.Millisecond); {
	case errors.Is(err, errExited):
		return nil, errors.New("mailpit exited during start-up (port taken?)")
	case err != nil:
		m.Stop()
		return nil, errors.New("mailpit: not ready after 30s")
	}
	return m, nil
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
