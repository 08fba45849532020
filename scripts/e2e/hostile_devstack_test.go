package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/userevents"
	"github.com/acme/platform/scripts/devstack/devenv"
	"github.com/acme/platform/scripts/stack"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// devPlatform starts what `make run` starts, through the code it runs
// (scripts/devstack/devenv), with its data in a temporary DATA_DIR and the
// gateway and Mailpit on free ports.
func devPlatform(t *testing.T) (*devenv.Servers, *stack.Platform, *stack.Output) {
	testkit.SkipShort(t)
	t.Helper()
	bins := builtServices(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := &stack.Output{}
	srv, err := devenv.Start(ctx, devenv.Config{DataDir: filepath.Join(t.TempDir(), "data"), GatewayAddr: "127.0.0.1:0",
		MailpitAddr: "127.0.0.1:0", Out: out, Log: out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(srv.Stop)
	p, err := srv.Launch(bins)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("output:\n%s", out.Tail(200))
		}
	})
	return srv, p, out
}

// Issue 34, row 2: a local process reached `make run`'s internal servers
// without credentials, read every password hash and a TOTP secret stored
// as plain:…, subscribed to every subject, and published a forged
// acme.users.deleted that erased a living user's files. Each server of
// `make run` now takes a login, and only auth may publish deletions.
func TestHostileDevServersNeedCredentials(t *testing.T) {
	srv, p, _ := devPlatform(t)
	sec := srv.Secrets
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if fi, err := os.Stat(filepath.Dir(srv.SecretsFile)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("DATA_DIR: %v %v, want mode 0700", fi.Mode(), err)
	}
	if fi, err := os.Stat(srv.SecretsFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dev-secrets.json: %v %v, want mode 0600", fi.Mode(), err)
	}

	// A user with a file, and a second factor.
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	const pw = "correct horse battery"
	var ids []string
	for _, email := range []string{"victim@example.com", "decoy@example.com"} {
		m := admin.mustStatus(201, "POST", "/users", map[string]any{"email": email, "password": pw, "fullName": "U", "edv": "E-1"})
		ids = append(ids, m["user"].(map[string]any)["id"].(string))
	}
	victimID, decoyID := ids[0], ids[1]
	victim := signIn(t, p.GatewayURL, "victim@example.com", pw)
	r := victim.upload("/upload/file", part{field: "file", filename: "keep.txt", contentType: "text/plain", data: strings.NewReader("keep me")})
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	fileID := r.json(t)["file"].(map[string]any)["id"].(string)
	enrol(t, victim)

	t.Run("mongo", func(t *testing.T) {
		anon, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + srv.Mongo.Addr + "/").SetServerSelectionTimeout(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer anon.Disconnect(ctx)
		for _, coll := range []string{"users", "mfa_factors"} {
			var ce mongo.CommandError
			err := anon.Database("acme").Collection(coll).FindOne(ctx, bson.M{}).Err()
			if !errors.As(err, &ce) || ce.Code != 13 {
				t.Errorf("find on acme.%s without a login: %v, want Unauthorized (13)", coll, err)
			}
		}
		var ce mongo.CommandError
		if _, err := anon.Database("acme").Collection("users").UpdateOne(ctx, bson.M{}, bson.M{"$set": bson.M{"role": "admin"}}); !errors.As(err, &ce) || ce.Code != 13 {
			t.Errorf("update without a login: %v, want Unauthorized (13)", err)
		}
		if _, err := anon.ListDatabaseNames(ctx, bson.M{}); err == nil {
			t.Error("listDatabases without a login answered")
		}
		// The services' login reads them, and the TOTP secret is sealed.
		authed, err := mongo.Connect(options.Client().ApplyURI(srv.Mongo.URI).SetServerSelectionTimeout(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer authed.Disconnect(ctx)
		var factor bson.M
		if err := authed.Database("acme").Collection("mfa_factors").FindOne(ctx, bson.M{}).Decode(&factor); err != nil {
			t.Fatalf("find with the login: %v", err)
		}
		if s, _ := factor["secret"].(string); !strings.HasPrefix(s, "aesgcm:") {
			t.Errorf("the stored TOTP secret is %.12q…, want sealed (aesgcm:)", s)
		}
	})

	t.Run("mailpit", func(t *testing.T) {
		for _, path := range []string{"/api/v1/messages", "/api/v1/info", "/"} {
			resp, err := http.Get(srv.Mailpit.API + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s without a login: %d, want 401", path, resp.StatusCode)
			}
		}
		if _, err := srv.Mailpit.Client().To(ctx, "victim@example.com"); err != nil {
			t.Errorf("the API with its login: %v", err)
		}
	})

	t.Run("nats", func(t *testing.T) {
		if nc, err := nats.Connect(srv.NATSURL, nats.MaxReconnects(0)); err == nil {
			nc.Close()
			t.Fatal("NATS accepted a connection without a login")
		} else if !strings.Contains(err.Error(), "Authorization Violation") {
			t.Fatalf("connect without a login: %v, want an authorization violation", err)
		}
		// Every user but auth is refused a deletion and the subject ">".
		for _, user := range []string{"files", "logs", "gateway", "publisher"} {
			violations := make(chan error, 8)
			nc, err := nats.Connect(srv.NATSURL, nats.UserInfo(user, sec.NATSPasswords[user]), nats.MaxReconnects(0),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
			if err != nil {
				t.Fatalf("%s: %v", user, err)
			}
			forged := []byte(`{"userId":"` + victimID + `"}`)
			if err := nc.Publish("acme.users.deleted", forged); err != nil {
				t.Fatal(err)
			}
			if _, err := nc.SubscribeSync(">"); err != nil {
				t.Fatal(err)
			}
			_ = nc.Flush()
			deadline := time.After(5 * time.Second)
			var refusedPub, refusedSub bool
			for !refusedPub || !refusedSub {
				select {
				case err := <-violations:
					if errors.Is(err, nats.ErrPermissionViolation) {
						refusedPub = refusedPub || strings.Contains(err.Error(), `Publish to "acme.users.deleted"`)
						refusedSub = refusedSub || strings.Contains(err.Error(), `Subscription to ">"`)
					}
				case <-deadline:
					t.Fatalf("%s: publishing acme.users.deleted refused %v, subscribing to > refused %v", user, refusedPub, refusedSub)
				}
			}
			nc.Close()
		}
	})

	t.Run("forged deletion erases nothing", func(t *testing.T) {
		// files, the user with the most rights but auth's, forges the
		// victim's deletion, as core NATS and through JetStream.
		nc, err := nats.Connect(srv.NATSURL, nats.UserInfo("files", sec.NATSPasswords["files"]), nats.CustomInboxPrefix(natsconn.InboxPrefix("files")))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		forged := []byte(`{"userId":"` + victimID + `"}`)
		if err := nc.Publish("acme.users.deleted", forged); err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		if _, err := js.Publish(pctx, "acme.users.deleted", forged); err == nil {
			t.Error("the user stream acknowledged a deletion published by files")
		}
		pcancel()
		// Then a real deletion (of the decoy, by auth): once files has
		// acknowledged it, it has handled every event before it.
		admin.mustStatus(200, "DELETE", "/users/"+decoyID, nil)
		stream, err := js.Stream(ctx, userevents.StreamName("acme"))
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cons, err := js.Consumer(ctx, userevents.StreamName("acme"), "files-erasure")
		if err != nil {
			t.Fatal(err)
		}
		for {
			ci, err := cons.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ci.AckFloor.Stream >= info.State.LastSeq {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("files did not handle the decoy's deletion: %+v", ci)
			}
			time.Sleep(50 * time.Millisecond)
		}
		victim.mustStatus(200, "GET", "/retrieve/file/"+fileID, nil)
		if info.State.Msgs != 1 {
			t.Fatalf("the user stream holds %d events, want 1 (the decoy's deletion by auth)", info.State.Msgs)
		}
	})
}

// Issue 34, row 1 (`make run`): a service process that died took the
// whole platform down. `make run` now starts it again in its place; the
// rest keeps serving meanwhile.
func TestHostileDevStackRestartsAKilledService(t *testing.T) {
	srv, p, out := devPlatform(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	supervised := p.Supervise(ctx, stack.DefaultBackoff, out) // what scripts/devstack does
	defer supervised()
	defer p.Stop(10 * time.Second)
	admin := signIn(t, p.GatewayURL, srv.Secrets.AdminEmail, srv.Secrets.AdminPassword)
	admin.mustStatus(200, "GET", "/log/stats", nil)

	oldLogs, oldAuth := p.Proc("logs"), p.Proc("auth")
	for _, proc := range []*stack.Proc{oldLogs, oldAuth} {
		if err := syscall.Kill(proc.Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-proc.Exited()
	}
	admin.mustStatus(200, "GET", "/files", nil) // files and the gateway serve on
	deadline := time.Now().Add(time.Minute)
	for p.Proc("logs") == oldLogs || p.Proc("auth") == oldAuth {
		if time.Now().After(deadline) {
			t.Fatal("the killed services were not started again within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	admin.mustStatus(200, "GET", "/log/stats", nil)
	admin.mustStatus(200, "GET", "/me", nil)
	signIn(t, p.GatewayURL, srv.Secrets.AdminEmail, srv.Secrets.AdminPassword)
	for _, name := range []string{"logs", "auth"} {
		if !strings.Contains(out.String(), "supervisor: "+name+" restarted") {
			t.Errorf("no restart line for %s", name)
		}
	}
}
