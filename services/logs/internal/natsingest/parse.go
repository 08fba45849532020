// Reading a message: its payload, its id, and the dead letter of one that
// cannot be stored.

package natsingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/nats-io/nats.go/jetstream"
)

// parse turns a message into a record or a dead letter.
func (in *Ingestor) parse(m jetstream.Msg) parsed {
	p := parsed{msg: m}
	meta, _ := m.Metadata()
	var seq, deliveries uint64
	stored := time.Now()
	stream := StreamName(in.Config.Prefix)
	if meta != nil {
		seq, deliveries, stored, stream = meta.Sequence.Stream, meta.NumDelivered, meta.Timestamp, meta.Stream
	}
	msgID := m.Headers().Get(jetstream.MsgIDHeader)
	p.deliveries, p.seq, p.stream = deliveries, seq, stream
	poison := func(reason string) parsed {
		d := in.deadLetter(m, stream, seq, deliveries, reason)
		p.dead = &d
		return p
	}
	if len(msgID) > 128 {
		return poison("oversized Nats-Msg-Id header")
	}
	if msgID == "" {
		// A plain publisher (`nats pub`): the stream sequence is the
		// record's idempotency key anyway, so the message is stored once
		// per stream message; only a Nats-Msg-Id lets JetStream drop the
		// publisher's own retries.
		msgID = PlainMsgID(in.StreamTag, seq)
	}
	// Subject: <prefix>.logs.<APP>.<type>
	rest, ok := strings.CutPrefix(m.Subject(), in.Config.Prefix+".logs.")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 2 {
		return poison("subject is not <prefix>.logs.<APP>.<type>")
	}
	msg, reason := decodePayload(m.Data())
	if reason != "" {
		return poison(reason)
	}
	if msg.App == "" {
		msg.App = parts[0]
	}
	if msg.Type == "" {
		msg.Type = parts[1]
	}
	if msg.App != parts[0] || msg.Type != parts[1] {
		return poison("payload app/type differ from the subject")
	}
	app, err := in.Validator.Check(msg.App, msg.Type, msg.LogBody, msg.MetricsID)
	if err != nil {
		return poison(err.Error())
	}
	created := msg.CreatedAt
	if created.IsZero() {
		created = stored
	}
	p.record = logs.Record{AppID: app.ID, App: app.Name, Type: msg.Type, LogBody: msg.LogBody, MetricsID: msg.MetricsID,
		CreatedAt: created.UTC().Truncate(time.Millisecond), MsgID: msgID, Stream: in.StreamTag, Seq: seq}
	if seq == 0 || seq > logs.MaxStreamSeq {
		return poison(fmt.Sprintf("stream sequence %d cannot make a record id", seq))
	}
	return p
}

// PlainMsgID is the MsgID of a record published without a Nats-Msg-Id:
// "seq-<stream tag>-<stream sequence>".
func PlainMsgID(tag string, seq uint64) string { return fmt.Sprintf("seq-%s-%d", tag, seq) }

// decodePayload reads a message's payload: a JSON object (logclient.Message)
// when its first non-blank byte is '{', else plain text that is the record's
// logBody, without trailing line ends (app and type then come from the
// subject). reason says
// why a JSON payload is refused.
func decodePayload(data []byte) (msg logclient.Message, reason string) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		// Line ends a shell pipe adds (`echo ... | nats pub`) are not part of
		// the message.
		return logclient.Message{LogBody: strings.TrimRight(string(data), "\r\n")}, ""
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msg); err != nil {
		return msg, "payload is not a valid log message: " + err.Error()
	}
	// dec.More is false before a stray '}' or ']', so look for the end of
	// input itself (found by FuzzParse: `{...}}` was accepted).
	if _, err := dec.Token(); err != io.EOF {
		return msg, "payload has data after the JSON object"
	}
	return msg, ""
}

// deadLetter describes a message kept for admins.
func (in *Ingestor) deadLetter(m jetstream.Msg, stream string, seq, deliveries uint64, reason string) logs.DeadLetter {
	data := string(m.Data())
	if len(data) > logs.MaxDeadLetterData {
		data = data[:logs.MaxDeadLetterData]
	}
	return logs.DeadLetter{Key: fmt.Sprintf("%s:%d", stream, seq), Stream: stream, Sequence: seq, Subject: m.Subject(),
		MsgID: m.Headers().Get(jetstream.MsgIDHeader), Data: data, Reason: reason, Deliveries: deliveries, ReceivedAt: time.Now().UTC()}
}
