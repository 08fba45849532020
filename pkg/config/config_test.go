package config

import (
	"testing"
	"time"
)

func TestPrefixThenShared(t *testing.T) {
	env := map[string]string{"AUTH_MONGO_URL": "own", "MONGO_URL": "shared", "NATS_URL": "n", "ADDR": "x", "AUTH_TTL": "bad"}
	r := New("auth", func(k string) string { return env[k] })
	if got := r.String("MONGO_URL", "d"); got != "own" {
		t.Fatalf("prefixed: %s", got)
	}
	if got := r.String("NATS_URL", "d"); got != "n" {
		t.Fatalf("shared: %s", got)
	}
	if got := r.Own("ADDR", "def"); got != "def" {
		t.Fatalf("Own must ignore the unprefixed key: %s", got)
	}
	if got := r.Duration("TTL", time.Minute); got != time.Minute || r.Err() == nil {
		t.Fatalf("bad duration: %v %v", got, r.Err())
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"10": 10, "4KiB": 4096, "64MiB": 64 << 20, "1GiB": 1 << 30} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Fatalf("%s: %d %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-1", "1TB", "x"} {
		if _, err := ParseSize(in); err == nil {
			t.Fatalf("%q accepted", in)
		}
	}
}
