package mongostore

import (
	"context"
	"errors"
	"time"

	"github.com/acme/platform/services/auth/internal/account"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TokensCollection keeps one-time tokens (password reset, address
// verification) by the hash of their secret.
const TokensCollection = "account_tokens"

// Tokens is the account.TokenStore on MongoDB.
type Tokens struct{ c *mongo.Collection }

// NewTokens returns the token store of db.
func NewTokens(db *mongo.Database) *Tokens { return &Tokens{c: db.Collection(TokensCollection)} }

type tokenDoc struct {
	ID        string    `bson:"_id"` // hex SHA-256 of the secret
	Purpose   string    `bson:"purpose"`
	UserID    string    `bson:"userId"`
	Email     string    `bson:"email"`
	CreatedAt time.Time `bson:"createdAt"`
	ExpiresAt time.Time `bson:"expiresAt"`
	Data      []byte    `bson:"data,omitempty"`
	Slot      string    `bson:"slot,omitempty"`
	Change    string    `bson:"change,omitempty"`
	Confirmed []string  `bson:"confirmed,omitempty"`
}

func docOf(t account.Token) tokenDoc {
	return tokenDoc{ID: t.ID, Purpose: t.Purpose, UserID: t.UserID, Email: t.Email, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
		Data: t.Data, Slot: t.Slot, Change: t.Change, Confirmed: t.Confirmed}
}

func (d tokenDoc) token() account.Token {
	return account.Token{ID: d.ID, Purpose: d.Purpose, UserID: d.UserID, Email: d.Email, CreatedAt: d.CreatedAt.UTC(), ExpiresAt: d.ExpiresAt.UTC(),
		Data: d.Data, Slot: d.Slot, Change: d.Change, Confirmed: d.Confirmed}
}

// Create implements account.TokenStore.
func (s *Tokens) Create(ctx context.Context, t account.Token) error {
	_, err := s.c.InsertOne(ctx, docOf(t))
	return err
}

// Put implements account.TokenStore.
func (s *Tokens) Put(ctx context.Context, t account.Token) error {
	_, err := s.c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: t.ID}}, docOf(t), options.Replace().SetUpsert(true))
	return err
}

// Confirm implements account.TokenStore with one findAndModify (atomic on
// MongoDB, and on the embedded FerretDB through acmeLockWrites,
// docs/design/ferretdb.md), read by _id.
func (s *Tokens) Confirm(ctx context.Context, id, purpose, change, side string, now time.Time) (account.Token, error) {
	filter := bson.D{{Key: "_id", Value: id}, {Key: "purpose", Value: purpose}, {Key: "change", Value: change},
		{Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: now}}}}
	var d tokenDoc
	err := s.c.FindOneAndUpdate(ctx, filter, bson.D{{Key: "$addToSet", Value: bson.D{{Key: "confirmed", Value: side}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.Token{}, account.ErrInvalidToken
	}
	if err != nil {
		return account.Token{}, err
	}
	return d.token(), nil
}

// TakeConfirmed implements account.TokenStore with one findAndModify
// (remove), read by _id.
func (s *Tokens) TakeConfirmed(ctx context.Context, id, purpose, change string, sides []string, now time.Time) (account.Token, error) {
	filter := bson.D{{Key: "_id", Value: id}, {Key: "purpose", Value: purpose}, {Key: "change", Value: change},
		{Key: "confirmed", Value: bson.D{{Key: "$all", Value: sides}}}, {Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: now}}}}
	var d tokenDoc
	err := s.c.FindOneAndDelete(ctx, filter).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.Token{}, account.ErrInvalidToken
	}
	if err != nil {
		return account.Token{}, err
	}
	return d.token(), nil
}

// Take implements account.TokenStore with one findAndModify (remove) of
// the token while it is unexpired: atomic on MongoDB, and on the embedded
// FerretDB through acmeLockWrites (docs/design/ferretdb.md), so of any
// number of concurrent uses exactly one gets the token
// (TestTokenTakenOnceUnderConcurrency, 200 at once). An expired token is
// left to DeleteExpired.
func (s *Tokens) Take(ctx context.Context, id, purpose string, now time.Time) (account.Token, error) {
	var d tokenDoc
	filter := bson.D{{Key: "_id", Value: id}, {Key: "purpose", Value: purpose}, {Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: now}}}}
	err := s.c.FindOneAndDelete(ctx, filter).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.Token{}, account.ErrInvalidToken
	}
	if err != nil {
		return account.Token{}, err
	}
	return d.token(), nil
}

// DeleteByUser implements account.TokenStore.
func (s *Tokens) DeleteByUser(ctx context.Context, userID, purpose string) error {
	_, err := s.c.DeleteMany(ctx, bson.D{{Key: "userId", Value: userID}, {Key: "purpose", Value: purpose}})
	return err
}

// DeleteExpired implements account.TokenStore (FerretDB has no TTL indexes).
func (s *Tokens) DeleteExpired(ctx context.Context, now time.Time) error {
	_, err := s.c.DeleteMany(ctx, bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$lte", Value: now}}}})
	return err
}
