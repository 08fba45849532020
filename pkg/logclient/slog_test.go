package logclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/testkit"
)

// Error records go both to the local log and to the stream; lower levels
// only to the local log.
func TestSlogHandlerPublishesErrors(t *testing.T) {
	s := testkit.Get(t, testkit.NATS)
	prefix := s.SubjectPrefix(t)
	st := createStream(t, s.JS, prefix)
	c, err := logclient.New(s.NATS, logclient.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	var local bytes.Buffer
	log := slog.New(logclient.SlogHandler(slog.NewJSONHandler(&local, nil), c, "ACME-AUTH")).With("svc", "auth")
	log.Info("fine")
	log.Warn("hmm")
	log.Error("store failed", "err", "connection refused")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(local.String(), "\n"); got != 3 {
		t.Fatalf("local log has %d lines, want 3", got)
	}
	if got := streamMsgs(t, st); got != 1 {
		t.Fatalf("stream holds %d messages, want 1 (the error)", got)
	}
	raw, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var m logclient.Message
	if err := json.Unmarshal(raw.Data, &m); err != nil {
		t.Fatal(err)
	}
	if m.App != "ACME-AUTH" || m.Type != "error" || m.LogBody != "store failed svc=auth err=connection refused" {
		t.Fatalf("payload %+v", m)
	}
}
