package composecheck

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
)

// loadHA loads compose.yaml with the high-availability override.
func loadHA(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return LoadFiles(ctx, root, env, true, "compose.ha.yaml")
}

// TestHAProfile: compose.ha.yaml makes three NATS nodes and four MinIO
// nodes, each with its own volume, of the images compose.yaml builds, and
// points every service at every node.
func TestHAProfile(t *testing.T) {
	env := maps.Clone(testEnv)
	env["NATS_ROUTE_PASSWORD"] = "testRoutePassword"
	p, err := loadHA(t, env)
	if err != nil {
		t.Fatalf("compose.yaml + compose.ha.yaml do not load: %v", err)
	}
	base, _ := load(t, testEnv, true)
	nats := []string{"nats", "nats2", "nats3"}
	minio := []string{"minio", "minio2", "minio3", "minio4"}
	volumes := map[string]string{}
	for _, name := range append(slices.Clone(nats), minio...) {
		s, ok := p.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		want := base.Services[strings.TrimRight(name, "234")].Image
		if s.Image != want {
			t.Errorf("%s: image %q, want compose.yaml's %q (no new image)", name, s.Image, want)
		}
		if s.Build != nil && name != "nats" && name != "minio" {
			t.Errorf("%s: builds an image; the nodes share compose.yaml's", name)
		}
		if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s: no healthcheck", name)
		}
		if len(s.Volumes) != 1 || s.Volumes[0].Target != "/data" {
			t.Fatalf("%s: volumes %+v, want one on /data", name, s.Volumes)
		}
		v := s.Volumes[0].Source
		if other, dup := volumes[v]; dup {
			t.Errorf("%s and %s share volume %s", name, other, v)
		}
		if v == "nats-data" || v == "minio-data" {
			t.Errorf("%s: runs on the single-node volume %s", name, v)
		}
		volumes[v] = name
	}
	names := map[string]bool{}
	for i, name := range nats {
		e := p.Services[name].Environment
		server := *e["NATS_SERVER_NAME"]
		if server != fmt.Sprintf("nats%d", i+1) || names[server] {
			t.Errorf("%s: server name %q", name, server)
		}
		names[server] = true
		if !strings.Contains(*e["NATS_ROUTE_1"], "route:testRoutePassword@") {
			t.Errorf("%s: route URL without the route password", name)
		}
	}
	wantNATS := "nats://nats1:4222,nats://nats2:4222,nats://nats3:4222"
	for _, svc := range []string{"auth", "files", "logs", "gateway"} {
		s := p.Services[svc]
		if got := *s.Environment["NATS_URL"]; got != wantNATS {
			t.Errorf("%s: NATS_URL %q, want every node %q", svc, got, wantNATS)
		}
		for _, n := range nats {
			if c, ok := s.DependsOn[n]; !ok || c.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s does not wait for %s to be healthy", svc, n)
			}
		}
	}
	if got := *p.Services["logs"].Environment["LOGS_STREAM_REPLICAS"]; got != "3" {
		t.Errorf("LOGS_STREAM_REPLICAS %q, want 3", got)
	}
	endpoints := strings.Split(*p.Services["files"].Environment["S3_ENDPOINT"], ",")
	if len(endpoints) != len(minio) {
		t.Errorf("files: S3_ENDPOINT %v, want the %d MinIO nodes", endpoints, len(minio))
	}
	for i, ep := range endpoints {
		if ep != fmt.Sprintf("minio%d:9000", i+1) {
			t.Errorf("files: endpoint %q", ep)
		}
	}
	for _, name := range minio {
		if cmd := strings.Join(p.Services[name].Command, " "); !strings.Contains(cmd, "http://minio{1...4}:9000/data") {
			t.Errorf("%s: command %q, want the four nodes", name, cmd)
		}
	}
	for name, s := range p.Services {
		if len(s.Ports) > 0 && name != "gateway" {
			t.Errorf("%s publishes a port", name)
		}
	}
	// Without the route password the profile refuses to start.
	if _, err := loadHA(t, testEnv); err == nil || !strings.Contains(err.Error(), "NATS_ROUTE_PASSWORD") {
		t.Fatalf("loading without NATS_ROUTE_PASSWORD must fail naming it, got %v", err)
	}
}
