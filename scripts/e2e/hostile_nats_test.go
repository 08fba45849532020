package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/acme/platform/scripts/devstack/devenv"
	"github.com/nats-io/nats.go"
)

// natsSnooper is one login of deploy/nats.conf trying to read replies that
// are not its own: what reaches its subscriptions, and what the server
// refused.
type natsSnooper struct {
	user string
	nc   *nats.Conn
	mu   sync.Mutex
	got  []*nats.Msg
	errs []error
}

func (s *natsSnooper) subscribe(t *testing.T, subject string) {
	t.Helper()
	if _, err := s.nc.Subscribe(subject, func(m *nats.Msg) {
		s.mu.Lock()
		s.got = append(s.got, m)
		s.mu.Unlock()
	}); err != nil {
		t.Fatalf("%s: subscribe %s: %v", s.user, subject, err)
	}
}

// refused reports whether the server refused the subscription to subject
// (a permissions violation naming it), waiting up to 3 seconds.
func (s *natsSnooper) refused(subject string) bool {
	_ = s.nc.Flush()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		for _, err := range s.errs {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `Subscription to "`+subject+`"`) {
				s.mu.Unlock()
				return true
			}
		}
		s.mu.Unlock()
	}
	return false
}

// Issue 43, row 1: logged in to NATS as publisher (the login of a
// log-publishing application), SUB _INBOX.> read auth's audit event of a
// failed sign-in (target e-mail, client IP, user agent) and the JetStream
// API replies meant for the logs service: every login could subscribe to
// the shared reply prefix. Each login now replies under its own prefix,
// _INBOX_<user>, and may subscribe to that one only.
func TestHostileNATSInboxSnooping(t *testing.T) {
	srv, p, _ := devPlatform(t)
	sec := srv.Secrets
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	const target = "snooped@example.com"
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": target, "password": "correct horse battery", "fullName": "S", "edv": "E-1"})

	// Every login subscribes to the shared prefix and to every other
	// login's; each is refused.
	var snoopers []*natsSnooper
	for _, user := range devenv.NATSUsers {
		s := &natsSnooper{user: user}
		nc, err := nats.Connect(srv.NATSURL, nats.UserInfo(user, sec.NATSPasswords[user]), nats.MaxReconnects(0),
			nats.CustomInboxPrefix(natsconn.InboxPrefix(user)),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				s.mu.Lock()
				s.errs = append(s.errs, err)
				s.mu.Unlock()
			}))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		defer nc.Close()
		s.nc = nc
		snoopers = append(snoopers, s)
		subjects := []string{"_INBOX.>"}
		for _, other := range devenv.NATSUsers {
			if other != user {
				subjects = append(subjects, natsconn.InboxPrefix(other)+".>")
			}
		}
		for _, subj := range subjects {
			s.subscribe(t, subj)
		}
		for _, subj := range subjects {
			if !s.refused(subj) {
				t.Errorf("%s may subscribe to %s", user, subj)
			}
		}
	}

	// One failed sign-in: auth publishes its audit event, JetStream
	// delivers it to the logs service, which stores it.
	const agent = "inbox-snooping-probe/1.0"
	st := newClient(t, p.GatewayURL).api.Do("POST", "/signin", []byte(`{"email":"`+target+`","password":"wrong password"}`),
		map[string]string{"Content-Type": "application/json", "User-Agent": agent}).Status
	if st != 401 {
		t.Fatalf("failed sign-in: %d, want 401", st)
	}
	apptest.Eventually(t, 30*time.Second, func() error {
		for _, r := range logsOf(t, admin.mustStatus(201, "GET", "/log/log/1/ACME-AUTH?limit=100", nil)) {
			if body, _ := r["logBody"].(string); strings.Contains(body, `"signin.failed"`) && strings.Contains(body, target) {
				return nil
			}
		}
		return errors.New("the audit event of the failed sign-in is not stored yet")
	})

	// The platform works under the new prefixes: a sign-in, and a record
	// published as the publisher login, acknowledged and stored.
	signIn(t, p.GatewayURL, target, "correct horse battery")
	u, err := url.Parse(srv.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("publisher", sec.NATSPasswords["publisher"])
	pub, err := natsconn.Connect(u.String(), "hostile-publisher", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	lc, err := logclient.New(pub, logclient.Options{Prefix: devenv.SubjectPrefix, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("published as publisher at %d", time.Now().UnixNano())
	if !lc.Log("SERVER-APP-A", logclient.TypeLog, body, "inbox-1") {
		t.Fatal("the record was refused")
	}
	if err := lc.Close(ctx); err != nil || lc.Stats().Published != 1 {
		t.Fatalf("publisher's record not acknowledged: %v %+v", err, lc.Stats())
	}
	apptest.Eventually(t, 30*time.Second, func() error {
		for _, r := range logsOf(t, admin.mustStatus(201, "GET", "/log/log/1/SERVER-APP-A?metricsId=inbox-1", nil)) {
			if r["logBody"] == body {
				return nil
			}
		}
		return errors.New("the publisher's record is not stored yet")
	})

	// Nothing of anybody's replies reached a snooper: not the audit event,
	// not the JetStream answers to the logs service or to the publisher.
	for _, s := range snoopers {
		_ = s.nc.Flush()
		s.mu.Lock()
		audit := 0
		for _, m := range s.got {
			if strings.Contains(string(m.Data), "signin.failed") && strings.Contains(string(m.Data), target) {
				audit++
			}
		}
		if len(s.got) > 0 {
			t.Errorf("%s read %d messages not its own (the failed sign-in's audit event %d times), the first on %s: %.200s",
				s.user, len(s.got), audit, s.got[0].Subject, s.got[0].Data)
		}
		s.mu.Unlock()
	}
}
