package userevents

import (
	"context"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The stream is made once whoever asks first, a deletion published twice
// within the duplicate window is stored once, and its payload reads back.
func TestPublishDeleted(t *testing.T) {
	k := testkit.Get(t, testkit.NATS)
	prefix := k.SubjectPrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		if err := EnsureStream(ctx, k.JS, prefix); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := PublishDeleted(ctx, k.JS, prefix, "64b000000000000000000001"); err != nil {
			t.Fatal(err)
		}
	}
	if err := PublishDeleted(ctx, k.JS, prefix, "64b000000000000000000002"); err != nil {
		t.Fatal(err)
	}
	st, err := k.JS.Stream(ctx, StreamName(prefix))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || info.Config.Storage != jetstream.FileStorage {
		t.Fatalf("stream holds %d messages (want 2: the repeat is dropped), storage %v", info.State.Msgs, info.Config.Storage)
	}
	msg, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != DeletedSubject(prefix) {
		t.Fatalf("subject %q", msg.Subject)
	}
	d, err := ParseDeleted(msg.Data)
	if err != nil || d.UserID != "64b000000000000000000001" {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestParseDeletedRefusesMalformed(t *testing.T) {
	for _, in := range []string{``, `{}`, `{"userId":""}`, `[1]`, `{"userId":1}`} {
		if _, err := ParseDeleted([]byte(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}
