package natsingest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fakeMsg is a message as the consumer sees it; only what parse reads is
// implemented (the rest of jetstream.Msg panics if called).
type fakeMsg struct {
	jetstream.Msg
	subject string
	data    []byte
	hdr     nats.Header
}

func (m *fakeMsg) Subject() string      { return m.subject }
func (m *fakeMsg) Data() []byte         { return m.data }
func (m *fakeMsg) Headers() nats.Header { return m.hdr }
func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: 7}, NumDelivered: 1, Stream: "ACME_LOGS",
		Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, nil
}

// FuzzParse: any subject, message id and payload published to the log
// stream becomes either a valid record or a dead letter with a reason,
// never a panic. A record is accepted only from a payload that is exactly
// one JSON object of logclient.Message's fields whose app and type agree
// with the subject, and carries the message's id.
func FuzzParse(f *testing.F) {
	apps, _ := (&stubApps{}).list()
	in := &Ingestor{Validator: logs.Validator{Apps: logs.NewApps(apps), MaxBody: 1 << 10}, Config: Config{Prefix: "acme"}}
	f.Add("acme.logs.ACME-AUTH.error", "id-1", []byte(`{"app":"ACME-AUTH","type":"error","logBody":"x","createdAt":"2026-01-01T00:00:00Z"}`))
	f.Add("acme.logs.ACME-AUTH.error", "id-1", []byte(`{"logBody":"x"}`))
	f.Add("acme.logs.ACME-AUTH.error", "id-1", []byte(`{"logBody":"x"}}`))
	f.Add("acme.logs.ACME-AUTH.error", "id-1", []byte(`{"logBody":"x"}]`))
	f.Add("acme.logs.ACME-AUTH.error", "id-1", []byte(`{"logBody":"x"} {}`))
	f.Add("acme.logs.ACME-AUTH.error", "", []byte(`{"logBody":"x"}`))
	f.Add("acme.logs.ACME-AUTH.error", "", []byte("plain text\n"))
	f.Add("acme.logs.ACME-AUTH.error", "", []byte("\r\n"))
	f.Add("acme.logs.ACME-AUTH.warn", "id", []byte(`{"logBody":"x"}`))
	f.Add("acme.logs.NOPE.log", "id", []byte(`{"logBody":"x","extra":1}`))
	f.Add("acme.logs.ACME-AUTH.log.x", "id", []byte(`[]`))
	f.Add("acme.logs.ACME-AUTH.log", strings.Repeat("i", 129), []byte(`{"logBody":"x","createdAt":"yesterday"}`))
	f.Add("acme.logs.ACME-AUTH.db", "id", []byte("{\"logBody\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, subject, msgID string, data []byte) {
		m := &fakeMsg{subject: subject, data: data, hdr: nats.Header{}}
		if msgID != "" {
			m.hdr.Set(jetstream.MsgIDHeader, msgID)
		}
		p := in.parse(m)
		if p.dead != nil {
			if p.dead.Reason == "" || p.dead.Subject != subject || len(p.dead.Data) > logs.MaxDeadLetterData {
				t.Fatalf("dead letter %+v", p.dead)
			}
			return
		}
		r := p.record
		if want := cmp.Or(msgID, PlainMsgID(in.StreamTag, 7)); r.MsgID != want {
			t.Fatalf("record id %q from header %q, want %q", r.MsgID, msgID, want)
		}
		if subject != "acme.logs."+r.App+"."+r.Type || !logs.ValidType(r.Type) {
			t.Fatalf("record %s/%s from subject %q", r.App, r.Type, subject)
		}
		if r.LogBody == "" || !utf8.ValidString(r.LogBody) || len(r.LogBody) > 1<<10 {
			t.Fatalf("record body %q", r.LogBody)
		}
		// A payload starting with '{' was one JSON object and nothing else;
		// any other is the text of the record.
		if lead := bytes.TrimLeft(data, " \t\r\n"); len(lead) == 0 || lead[0] != '{' {
			if r.LogBody != strings.TrimRight(string(data), "\r\n") {
				t.Fatalf("plain payload %q stored as %q", data, r.LogBody)
			}
		} else if !json.Valid(data) {
			t.Fatalf("record from a payload that is not exactly one JSON value: %q", data)
		}
	})
}

type stubApps struct{}

func (stubApps) list() ([]logs.App, error) {
	var out []logs.App
	for i, n := range logs.DefaultAppNames("ACME") {
		out = append(out, logs.App{ID: strings.Repeat("0", 23) + string(rune('a'+i)), Name: n})
	}
	return out, nil
}
