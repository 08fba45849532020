package mongostore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/auth/internal/account"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// IdentitiesCollection keeps the identities linked to users, one document
// per provider subject.
const IdentitiesCollection = "identities"

// EnsureIdentityIndexes creates the index of identities by user (the key,
// issuer + subject, is the _id). Idempotent.
func EnsureIdentityIndexes(ctx context.Context, db *mongo.Database) error {
	return mongox.EnsureIndexes(ctx, db.Collection(IdentitiesCollection),
		mongo.IndexModel{Keys: bson.D{{Key: "userId", Value: 1}, {Key: "createdAt", Value: 1}}, Options: options.Index().SetName("userId_createdAt")})
}

// Identities is the account.IdentityStore on MongoDB. The _id is the hex
// SHA-256 of issuer and subject, so that an insert claims the subject on
// every server (FerretDB reports the violation of a secondary unique index
// by some writes as an internal error; the _id's is reported everywhere).
type Identities struct{ c *mongo.Collection }

// NewIdentities returns the identity store of db.
func NewIdentities(db *mongo.Database) *Identities {
	return &Identities{c: db.Collection(IdentitiesCollection)}
}

type identityDoc struct {
	ID         string    `bson:"_id"`
	UserID     string    `bson:"userId"`
	Provider   string    `bson:"provider"`
	Issuer     string    `bson:"issuer"`
	Subject    string    `bson:"subject"`
	Email      string    `bson:"email"`
	CreatedAt  time.Time `bson:"createdAt"`
	LastUsedAt time.Time `bson:"lastUsedAt"`
	Pending    bool      `bson:"pending,omitempty"`
}

// identityKey is the _id of a provider's subject.
func identityKey(issuer, subject string) string {
	sum := sha256.Sum256([]byte(issuer + "\x00" + subject))
	return hex.EncodeToString(sum[:])
}

// invitationKey is the _id of an invitation: one per provider and address.
func invitationKey(provider, email string) string {
	sum := sha256.Sum256([]byte(provider + "\x00" + email))
	return "invite-" + hex.EncodeToString(sum[:])
}

func toIdentityDoc(i account.Identity) identityDoc {
	return identityDoc{ID: i.ID, UserID: i.UserID, Provider: i.Provider, Issuer: i.Issuer, Subject: i.Subject,
		Email: i.Email, CreatedAt: i.CreatedAt, LastUsedAt: i.LastUsedAt, Pending: i.Pending}
}

func fromIdentityDoc(d identityDoc) account.Identity {
	return account.Identity{ID: d.ID, UserID: d.UserID, Provider: d.Provider, Issuer: d.Issuer, Subject: d.Subject,
		Email: d.Email, CreatedAt: d.CreatedAt.UTC(), LastUsedAt: d.LastUsedAt.UTC(), Pending: d.Pending}
}

// Create implements account.IdentityStore.
func (s *Identities) Create(ctx context.Context, i account.Identity) (account.Identity, error) {
	i.ID = identityKey(i.Issuer, i.Subject)
	return s.insert(ctx, i)
}

// insert writes i; ErrIdentityTaken when its _id is.
func (s *Identities) insert(ctx context.Context, i account.Identity) (account.Identity, error) {
	_, err := s.c.InsertOne(ctx, toIdentityDoc(i))
	if mongox.IsDuplicate(err) {
		return account.Identity{}, account.ErrIdentityTaken
	}
	if err != nil {
		return account.Identity{}, err
	}
	return i, nil
}

// BySubject implements account.IdentityStore.
func (s *Identities) BySubject(ctx context.Context, issuer, subject string) (account.Identity, error) {
	return decodeOne(s.c.FindOne(ctx, bson.D{{Key: "_id", Value: identityKey(issuer, subject)}}), account.ErrIdentityNotFound, fromIdentityDoc)
}

// ListByUser implements account.IdentityStore.
func (s *Identities) ListByUser(ctx context.Context, userID string) ([]account.Identity, error) {
	cur, err := s.c.Find(ctx, bson.D{{Key: "userId", Value: userID}},
		options.Find().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(1000))
	if err != nil {
		return nil, err
	}
	var docs []identityDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make([]account.Identity, 0, len(docs))
	for _, d := range docs {
		out = append(out, fromIdentityDoc(d))
	}
	return out, nil
}

// Used implements account.IdentityStore.
func (s *Identities) Used(ctx context.Context, id, email string, at time.Time) error {
	_, err := s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastUsedAt", Value: at}, {Key: "email", Value: email}}}})
	return err
}

// Delete implements account.IdentityStore.
func (s *Identities) Delete(ctx context.Context, userID, id string) error {
	res, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "userId", Value: userID}})
	if err != nil {
		return err
	}
	if res.DeletedCount == 0 {
		return account.ErrIdentityNotFound
	}
	return nil
}

// Invite implements account.IdentityStore.
func (s *Identities) Invite(ctx context.Context, i account.Identity) (account.Identity, error) {
	i.ID, i.Pending, i.Issuer, i.Subject = invitationKey(i.Provider, i.Email), true, "", ""
	return s.insert(ctx, i)
}

// Invitation implements account.IdentityStore.
func (s *Identities) Invitation(ctx context.Context, provider, email string) (account.Identity, error) {
	return decodeOne(s.c.FindOne(ctx, bson.D{{Key: "_id", Value: invitationKey(provider, email)}}), account.ErrIdentityNotFound, fromIdentityDoc)
}
