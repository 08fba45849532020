// Package healthcheck lets a service binary probe its own readiness, so a
// container image without a shell, curl or wget (distroless) can still have
// a HEALTHCHECK: `/app healthcheck` GETs http://127.0.0.1:<port>/readyz,
// with the port taken from the service's own listen address, and exits 0
// when the answer is 2xx, 1 otherwise.
//
// pkg/service.Main wires it first thing in every binary, with the listen
// address read from the service's settings table:
//
//	if healthcheck.Requested(os.Args[1:]) {
//		os.Exit(healthcheck.Probe(addr, addr, os.Stderr))
//	}
package healthcheck

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Path is the endpoint probed: readiness, which every service serves.
const Path = "/readyz"

// Timeout bounds one probe; keep it below the compose healthcheck timeout.
const Timeout = 4 * time.Second

// Requested reports whether the command line (os.Args[1:]) asks for a probe:
// "healthcheck", "-healthcheck" or "--healthcheck" as the first argument.
func Requested(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0] {
	case "healthcheck", "-healthcheck", "--healthcheck":
		return true
	}
	return false
}

// URL is the readiness URL of a server listening on addr. A wildcard or
// empty host (":8081", "0.0.0.0:8081", "[::]:8081") is reached on
// 127.0.0.1; a specific host is kept.
func URL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", addr, err)
	}
	if port == "" || port == "0" {
		return "", fmt.Errorf("listen address %q has no fixed port to probe", addr)
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + Path, nil
}

// Check GETs url and returns nil when the answer is 2xx.
func Check(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: %s %s", url, resp.Status, body)
	}
	return nil
}

// Probe checks the server listening on addr (def when addr is empty) and
// returns the process exit code: 0 ready, 1 not. Failures are written to
// stderr, which Docker keeps in the container's health log.
func Probe(addr, def string, stderr io.Writer) int {
	if addr == "" {
		addr = def
	}
	url, err := URL(addr)
	if err == nil {
		err = ProbeURL(url)
	}
	if err != nil {
		fmt.Fprintln(stderr, "healthcheck:", err)
		return 1
	}
	return 0
}

// ProbeURL checks url within Timeout, without proxies or keep-alive.
func ProbeURL(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	return Check(ctx, client, url)
}
