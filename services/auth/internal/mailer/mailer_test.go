package mailer_test

import (
	"context"
	"github.com/acme/platform/pkg/testkit"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/services/auth/internal/mailer"
)

func startMailpit(t *testing.T, o embedded.MailpitOptions) *embedded.Mailpit {
	testkit.SkipShort(t)
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m, err := embedded.StartMailpit(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

func wait(t *testing.T, m *embedded.Mailpit, to, subject string) embedded.Mail {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg, err := m.Client().WaitFor(ctx, to, subject, 1)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

var data = mailer.Data{Name: "Ada <Lovelace>", Email: "ada@example.com", Link: "http://127.0.0.1:8080/console/#/reset?token=abc&x=1", Valid: "30 minutes"}

// Each TLS mode against a Mailpit that demands it, with SMTP
// authentication where the connection is encrypted (Mailpit then refuses
// unauthenticated mail, and a wrong password: TestSendWrongPassword).
func TestSendModes(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "auth")
	// htpasswd with a bcrypt hash of "smtp-secret-1" (cost 4).
	if err := os.WriteFile(auth, []byte("mailer:$2a$04$KC0KzCDojHJHXdS7HnQjX.iD57f7rgrNdfFSXOEa.HVVlefOHenuG\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, mode, mpTLS, user, password string
	}{
		{"plain", mailer.NoTLS, embedded.MailpitPlain, "", ""},
		// make run's Mailpit: SMTP in clear on loopback, with a login.
		{"plainWithLoginOnLoopback", mailer.NoTLS, embedded.MailpitPlain, "mailer", "smtp-secret-1"},
		{"starttls", mailer.StartTLS, embedded.MailpitStartTLS, "mailer", "smtp-secret-1"},
		{"implicit", mailer.Implicit, embedded.MailpitTLS, "mailer", "smtp-secret-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := embedded.MailpitOptions{TLS: tc.mpTLS}
			if tc.user != "" {
				o.AuthFile = auth
			}
			mp := startMailpit(t, o)
			m, err := mailer.New(mailer.Config{Host: mp.SMTPHost, Port: mp.SMTPPort, TLS: tc.mode, User: tc.user, Password: tc.password,
				From: "ACME <no-reply@acme.test>", InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Send(context.Background(), mailer.Reset, "ada@example.com", data); err != nil {
				t.Fatal(err)
			}
			got := wait(t, mp, "ada@example.com", "Reset your password")
			if got.Subject != "Reset your password" || got.From.Address != "no-reply@acme.test" {
				t.Fatalf("subject %q from %v", got.Subject, got.From)
			}
			if !strings.Contains(got.Text, data.Link) || !strings.Contains(got.Text, "Hello Ada <Lovelace>,") {
				t.Fatalf("text part:\n%s", got.Text)
			}
			// HTML escapes the name and the link's ampersand.
			if !strings.Contains(got.HTML, "Ada &lt;Lovelace&gt;") || !strings.Contains(got.HTML, "token=abc&amp;x=1") {
				t.Fatalf("html part:\n%s", got.HTML)
			}
		})
	}
}

// A wrong SMTP password is an error, not a silent drop.
func TestSendWrongPassword(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(auth, []byte("mailer:$2a$04$KC0KzCDojHJHXdS7HnQjX.iD57f7rgrNdfFSXOEa.HVVlefOHenuG\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mp := startMailpit(t, embedded.MailpitOptions{TLS: embedded.MailpitStartTLS, AuthFile: auth})
	m, err := mailer.New(mailer.Config{Host: mp.SMTPHost, Port: mp.SMTPPort, TLS: mailer.StartTLS, User: "mailer", Password: "wrong",
		From: "no-reply@acme.test", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), mailer.Verify, "ada@example.com", data); err == nil {
		t.Fatal("sent with a wrong password")
	}
	// In clear on loopback (make run's Mailpit): a wrong login, and none,
	// are refused too.
	loop := startMailpit(t, embedded.MailpitOptions{SMTPUser: "mailer", SMTPPassword: "smtp-secret-1"})
	for _, login := range [][2]string{{"mailer", "wrong"}, {"", ""}} {
		m, err := mailer.New(mailer.Config{Host: loop.SMTPHost, Port: loop.SMTPPort, TLS: mailer.NoTLS, User: login[0], Password: login[1],
			From: "no-reply@acme.test"})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Send(context.Background(), mailer.Verify, "ada@example.com", data); err == nil {
			t.Fatalf("sent in clear with the login %q/%q", login[0], login[1])
		}
	}
	// STARTTLS required by the client, but the server offers none: refused
	// rather than sent in clear.
	plain := startMailpit(t, embedded.MailpitOptions{})
	m, err = mailer.New(mailer.Config{Host: plain.SMTPHost, Port: plain.SMTPPort, TLS: mailer.StartTLS, From: "no-reply@acme.test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), mailer.Verify, "ada@example.com", data); err == nil {
		t.Fatal("sent in clear although STARTTLS was required")
	}
}

// An operator's template file replaces the embedded one; the others stay.
func TestTemplateOverride(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "reset.txt"), []byte(`{{define "subject"}}ACME: new password{{end}}Go to {{.Link}} ({{.Valid}}).`), 0o644); err != nil {
		t.Fatal(err)
	}
	mp := startMailpit(t, embedded.MailpitOptions{})
	m, err := mailer.New(mailer.Config{Host: mp.SMTPHost, Port: mp.SMTPPort, TLS: mailer.NoTLS, From: "no-reply@acme.test", TemplatesDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(context.Background(), mailer.Reset, "bob@example.com", data); err != nil {
		t.Fatal(err)
	}
	got := wait(t, mp, "bob@example.com", "ACME: new password")
	if got.Subject != "ACME: new password" || strings.TrimSpace(got.Text) != "Go to "+data.Link+" (30 minutes)." {
		t.Fatalf("subject %q text %q", got.Subject, got.Text)
	}
	if !strings.Contains(got.HTML, "Choose a new password") {
		t.Fatalf("embedded HTML template not used: %s", got.HTML)
	}
}

// Broken configuration and templates fail at start-up.
func TestNewRefuses(t *testing.T) {
	good := mailer.Config{Host: "127.0.0.1", Port: 25, TLS: mailer.NoTLS, From: "no-reply@acme.test"}
	bad := func(name string, f func(c *mailer.Config)) {
		c := good
		f(&c)
		if _, err := mailer.New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	bad("tls mode", func(c *mailer.Config) { c.TLS = "ssl" })
	bad("port", func(c *mailer.Config) { c.Port = 0 })
	bad("from", func(c *mailer.Config) { c.From = "not an address" })
	bad("host", func(c *mailer.Config) { c.Host = "" })
	for name, src := range map[string]string{
		"syntax":     `{{define "subject"}}x{{end}}{{.Link`,
		"no subject": `{{.Link}}`,
		"unknown":    `{{define "subject"}}x{{end}}{{.Password}}`,
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "verify.txt"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		bad("template "+name, func(c *mailer.Config) { c.TemplatesDir = dir })
	}
	if _, err := mailer.New(good); err != nil {
		t.Fatal(err)
	}
}
