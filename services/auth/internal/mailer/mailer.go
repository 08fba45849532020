// Package mailer sends the auth service's messages (password reset, address
// verification, address change notice, address in use, sign-in codes) over SMTP with
// github.com/wneessen/go-mail. Each message has a plain-text template
// (NAME.txt, which also defines the "subject" template) and an HTML
// template (NAME.html); both are embedded, and an operator may replace any
// of them with a file of the same name in a directory of their own.
package mailer

import (
	"bytes"
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/wneessen/go-mail"
)

//go:embed templates
var embedded embed.FS

// Message names.
const (
	Reset        = "reset"         // a password reset link
	Verify       = "verify"        // an address verification link
	EmailChanged = "email_changed" // to the old address when a change is asked for
	EmailInUse   = "email_in_use"  // to an address another account asked for, which is already taken
	// ConfirmEmailChange is the link to the current address that confirms
	// a change asked for without the password.
	ConfirmEmailChange = "email_change_confirm"
	// SignInCode is a sign-in code and link to an account's address.
	SignInCode = "signin_code"
	// SignUpCode is a sign-in code and link to an address without an
	// account, which the code creates (sign-up by code is on).
	SignUpCode = "signup_code"
	// PasswordCode is the code that lets an account without a password
	// set one from the profile.
	PasswordCode = "password_code"
)

var names = []string{Reset, Verify, EmailChanged, EmailInUse, ConfirmEmailChange, SignInCode, SignUpCode, PasswordCode}

// TLS modes.
const (
	StartTLS = "starttls" // plain connection upgraded with STARTTLS, which the server must offer
	Implicit = "tls"      // TLS from the first byte (SMTPS, usually port 465)
	NoTLS    = "none"     // plain text: only for a local mail catcher
)

// Config is where and how to send.
type Config struct {
	Host         string // empty: mail is off
	Port         int
	TLS          string // StartTLS, Implicit or NoTLS
	User         string // empty: no SMTP authentication
	Password     string
	From         string // envelope and header sender
	Timeout      time.Duration
	TemplatesDir string // optional overrides
	// InsecureSkipVerify accepts any server certificate (tests only).
	InsecureSkipVerify bool
}

// Data fills a template.
type Data struct {
	Name     string // the user's full name
	Email    string // the address written to
	NewEmail string // EmailChanged, ConfirmEmailChange: the address asked for
	Link     string // Reset, Verify, ConfirmEmailChange, SignInCode, SignUpCode
	Code     string // SignInCode, SignUpCode, PasswordCode: the one-time code
	Valid    string // how long the link works, e.g. "30 minutes"
}

// Mailer renders and sends messages.
type Mailer struct {
	cfg  Config
	text map[string]*texttemplate.Template
	html map[string]*htmltemplate.Template
}

// New parses the templates (embedded, or the operator's files) and checks
// the configuration; it does not connect.
func New(cfg Config) (*Mailer, error) {
	switch cfg.TLS {
	case StartTLS, Implicit, NoTLS:
	default:
		return nil, fmt.Errorf("mail TLS mode %q: want %s, %s or %s", cfg.TLS, StartTLS, Implicit, NoTLS)
	}
	if cfg.Host == "" {
		return nil, errors.New("mail host is empty")
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("mail port %d out of range", cfg.Port)
	}
	if cfg.From == "" {
		return nil, errors.New("mail sender address (from) is empty")
	}
	if err := mail.NewMsg().From(cfg.From); err != nil {
		return nil, fmt.Errorf("mail sender address %q: %w", cfg.From, err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	m := &Mailer{cfg: cfg, text: map[string]*texttemplate.Template{}, html: map[string]*htmltemplate.Template{}}
	for _, n := range names {
		src, err := m.source(n + ".txt")
		if err != nil {
			return nil, err
		}
		t, err := texttemplate.New(n + ".txt").Option("missingkey=error").Parse(src)
		if err != nil {
			return nil, fmt.Errorf("mail template %s.txt: %w", n, err)
		}
		if t.Lookup("subject") == nil {
			return nil, fmt.Errorf(`mail template %s.txt: no {{define "subject"}}`, n)
		}
		m.text[n] = t
		src, err = m.source(n + ".html")
		if err != nil {
			return nil, err
		}
		h, err := htmltemplate.New(n + ".html").Option("missingkey=error").Parse(src)
		if err != nil {
			return nil, fmt.Errorf("mail template %s.html: %w", n, err)
		}
		m.html[n] = h
		// Render once with sample data so a template that fails on use
		// fails at start-up instead.
		if _, _, _, err := m.render(n, Data{Name: "n", Email: "a@example.com", NewEmail: "b@example.com", Link: "https://example.com/", Code: "123456", Valid: "30 minutes"}); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// source is the operator's file if there is one, else the embedded template.
func (m *Mailer) source(name string) (string, error) {
	if m.cfg.TemplatesDir != "" {
		b, err := os.ReadFile(filepath.Join(m.cfg.TemplatesDir, name))
		if err == nil {
			return string(b), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("mail template: %w", err)
		}
	}
	b, err := embedded.ReadFile("templates/" + name)
	return string(b), err
}

func (m *Mailer) render(name string, d Data) (subject, text, html string, err error) {
	var sb, tb, hb bytes.Buffer
	t := m.text[name]
	if err := t.ExecuteTemplate(&sb, "subject", d); err != nil {
		return "", "", "", fmt.Errorf("mail template %s.txt subject: %w", name, err)
	}
	if err := t.Execute(&tb, d); err != nil {
		return "", "", "", fmt.Errorf("mail template %s.txt: %w", name, err)
	}
	if err := m.html[name].Execute(&hb, d); err != nil {
		return "", "", "", fmt.Errorf("mail template %s.html: %w", name, err)
	}
	return strings.TrimSpace(strings.ReplaceAll(sb.String(), "\n", " ")), tb.String(), hb.String(), nil
}

// Send renders message name for d and delivers it to to.
func (m *Mailer) Send(ctx context.Context, name, to string, d Data) error {
	if _, ok := m.text[name]; !ok {
		return fmt.Errorf("unknown mail message %q", name)
	}
	subject, text, html, err := m.render(name, d)
	if err != nil {
		return err
	}
	msg := mail.NewMsg()
	if err := msg.From(m.cfg.From); err != nil {
		return err
	}
	if err := msg.To(to); err != nil {
		return fmt.Errorf("recipient: %w", err)
	}
	msg.Subject(subject)
	msg.SetDate()
	msg.SetMessageID()
	msg.SetBodyString(mail.TypeTextPlain, text)
	msg.AddAlternativeString(mail.TypeTextHTML, html)

	opts := []mail.Option{mail.WithPort(m.cfg.Port), mail.WithTimeout(m.cfg.Timeout)}
	tc := &tls.Config{ServerName: m.cfg.Host, MinVersion: tls.VersionTLS12, InsecureSkipVerify: m.cfg.InsecureSkipVerify} //nolint:gosec // tests only
	switch m.cfg.TLS {
	case StartTLS:
		opts = append(opts, mail.WithTLSPolicy(mail.TLSMandatory), mail.WithTLSConfig(tc))
	case Implicit:
		opts = append(opts, mail.WithSSL(), mail.WithTLSConfig(tc))
	case NoTLS:
		opts = append(opts, mail.WithTLSPolicy(mail.NoTLS))
	}
	switch {
	case m.cfg.User != "" && m.cfg.TLS == NoTLS && loopback(m.cfg.Host):
		// A local mail catcher (make run's Mailpit): PLAIN, which go-mail
		// sends unencrypted to a loopback server only (as net/smtp does);
		// the password never leaves the machine.
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthPlain),
			mail.WithUsername(m.cfg.User), mail.WithPassword(m.cfg.Password))
	case m.cfg.User != "":
		// PLAIN is refused by go-mail over an unencrypted connection, as
		// the SMTP AUTH rules say, so a password never travels in clear.
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthAutoDiscover),
			mail.WithUsername(m.cfg.User), mail.WithPassword(m.cfg.Password))
	}
	c, err := mail.NewClient(m.cfg.Host, opts...)
	if err != nil {
		return err
	}
	return c.DialAndSendWithContext(ctx, msg)
}

// loopback reports whether host is this machine by the names go-mail
// accepts for unencrypted PLAIN authentication.
func loopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}
