package embedded

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/userevents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSWithUsers enforces deploy/nats.conf's users with the passwords
// given: no login, a wrong one, and a user publishing or subscribing
// beyond its permissions are refused.
func TestNATSWithUsersEnforcesTheConfig(t *testing.T) {
	pw := map[string]string{"auth": "pw-auth", "files": "pw-files", "logs": "pw-logs", "gateway": "pw-gateway", "publisher": "pw-pub"}
	conf := filepath.Join("..", "..", "deploy", "nats.conf")
	if _, err := NATSWithUsers(NATSUsersOptions{Config: conf, Passwords: map[string]string{"auth": "x"}, Dir: t.TempDir(), Host: "127.0.0.1"}); err == nil ||
		!strings.Contains(err.Error(), "no password") {
		t.Fatalf("missing passwords: %v, want refused", err)
	}
	s, err := NATSWithUsers(NATSUsersOptions{Config: conf, Passwords: pw, Dir: t.TempDir(), Host: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if _, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(0)); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("connect without a login: %v, want an authorization violation", err)
	}
	if _, err := nats.Connect(s.ClientURL(), nats.UserInfo("files", "pw-auth"), nats.MaxReconnects(0)); err == nil {
		t.Fatal("connect with another user's password: accepted")
	}
	for _, user := range []string{"files", "logs", "gateway", "publisher"} {
		violations := make(chan error, 4)
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, pw[user]), nats.MaxReconnects(0),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		if err := nc.Publish("acme.users.deleted", []byte(`{"userId":"x"}`)); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		select {
		case err := <-violations:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "acme.users.deleted") {
				t.Fatalf("%s publishing acme.users.deleted: %v", user, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s may publish acme.users.deleted", user)
		}
		if _, err := nc.SubscribeSync(">"); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		select {
		case err := <-violations:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("%s subscribing to >: %v", user, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s may subscribe to >", user)
		}
		nc.Close()
	}
	// auth may: the durable stream stores its deletion.
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("auth", "pw-auth"), nats.CustomInboxPrefix("_INBOX_auth"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := userevents.EnsureStream(ctx, js, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := userevents.PublishDeleted(ctx, js, "acme", "u1"); err != nil {
		t.Fatalf("auth publishing a deletion: %v", err)
	}
}
