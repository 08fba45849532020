package otlpingest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes records on the log stream and waits for JetStream
// to have stored every one (or to have dropped it as a duplicate).
type Publisher struct {
	JS jetstream.JetStream
}

// Publish returns nil once every record is in the stream.
func (p Publisher) Publish(ctx context.Context, recs []Record) error {
	futures := make([]jetstream.PubAckFuture, 0, len(recs))
	for _, r := range recs {
		data, err := json.Marshal(r.Message)
		if err != nil {
			return err
		}
		m := nats.NewMsg(r.Subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, r.MsgID)
		f, err := p.JS.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("publish %s: %w", r.Subject, err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
