package mongostore

import (
	"context"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// APIKeysCollection keeps API keys by the hash of their secret.
const APIKeysCollection = "api_keys"

// APIKeys is the account.APIKeyStore on MongoDB.
type APIKeys struct{ c *mongo.Collection }

// NewAPIKeys returns the API key store of db.
func NewAPIKeys(db *mongo.Database) *APIKeys { return &APIKeys{c: db.Collection(APIKeysCollection)} }

type apiKeyDoc struct {
	ID         bson.ObjectID `bson:"_id"`
	UserID     string        `bson:"userId"`
	Name       string        `bson:"name"`
	Scopes     []string      `bson:"scopes"`
	Hash       string        `bson:"hash"`
	Hint       string        `bson:"hint"`
	CreatedBy  string        `bson:"createdBy"`
	CreatedAt  time.Time     `bson:"createdAt"`
	ExpiresAt  *time.Time    `bson:"expiresAt"`
	LastUsedAt *time.Time    `bson:"lastUsedAt"`
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func fromAPIKeyDoc(d apiKeyDoc) account.APIKey {
	return account.APIKey{
		ID: d.ID.Hex(), UserID: d.UserID, Name: d.Name, Scopes: d.Scopes, Hash: d.Hash, Hint: d.Hint,
		CreatedBy: d.CreatedBy, CreatedAt: d.CreatedAt.UTC(), ExpiresAt: utcPtr(d.ExpiresAt), LastUsedAt: utcPtr(d.LastUsedAt),
	}
}

// Create implements account.APIKeyStore.
func (s *APIKeys) Create(ctx context.Context, k account.APIKey) (account.APIKey, error) {
	d := apiKeyDoc{ID: bson.NewObjectID(), UserID: k.UserID, Name: k.Name, Scopes: k.Scopes, Hash: k.Hash, Hint: k.Hint,
		CreatedBy: k.CreatedBy, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt}
	if _, err := s.c.InsertOne(ctx, d); err != nil {
		return account.APIKey{}, err
	}
	return fromAPIKeyDoc(d), nil
}

func (s *APIKeys) one(ctx context.Context, filter bson.D) (account.APIKey, error) {
	return decodeOne(s.c.FindOne(ctx, filter), account.ErrAPIKeyNotFound, fromAPIKeyDoc)
}

// ByHash implements account.APIKeyStore.
func (s *APIKeys) ByHash(ctx context.Context, hash string) (account.APIKey, error) {
	return s.one(ctx, bson.D{{Key: "hash", Value: hash}})
}

// ByID implements account.APIKeyStore.
func (s *APIKeys) ByID(ctx context.Context, userID, id string) (account.APIKey, error) {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return account.APIKey{}, account.ErrAPIKeyNotFound
	}
	return s.one(ctx, bson.D{{Key: "_id", Value: oid}, {Key: "userId", Value: userID}})
}

// ListByUser implements account.APIKeyStore.
func (s *APIKeys) ListByUser(ctx context.Context, userID string) ([]account.APIKey, error) {
	cur, err := s.c.Find(ctx, bson.D{{Key: "userId", Value: userID}}, options.Find().SetSort(bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}))
	if err != nil {
		return nil, err
	}
	var docs []apiKeyDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make([]account.APIKey, len(docs))
	for i, d := range docs {
		out[i] = fromAPIKeyDoc(d)
	}
	return out, nil
}

// CountByUser implements account.APIKeyStore.
func (s *APIKeys) CountByUser(ctx context.Context, userID string) (int64, error) {
	return s.c.CountDocuments(ctx, bson.D{{Key: "userId", Value: userID}})
}

// Delete implements account.APIKeyStore.
func (s *APIKeys) Delete(ctx context.Context, userID, id string) error {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return account.ErrAPIKeyNotFound
	}
	r, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: oid}, {Key: "userId", Value: userID}})
	if err != nil {
		return err
	}
	if r.DeletedCount == 0 {
		return account.ErrAPIKeyNotFound
	}
	return nil
}

// DeleteByUser implements account.APIKeyStore.
func (s *APIKeys) DeleteByUser(ctx context.Context, userID string) ([]string, error) {
	keys, err := s.ListByUser(ctx, userID)
	if err != nil {
		return nil, err
	}
	hashes := make([]string, len(keys))
	for i, k := range keys {
		hashes[i] = k.Hash
	}
	_, err = s.c.DeleteMany(ctx, bson.D{{Key: "userId", Value: userID}})
	return hashes, err
}

// Touch implements account.APIKeyStore.
func (s *APIKeys) Touch(ctx context.Context, id string, prev *time.Time, now time.Time) (bool, error) {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return false, account.ErrAPIKeyNotFound
	}
	var prevVal any // nil matches a null lastUsedAt
	if prev != nil {
		prevVal = *prev
	}
	r, err := s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: oid}, {Key: "lastUsedAt", Value: prevVal}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastUsedAt", Value: now}}}})
	if err != nil {
		return false, err
	}
	return r.ModifiedCount == 1, nil
}
