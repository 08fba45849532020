package containers

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Docker runs a docker command and returns its combined output.
func Docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// GatewayURLs are the loopback URLs of the gateway replicas' published
// ports, by replica number (GATEWAY_PORT may be a range, one port each).
func (s *Stack) GatewayURLs(ctx context.Context, replicas int) ([]string, error) {
	var urls []string
	for i := 1; i <= replicas; i++ {
		out, err := s.Compose(ctx, "port", "--index", fmt.Sprint(i), "gateway", "8080")
		if err != nil {
			return nil, fmt.Errorf("compose port gateway #%d: %w: %s", i, err, out)
		}
		addr := strings.TrimSpace(out)
		_, port, ok := strings.Cut(addr, ":")
		if !ok {
			return nil, fmt.Errorf("compose port gateway #%d: %q", i, out)
		}
		urls = append(urls, "http://127.0.0.1:"+port)
	}
	return urls, nil
}

// LogLine is one line of a container's output with Docker's timestamp.
type LogLine struct {
	At   time.Time
	Text string
}

// Logs reads a container's output since a time (zero: all of it).
func Logs(ctx context.Context, id string, since time.Time) ([]LogLine, error) {
	args := []string{"logs", "--timestamps"}
	if !since.IsZero() {
		args = append(args, "--since", since.UTC().Format(time.RFC3339Nano))
	}
	out, err := exec.CommandContext(ctx, "docker", append(args, id)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("docker logs %s: %w", id, err)
	}
	var lines []LogLine
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ts, text, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		lines = append(lines, LogLine{at, text})
	}
	return lines, sc.Err()
}

// IsRequest reports whether a service's log line is its access log line of
// a request to route (pkg/web.AccessLog, JSON); route "" matches any route
// but the health and metrics endpoints.
func IsRequest(line, route string) bool {
	if !strings.Contains(line, `"msg":"request"`) {
		return false
	}
	if route != "" {
		return strings.Contains(line, `"route":"`+route+`"`)
	}
	for _, r := range []string{"/readyz", "/healthz", "/metrics"} {
		if strings.Contains(line, `"route":"`+r+`"`) {
			return false
		}
	}
	return true
}
