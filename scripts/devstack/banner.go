package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/acme/platform/scripts/devstack/devenv"
	"github.com/acme/platform/scripts/stack"
)

// BannerFile is where the banner is kept under DATA_DIR (mode 0600: it
// holds the administrator's password); `make info` prints it.
const BannerFile = "banner.txt"

// banner is what a person needs once the platform is up: the gateway, the
// administrator's login, every server's address and login.
func banner(p *stack.Platform, srv *devenv.Servers, dataDir, kept string) string {
	sec := srv.Secrets
	return fmt.Sprintf(`
================================================================
 The platform is running: %[1]s   (Ctrl-C stops everything)
 Administrator: %[2]s  password: %[3]s
 (every secret is in %[4]s; set ADMIN_EMAIL/ADMIN_PASSWORD before the first run to choose)

 Sign in:
   curl -i -c jar -H 'Content-Type: application/json' \
     -d '{"email":"%[2]s","password":"%[3]s"}' %[1]s/signin
   curl -b jar %[1]s/me
 Data: %[5]s   Metrics: gateway %[9]s  auth %[10]s  files %[11]s  logs %[12]s
 The servers below take a login (passwords in %[4]s):
   MongoDB wire %[6]s  user %[14]s (mongoPassword)
   NATS %[7]s  users auth, files, logs, gateway, publisher (natsPasswords; deploy/nats.conf)
   MinIO %[8]s  (minioAccess, minioSecret)
 Mail (password reset, address verification) is caught by Mailpit, not sent:
   curl -s -u %[15]s:%[16]s '%[13]s/api/v1/messages'        # what was caught (newest first)
   curl -s -u %[15]s:%[16]s '%[13]s/api/v1/message/<ID>'    # one message, text and HTML parts
   Mailpit SMTP %[18]s  user %[19]s (mailpitSmtpPassword); mail without the login is refused
 A service process that dies is started again (1 s, doubling to 30 s).
 This banner is kept in %[17]s: `+"`make info`"+` prints it again.
================================================================
`, p.GatewayURL, sec.AdminEmail, sec.AdminPassword, srv.SecretsFile, dataDir, srv.MongoURL, srv.NATSURL, srv.MinIO.Endpoint,
		p.MetricsURLs["gateway"], p.MetricsURLs["auth"], p.MetricsURLs["files"], p.MetricsURLs["logs"], srv.Mailpit.API,
		sec.MongoUser, sec.MailpitUser, sec.MailpitPassword, kept,
		net.JoinHostPort(srv.Mailpit.SMTPHost, strconv.Itoa(srv.Mailpit.SMTPPort)), srv.Mailpit.SMTPUser)
}

// keepBanner writes text to path, readable by this user only, replacing
// what a former run kept there.
func keepBanner(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // WriteFile keeps an existing file's mode
		return err
	}
	return os.Rename(tmp, path)
}

// markStopped puts a first line into the kept banner saying the platform
// stopped at, so `make info` does not claim it is running; the logins in it
// stay valid for the next `make run` on the same DATA_DIR.
func markStopped(path string, at time.Time) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	note := fmt.Sprintf("make run stopped at %s; the platform below is not running (`make run` starts it again with the same logins).\n",
		at.Format(time.RFC3339))
	return keepBanner(path, note+string(b))
}

// bannerPath is DATA_DIR's banner file, absolute when it can be.
func bannerPath(dataDir string) string {
	p := filepath.Join(dataDir, BannerFile)
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// quietWriter passes writes through and notes when the last one was, so the
// banner can wait until the processes' start-up lines have been written
// rather than be scrolled away by them.
type quietWriter struct {
	w    io.Writer
	mu   sync.Mutex
	last time.Time
}

func (q *quietWriter) Write(b []byte) (int, error) {
	q.mu.Lock()
	q.last = time.Now()
	q.mu.Unlock()
	return q.w.Write(b)
}

// waitQuiet returns once nothing has been written for quiet, or after max,
// or when ctx ends.
func (q *quietWriter) waitQuiet(ctx context.Context, quiet, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		q.mu.Lock()
		since := time.Since(q.last)
		q.mu.Unlock()
		if since >= quiet {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(quiet-since, time.Until(deadline))):
		}
	}
}
