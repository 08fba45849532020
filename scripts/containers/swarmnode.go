package containers

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
)

// SwarmMarker is the file, in the cache, that says this machine's swarm was
// initialised by a test that has not left it yet: swarm-cleanup.sh leaves
// the swarm when it finds it (a test binary killed by its timeout cleans
// nothing up).
func SwarmMarker() string {
	return filepath.Join(embedded.CacheDir(), "docker", "swarm-initialised-by-test")
}

// JoinSwarm makes this engine a swarm manager: an active swarm is used as
// it is; otherwise `docker swarm init` makes one, and the test leaves it
// again when it ends. The node gets the labels deploy/stack.yaml places
// the stateful services by; those it did not have are removed at the end.
func JoinSwarm(t testing.TB) (node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	state, err := Docker(ctx, "info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}")
	if err != nil {
		t.Fatal(err)
	}
	switch strings.TrimSpace(state) {
	case "active true":
		t.Log("swarm: using the active swarm of this engine (it is left as it is)")
	case "inactive false":
		// swarm init also makes the bridge docker_gwbridge; leaving keeps it.
		_, gwErr := Docker(ctx, "network", "inspect", "docker_gwbridge")
		hadBridge := gwErr == nil
		if err := swarmInit(ctx); err != nil {
			t.Fatal(err)
		}
		marker := "initialised " + time.Now().UTC().Format(time.RFC3339) + "\n"
		if !hadBridge {
			marker += "bridge=new\n"
		}
		if err := os.WriteFile(SwarmMarker(), []byte(marker), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("swarm: initialised a one-node swarm; it is left at the end")
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if out, err := Docker(ctx, "swarm", "leave", "--force"); err != nil {
				t.Errorf("swarm leave: %v %s", err, out)
				return
			}
			os.Remove(SwarmMarker())
			if !hadBridge {
				// The engine can hold a left swarm's endpoint on the bridge
				// for a while (Docker 20.10): try again, and past that leave
				// the bridge, which the next swarm init reuses as it is.
				for try := 1; ; try++ {
					out, err := Docker(ctx, "network", "rm", "docker_gwbridge")
					if err == nil {
						break
					}
					if !strings.Contains(out+err.Error(), "active endpoints") {
						t.Errorf("network rm docker_gwbridge: %v %s", err, out)
						break
					}
					if try == 5 {
						t.Logf("docker_gwbridge kept: the engine still holds an endpoint on it (%s)", strings.TrimSpace(out))
						break
					}
					time.Sleep(2 * time.Second)
				}
			}
		})
	default:
		t.Fatalf("this engine is in a swarm but not a manager (%s): run the test on a manager", strings.TrimSpace(state))
	}
	out, err := Docker(ctx, "node", "inspect", "self", "--format", "{{.ID}} {{json .Spec.Labels}}")
	if err != nil {
		t.Fatal(err)
	}
	id, raw, _ := strings.Cut(strings.TrimSpace(out), " ")
	var labels map[string]string
	_ = json.Unmarshal([]byte(raw), &labels)
	var added []string
	for _, l := range []string{"acme.mongo", "acme.nats", "acme.minio"} {
		if labels[l] == "" {
			added = append(added, l)
		}
	}
	if len(added) > 0 {
		args := []string{"node", "update"}
		for _, l := range added {
			args = append(args, "--label-add", l+"=true")
		}
		if _, err := Docker(ctx, append(args, id)...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := []string{"node", "update"}
			for _, l := range added {
				args = append(args, "--label-rm", l)
			}
			// An error here is the swarm already left.
			_, _ = Docker(ctx, append(args, id)...)
		})
	}
	return id
}

// swarmInit runs `docker swarm init`, naming the address to advertise when
// the engine cannot choose one (several interfaces).
func swarmInit(ctx context.Context) error {
	out, err := Docker(ctx, "swarm", "init")
	if err == nil {
		return nil
	}
	addr := firstGlobalIPv4()
	if addr == "" {
		return fmt.Errorf("swarm init: %w %s", err, out)
	}
	if out, err := Docker(ctx, "swarm", "init", "--advertise-addr", addr); err != nil {
		return fmt.Errorf("swarm init --advertise-addr %s: %w %s", addr, err, out)
	}
	return nil
}

func firstGlobalIPv4() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() && !strings.HasPrefix(n.IP.String(), "172.17.") {
			return n.IP.String()
		}
	}
	return ""
}
