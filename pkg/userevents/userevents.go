// Package userevents is the wire contract of the durable user events: auth
// publishes them on JetStream, other services consume them with their own
// durable consumers, so a replica that is down when a user is deleted still
// acts on it when it comes back. Today there is one event, "user deleted",
// on which the files service erases the user's files and images.
//
// Stream: <PREFIX>_USERS, subjects <prefix>.users.>, file storage, messages
// kept StreamMaxAge. Subject of a deletion: <prefix>.users.deleted.
// Payload: {"userId":"<id>"}. Nats-Msg-Id "deleted-<id>" makes a repeated
// publication within the duplicate window a no-op.
package userevents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamMaxAge is how long the stream keeps an event: a consumer down for
// longer misses it.
const StreamMaxAge = 30 * 24 * time.Hour

// StreamName is "<PREFIX>_USERS".
func StreamName(prefix string) string { return strings.ToUpper(prefix) + "_USERS" }

// DeletedSubject is the subject of user deletions.
func DeletedSubject(prefix string) string { return prefix + ".users.deleted" }

// Deleted is the payload of a user deletion.
type Deleted struct {
	UserID string `json:"userId"`
}

// EnsureStream creates the stream unless it exists. The publisher and the
// consumers all call it, so none depends on another having started first.
func EnsureStream(ctx context.Context, js jetstream.JetStream, prefix string) error {
	cfg := jetstream.StreamConfig{
		Name:        StreamName(prefix),
		Description: "durable user events published by auth (pkg/userevents)",
		Subjects:    []string{prefix + ".users.>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      StreamMaxAge,
		Duplicates:  2 * time.Minute,
		Discard:     jetstream.DiscardOld,
	}
	if _, err := js.Stream(ctx, cfg.Name); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	return nil
}

// SetupConsumer ensures the stream and the durable pull consumer name on
// user deletions: explicit acks, maxDeliver deliveries, redelivered after
// ackWait doubling up to 10 minutes (one back-off step fewer than
// maxDeliver, as JetStream requires). Every replica of a service binds the
// same name, so each event goes to one of them.
func SetupConsumer(ctx context.Context, js jetstream.JetStream, prefix, name string, ackWait time.Duration, maxDeliver int) (jetstream.Consumer, error) {
	if err := EnsureStream(ctx, js, prefix); err != nil {
		return nil, err
	}
	var backOff []time.Duration
	d := ackWait
	for range min(maxDeliver-1, 10) {
		backOff = append(backOff, d)
		d = min(d*2, 10*time.Minute)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, StreamName(prefix), jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "user deletions (pkg/userevents)",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    maxDeliver,
		BackOff:       backOff,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: DeletedSubject(prefix),
		MaxAckPending: 16,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", name, err)
	}
	return cons, nil
}

// PublishDeleted announces that userID was deleted and waits for the
// stream to store it.
func PublishDeleted(ctx context.Context, js jetstream.JetStream, prefix, userID string) error {
	body, err := json.Marshal(Deleted{UserID: userID})
	if err != nil {
		return err
	}
	_, err = js.Publish(ctx, DeletedSubject(prefix), body, jetstream.WithMsgID("deleted-"+userID),
		jetstream.WithRetryAttempts(10), jetstream.WithRetryWait(500*time.Millisecond))
	return err
}

// ParseDeleted decodes a deletion's payload.
func ParseDeleted(data []byte) (Deleted, error) {
	var d Deleted
	if err := json.Unmarshal(data, &d); err != nil {
		return Deleted{}, err
	}
	if d.UserID == "" {
		return Deleted{}, errors.New("user deleted event without a userId")
	}
	return d, nil
}
