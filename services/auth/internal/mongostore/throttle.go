package mongostore

import (
	"context"
	"errors"
	"github.com/acme/platform/pkg/mongox"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Throttle is the account.ThrottleStore on MongoDB: one document per key
// with a failure counter for the current window, the end of the current
// lock, and how many locks the key has had. Every change is a single-document
// atomic update, so any number of replicas share the counts.
type Throttle struct{ c *mongo.Collection }

// NewThrottle returns the throttle store of db.
func NewThrottle(db *mongo.Database) *Throttle {
	return &Throttle{c: db.Collection(ThrottleCollection)}
}

type throttleDoc struct {
	ID          string    `bson:"_id"`
	Failures    int       `bson:"failures"`
	WindowStart time.Time `bson:"windowStart"`
	LockedUntil time.Time `bson:"lockedUntil"`
	Lockouts    int       `bson:"lockouts"`
}

// Check implements account.ThrottleStore.
func (t *Throttle) Check(ctx context.Context, keys []string) (map[string]time.Time, error) {
	cur, err := t.c.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: keys}}}})
	if err != nil {
		return nil, err
	}
	var docs []throttleDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(docs))
	for _, d := range docs {
		out[d.ID] = d.LockedUntil.UTC()
	}
	return out, nil
}

// Fail implements account.ThrottleStore.
func (t *Throttle) Fail(ctx context.Context, key string, rule account.ThrottleRule, now time.Time) error {
	cutoff := now.Add(-rule.Window)
	after := options.FindOneAndUpdate().SetReturnDocument(options.After)
	var d throttleDoc
	// No upserts: FerretDB 1.24 lets a concurrent upsert overwrite an
	// existing document. Insert, increment and window reset are separate
	// single-document operations, retried until one applies.
	for attempt := 0; ; attempt++ {
		if attempt > 10 {
			return errors.New("throttle: too much contention on " + key)
		}
		// A failure inside the current window counts.
		err := t.c.FindOneAndUpdate(ctx,
			bson.D{{Key: "_id", Value: key}, {Key: "windowStart", Value: bson.D{{Key: "$gt", Value: cutoff}}}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "failures", Value: 1}}}}, after).Decode(&d)
		if err == nil {
			break
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return err
		}
		// The window is over: start a new one.
		err = t.c.FindOneAndUpdate(ctx,
			bson.D{{Key: "_id", Value: key}, {Key: "windowStart", Value: bson.D{{Key: "$lte", Value: cutoff}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "failures", Value: 1}, {Key: "windowStart", Value: now}}}}, after).Decode(&d)
		if err == nil {
			break
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return err
		}
		// No state yet. If another replica inserts first, count again.
		d = throttleDoc{ID: key, Failures: 1, WindowStart: now, LockedUntil: time.Unix(0, 0).UTC()}
		_, err = t.c.InsertOne(ctx, d)
		if err == nil {
			break
		}
		if !mongox.IsDuplicate(err) {
			return err
		}
	}
	if d.Failures < rule.Max {
		return nil
	}
	lock := rule.Lock
	for i := 0; i < d.Lockouts && lock < rule.LockMax; i++ {
		lock *= 2
	}
	if rule.LockMax > 0 && lock > rule.LockMax {
		lock = rule.LockMax
	}
	// Only the replica that still sees the full count sets the lock.
	_, err := t.c.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: key}, {Key: "failures", Value: bson.D{{Key: "$gte", Value: rule.Max}}}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "failures", Value: 0}, {Key: "windowStart", Value: now}, {Key: "lockedUntil", Value: now.Add(lock)}}},
			{Key: "$inc", Value: bson.D{{Key: "lockouts", Value: 1}}},
		})
	return err
}

// Reset implements account.ThrottleStore.
func (t *Throttle) Reset(ctx context.Context, key string) error {
	_, err := t.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: key}})
	return err
}

// Forget implements account.ThrottleStore.
func (t *Throttle) Forget(ctx context.Context, before time.Time) error {
	_, err := t.c.DeleteMany(ctx, bson.D{
		{Key: "windowStart", Value: bson.D{{Key: "$lt", Value: before}}},
		{Key: "lockedUntil", Value: bson.D{{Key: "$lt", Value: before}}},
	})
	return err
}
