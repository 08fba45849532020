package sessions

import (
	"context"
	"encoding/json"
	"github.com/acme/platform/pkg/testkit"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/nats-io/nats.go"
)

// A revocation published and flushed before Sync is applied to the
// resolver when Sync returns (the fence's concurrency is tested in
// pkg/natsfence): the session and every identity of the user are evicted.
func TestRevocationsEvictBeforeSyncReturns(t *testing.T) {
	testkit.SkipShort(t)
	srv, err := embedded.NATS(t.TempDir(), "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	gw, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	auth, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()

	const subject = "acme.auth.revoked"
	r := NewResolver(nil, "", nil, time.Minute)
	rv, err := NewRevocations(gw, subject, r, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	if err := gw.Flush(); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	r.byHash["h1"] = Identity{UserID: "u1", Hash: "h1", expires: exp}
	r.byHash["h2"] = Identity{UserID: "u2", Hash: "h2", expires: exp}
	r.byHash["h3"] = Identity{UserID: "u3", Hash: "h3", expires: exp}

	for _, rev := range []Revocation{{Sessions: []string{"h1"}, Users: []string{}}, {Sessions: []string{}, Users: []string{"u2"}}} {
		msg, _ := json.Marshal(rev)
		if err := auth.Publish(subject, msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := auth.Publish(subject, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if err := auth.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := rv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if _, ok := r.byHash["h1"]; ok {
		t.Error("revoked session h1 still cached")
	}
	if _, ok := r.byHash["h2"]; ok {
		t.Error("session h2 of revoked user u2 still cached")
	}
	if _, ok := r.byHash["h3"]; !ok {
		t.Error("session h3 was evicted, nothing revoked it")
	}
}

func TestKeyWellFormed(t *testing.T) {
	good := APIKeyPrefix + strings.Repeat("A", 43)
	for s, want := range map[string]bool{
		good: true, good[:len(good)-1]: false, good + "A": false, strings.Repeat("A", 48): false,
		APIKeyPrefix + strings.Repeat("A", 42) + "!": false, strings.Repeat("A", 43): false,
	} {
		if KeyWellFormed(s) != want {
			t.Errorf("KeyWellFormed(%q) = %v", s, !want)
		}
	}
}
