package service

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/acme/platform/pkg/config"
)

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{
		"debug": slog.LevelDebug, "DEBUG": slog.LevelDebug, "info": slog.LevelInfo, "": slog.LevelInfo,
		"warn": slog.LevelWarn, "Warning": slog.LevelWarn, "error": slog.LevelError,
	} {
		if got, err := ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"verbose", "info+1", "0"} {
		if _, err := ParseLevel(in); err == nil {
			t.Errorf("ParseLevel(%q) accepted", in)
		}
	}
}

// start runs Start for service "auth" with the environment env and
// returns the process and what it wrote.
func start(t *testing.T, env map[string]string) (*Process, *bytes.Buffer, error) {
	t.Helper()
	r := config.New("AUTH", func(k string) string { return env[k] }, config.Logging)
	var out bytes.Buffer
	p, err := Start("auth", &out, r.String("LOG_LEVEL"), r)
	return p, &out, err
}

func lines(t *testing.T, out *bytes.Buffer) []map[string]any {
	t.Helper()
	var ls []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		ls = append(ls, m)
	}
	return ls
}

func TestStartLogsAtLevel(t *testing.T) {
	for _, c := range []struct {
		name    string
		env     map[string]string
		debug   bool // a Debug line is written
		info    bool // an Info line is written
		warning bool
	}{
		{"defaultInfo", nil, false, true, true},
		{"sharedDebug", map[string]string{"LOG_LEVEL": "debug"}, true, true, true},
		{"prefixedWins", map[string]string{"LOG_LEVEL": "debug", "AUTH_LOG_LEVEL": "warn"}, false, false, true},
		{"error", map[string]string{"LOG_LEVEL": "error"}, false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, out, err := start(t, c.env)
			if err != nil {
				t.Fatal(err)
			}
			out.Reset() // the configuration line
			p.Log.Debug("probe")
			p.Log.Info("listening")
			p.Log.Warn("careful")
			var msgs []string
			if out.Len() > 0 {
				for _, l := range lines(t, out) {
					if l["service"] != "auth" {
						t.Errorf("line without the service key: %v", l)
					}
					msgs = append(msgs, l["msg"].(string))
				}
			}
			for msg, want := range map[string]bool{"probe": c.debug, "listening": c.info, "careful": c.warning} {
				if got := slices.Contains(msgs, msg); got != want {
					t.Errorf("%s logged: %v, want %v (lines %q)", msg, got, want, msgs)
				}
			}
		})
	}
}

func TestStartLogsConfiguration(t *testing.T) {
	_, out, err := start(t, map[string]string{"AUTH_LOG_LEVEL": "info"})
	if err != nil {
		t.Fatal(err)
	}
	ls := lines(t, out)
	if len(ls) != 1 || ls[0]["msg"] != "configuration" || ls[0]["AUTH_LOG_LEVEL"] != "info" {
		t.Fatalf("want one configuration line with AUTH_LOG_LEVEL, got %v", ls)
	}
}

func TestStartRefusesABadLevel(t *testing.T) {
	_, out, err := start(t, map[string]string{"LOG_LEVEL": "loud"})
	if err == nil || !strings.Contains(err.Error(), "AUTH_LOG_LEVEL") || !strings.Contains(err.Error(), "loud") {
		t.Fatalf("Start = %v, want an error naming AUTH_LOG_LEVEL and the value", err)
	}
	if out.Len() != 0 {
		t.Fatalf("wrote %q before refusing", out)
	}
}

func TestCloseRunsDeferredLastFirstOnce(t *testing.T) {
	p, _, err := start(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	for i := range 3 {
		p.Defer(func() { order = append(order, i) })
	}
	if err := p.Stop(context.Canceled); err != context.Canceled {
		t.Fatalf("Stop = %v, want the error it was given", err)
	}
	p.Close()
	if !slices.Equal(order, []int{2, 1, 0}) {
		t.Fatalf("closers ran in order %v, want [2 1 0] once", order)
	}
}
