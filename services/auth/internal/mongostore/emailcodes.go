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

// EmailCodes is the account.EmailCodeStore on MongoDB. Requests live in
// the one-time tokens' collection (TokensCollection), so the token
// sweeper deletes them once expired (expiresAt) and a user's are found by
// userId. Every operation is one command on one document by _id.
type EmailCodes struct{ c *mongo.Collection }

// NewEmailCodes returns the mailed codes' store of db.
func NewEmailCodes(db *mongo.Database) *EmailCodes {
	return &EmailCodes{c: db.Collection(TokensCollection)}
}

type emailCodeDoc struct {
	ID        string    `bson:"_id"`
	Purpose   string    `bson:"purpose"`
	UserID    string    `bson:"userId"`
	Email     string    `bson:"email"`
	CodeHash  string    `bson:"codeHash"`
	LinkHash  string    `bson:"linkHash,omitempty"`
	Nonce     string    `bson:"nonce"`
	Tries     int       `bson:"tries"`
	CreatedAt time.Time `bson:"createdAt"`
	ExpiresAt time.Time `bson:"expiresAt"`
}

func toEmailCodeDoc(c account.EmailCode) emailCodeDoc {
	return emailCodeDoc{ID: c.ID, Purpose: c.Purpose, UserID: c.UserID, Email: c.Email, CodeHash: c.CodeHash,
		LinkHash: c.LinkHash, Nonce: c.Nonce, Tries: c.Tries, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt}
}

func (d emailCodeDoc) emailCode() account.EmailCode {
	return account.EmailCode{ID: d.ID, Purpose: d.Purpose, UserID: d.UserID, Email: d.Email, CodeHash: d.CodeHash,
		LinkHash: d.LinkHash, Nonce: d.Nonce, Tries: d.Tries, CreatedAt: d.CreatedAt.UTC(), ExpiresAt: d.ExpiresAt.UTC()}
}

// Put implements account.EmailCodeStore: one replace by _id (upsert), so
// the newer request is the one stored.
func (s *EmailCodes) Put(ctx context.Context, c account.EmailCode) error {
	_, err := s.c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: c.ID}}, toEmailCodeDoc(c), options.Replace().SetUpsert(true))
	return err
}

// Try implements account.EmailCodeStore with one findAndModify: the
// condition on tries and the $inc are one atomic step (on MongoDB, and on
// the embedded FerretDB through acmeLockWrites, docs/design/ferretdb.md),
// so of any number of concurrent tries at most max are counted and
// returned (TestEmailCodeTriesBounded).
func (s *EmailCodes) Try(ctx context.Context, id, purpose string, max int, now time.Time) (account.EmailCode, error) {
	filter := bson.D{{Key: "_id", Value: id}, {Key: "purpose", Value: purpose},
		{Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: now}}}, {Key: "tries", Value: bson.D{{Key: "$lt", Value: max}}}}
	var d emailCodeDoc
	err := s.c.FindOneAndUpdate(ctx, filter, bson.D{{Key: "$inc", Value: bson.D{{Key: "tries", Value: 1}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&d)
	return d.result(err)
}

// Take implements account.EmailCodeStore with one findAndModify (remove)
// conditioned on the request's nonce and expiry: of concurrent uses,
// exactly one gets the request (TestEmailCodeTakenOnce).
func (s *EmailCodes) Take(ctx context.Context, id, purpose, nonce string, now time.Time) (account.EmailCode, error) {
	filter := bson.D{{Key: "_id", Value: id}, {Key: "purpose", Value: purpose}, {Key: "nonce", Value: nonce},
		{Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: now}}}}
	var d emailCodeDoc
	return d.result(s.c.FindOneAndDelete(ctx, filter).Decode(&d))
}

// TakeLink implements account.EmailCodeStore with one findAndModify
// (remove) conditioned on the link's hash, the expiry and the tries.
func (s *EmailCodes) TakeLink(ctx context.Context, id, linkHash string, max int, now time.Time) (account.EmailCode, error) {
	filter := bson.D{{Key: "_id", Value: id}, {Key: "purpose", Value: account.PurposeSignInCode}, {Key: "linkHash", Value: linkHash},
		{Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: now}}}, {Key: "tries", Value: bson.D{{Key: "$lt", Value: max}}}}
	var d emailCodeDoc
	return d.result(s.c.FindOneAndDelete(ctx, filter).Decode(&d))
}

func (d *emailCodeDoc) result(err error) (account.EmailCode, error) {
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.EmailCode{}, account.ErrEmailCodeVoid
	}
	if err != nil {
		return account.EmailCode{}, err
	}
	return d.emailCode(), nil
}
