package mongostore

import (
	"context"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Sessions is the account.SessionStore on MongoDB. The document _id is the
// hex SHA-256 of the session secret; the secret itself is never stored.
type Sessions struct{ c *mongo.Collection }

// NewSessions returns the session store of db.
func NewSessions(db *mongo.Database) *Sessions {
	return &Sessions{c: db.Collection(SessionsCollection)}
}

type sessionDoc struct {
	ID         string    `bson:"_id"`
	PublicID   string    `bson:"publicId"`
	UserID     string    `bson:"userId"`
	CreatedAt  time.Time `bson:"createdAt"`
	LastSeenAt time.Time `bson:"lastSeenAt"`
	ExpiresAt  time.Time `bson:"expiresAt"`
	UserAgent  string    `bson:"userAgent"`
	IP         string    `bson:"ip"`
	TwoFactor  bool      `bson:"twoFactor,omitempty"`
}

func toSessionDoc(s account.Session) sessionDoc { return sessionDoc(s) }

func fromSessionDoc(d sessionDoc) account.Session {
	s := account.Session(d)
	s.CreatedAt, s.LastSeenAt, s.ExpiresAt = s.CreatedAt.UTC(), s.LastSeenAt.UTC(), s.ExpiresAt.UTC()
	return s
}

// Create implements account.SessionStore.
func (s *Sessions) Create(ctx context.Context, sess account.Session) error {
	_, err := s.c.InsertOne(ctx, toSessionDoc(sess))
	return err
}

func (s *Sessions) findOne(ctx context.Context, filter bson.D) (account.Session, error) {
	return decodeOne(s.c.FindOne(ctx, filter), account.ErrSessionNotFound, fromSessionDoc)
}

// ByID implements account.SessionStore.
func (s *Sessions) ByID(ctx context.Context, id string) (account.Session, error) {
	return s.findOne(ctx, bson.D{{Key: "_id", Value: id}})
}

// ByPublicID implements account.SessionStore.
func (s *Sessions) ByPublicID(ctx context.Context, userID, publicID string) (account.Session, error) {
	return s.findOne(ctx, bson.D{{Key: "publicId", Value: publicID}, {Key: "userId", Value: userID}})
}

// Touch implements account.SessionStore.
func (s *Sessions) Touch(ctx context.Context, id string, prev, now time.Time) error {
	_, err := s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "lastSeenAt", Value: prev}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastSeenAt", Value: now}}}})
	return err
}

// Delete implements account.SessionStore.
func (s *Sessions) Delete(ctx context.Context, id string) error {
	res, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return err
	}
	if res.DeletedCount == 0 {
		return account.ErrSessionNotFound
	}
	return nil
}

// ListByUser implements account.SessionStore.
func (s *Sessions) ListByUser(ctx context.Context, userID string) ([]account.Session, error) {
	cur, err := s.c.Find(ctx, bson.D{{Key: "userId", Value: userID}},
		options.Find().SetSort(bson.D{{Key: "createdAt", Value: -1}}).SetLimit(1000))
	if err != nil {
		return nil, err
	}
	var docs []sessionDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make([]account.Session, 0, len(docs))
	for _, d := range docs {
		out = append(out, fromSessionDoc(d))
	}
	return out, nil
}

// DeleteByUser implements account.SessionStore. It reads the ids first so
// that the caller can announce exactly the sessions that ended.
func (s *Sessions) DeleteByUser(ctx context.Context, userID, except string) ([]string, error) {
	filter := bson.D{{Key: "userId", Value: userID}}
	if except != "" {
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$ne", Value: except}}})
	}
	cur, err := s.c.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(docs))
	for _, d := range docs {
		ids = append(ids, d.ID)
	}
	if len(ids) == 0 {
		return ids, nil
	}
	if _, err := s.c.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}); err != nil {
		return nil, err
	}
	return ids, nil
}

// DeleteExpired implements account.SessionStore.
func (s *Sessions) DeleteExpired(ctx context.Context, now, idleBefore time.Time) (int64, error) {
	res, err := s.c.DeleteMany(ctx, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$lte", Value: now}}}},
		bson.D{{Key: "lastSeenAt", Value: bson.D{{Key: "$lte", Value: idleBefore}}}},
	}}})
	if err != nil {
		return 0, err
	}
	return res.DeletedCount, nil
}

// CountLive implements account.SessionStore. On MongoDB the expiresAt index
// serves it; FerretDB scans the collection, so callers run it now and then,
// not per request.
func (s *Sessions) CountLive(ctx context.Context, now, idleBefore time.Time) (int64, error) {
	return s.c.CountDocuments(ctx, bson.D{
		{Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: now}}},
		{Key: "lastSeenAt", Value: bson.D{{Key: "$gt", Value: idleBefore}}},
	})
}
