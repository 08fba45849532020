package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"github.com/acme/platform/pkg/testkit"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/scripts/composecheck"
	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// generate runs gensecrets and reads its output as docker compose reads .env.
func generate(t *testing.T) map[string]string {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf, "ops@example.com"); err != nil {
		t.Fatal(err)
	}
	env, err := dotenv.Parse(&buf)
	if err != nil {
		t.Fatalf("compose cannot read the output: %v\n%s", err, buf.String())
	}
	return env
}

// TestEnvFileServesCompose: the output is everything compose.yaml needs,
// and each value is what its reader accepts.
func TestEnvFileServesCompose(t *testing.T) {
	env := generate(t)
	root, err := composecheck.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := composecheck.LoadProject(ctx, root, env, true)
	if err != nil {
		t.Fatalf("compose.yaml does not load with the generated .env: %v", err)
	}
	for _, v := range composecheck.SecretEnvVars(p) {
		if env[v] == "" {
			t.Errorf("secret variable %s is not generated", v)
		}
	}
	pub, err := identity.ParsePublicKey(env["IDENTITY_PUBLIC_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	priv, err := identity.ParsePrivateKey(env["IDENTITY_PRIVATE_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public().(ed25519.PublicKey)) {
		t.Error("the identity keys are not a pair")
	}
	if env["ADMIN_EMAIL"] != "ops@example.com" || len(env["ADMIN_PASSWORD"]) < 16 {
		t.Errorf("admin %q / password of %d characters", env["ADMIN_EMAIL"], len(env["ADMIN_PASSWORD"]))
	}
	if len(env["MFA_KEY"]) < 32 { // auth's minimum
		t.Errorf("MFA_KEY of %d characters", len(env["MFA_KEY"]))
	}
	if len(env["S3_ACCESS_KEY"]) < 3 || len(env["S3_SECRET_KEY"]) < 8 { // MinIO's minimums
		t.Error("MinIO keys too short")
	}
	other := generate(t)
	for k, v := range env {
		if (strings.Contains(k, "PASSWORD") || strings.Contains(k, "KEY") || strings.Contains(k, "CREDENTIAL")) && other[k] == v {
			t.Errorf("%s is the same in two runs", k)
		}
	}
}

// TestNATSPasswordsSurviveTheConfigParser: nats-server parses a variable's
// value as configuration; every generated password must come out as the
// same string, and log the service in.
func TestNATSPasswordsSurviveTheConfigParser(t *testing.T) {
	testkit.SkipShort(t)
	root, err := composecheck.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "deploy", "nats.conf")
	var env map[string]string
	for range 50 {
		env = generate(t)
		for _, u := range natsUsers {
			t.Setenv("NATS_"+u+"_PASSWORD", env["NATS_"+u+"_PASSWORD"])
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		if len(opts.Users) != len(natsUsers) {
			t.Fatalf("nats.conf has %d users, gensecrets knows %d", len(opts.Users), len(natsUsers))
		}
		for _, u := range opts.Users {
			if want := env["NATS_"+strings.ToUpper(u.Username)+"_PASSWORD"]; u.Password != want {
				t.Fatalf("user %s: nats-server read the password %q as %q", u.Username, want, u.Password)
			}
		}
	}
	srv, err := embedded.NATSWithConfig(conf, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, u := range natsUsers {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(strings.ToLower(u), env["NATS_"+u+"_PASSWORD"]), nats.NoReconnect())
		if err != nil {
			t.Errorf("%s cannot log in: %v", u, err)
			continue
		}
		nc.Close()
	}
}

func TestOutputFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".env")
	if err := run(path, "admin@acme.local", ""); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	before, _ := os.ReadFile(path)
	if err := run(path, "admin@acme.local", ""); err == nil {
		t.Error("an existing .env was replaced")
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("an existing .env was changed")
	}
}

// TestNATSRoutePasswordSurvivesTheClusterConfig: the high-availability
// profile's nodes (deploy/nats-cluster.conf) read NATS_ROUTE_PASSWORD for
// the routes they accept and, inside the route URLs compose.ha.yaml builds
// from it, for the routes they open: both must come out as generated.
func TestNATSRoutePasswordSurvivesTheClusterConfig(t *testing.T) {
	root, err := composecheck.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "deploy", "nats-cluster.conf")
	for range 20 {
		env := generate(t)
		pw := env["NATS_ROUTE_PASSWORD"]
		if len(pw) < 32 {
			t.Fatalf("NATS_ROUTE_PASSWORD %q", pw)
		}
		for _, u := range natsUsers {
			t.Setenv("NATS_"+u+"_PASSWORD", env["NATS_"+u+"_PASSWORD"])
		}
		t.Setenv("NATS_ROUTE_PASSWORD", pw)
		t.Setenv("NATS_SERVER_NAME", "nats2")
		t.Setenv("NATS_CLUSTER_ADVERTISE", "route-nats2:6222")
		for i := 1; i <= 3; i++ {
			t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", i), fmt.Sprintf("nats-route://route:%s@route-nats%d:6222", pw, i))
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		if opts.ServerName != "nats2" || opts.Cluster.Username != "route" || opts.Cluster.Password != pw || len(opts.Users) != len(natsUsers) {
			t.Fatalf("server %q, cluster user %q password %q (want %q), %d users", opts.ServerName, opts.Cluster.Username, opts.Cluster.Password, pw, len(opts.Users))
		}
		if len(opts.Routes) != 3 {
			t.Fatalf("%d routes", len(opts.Routes))
		}
		for _, r := range opts.Routes {
			if p, _ := r.User.Password(); r.User.Username() != "route" || p != pw {
				t.Fatalf("route %s: login %q/%q", r.Host, r.User.Username(), p)
			}
		}
	}
}
