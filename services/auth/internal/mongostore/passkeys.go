package mongostore

import (
	"context"
	"time"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/go-webauthn/webauthn/webauthn"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// PasskeysCollection keeps WebAuthn credentials by credential id.
const PasskeysCollection = "passkeys"

// Passkeys is the account.PasskeyStore on MongoDB.
type Passkeys struct{ c *mongo.Collection }

// NewPasskeys returns the passkey store of db.
func NewPasskeys(db *mongo.Database) *Passkeys {
	return &Passkeys{c: db.Collection(PasskeysCollection)}
}

// passkeyDoc keeps the library's credential record in its own compact
// encoding (MessagePack, webauthn.Credential.MarshalMsg) beside the fields
// the store filters and updates on: the sign count is the compare-and-set
// guard of Used.
type passkeyDoc struct {
	ID           string     `bson:"_id"` // credential id, unpadded base64url
	UserID       string     `bson:"userId"`
	Name         string     `bson:"name"`
	Credential   []byte     `bson:"credential"`
	SignCount    int64      `bson:"signCount"`
	CloneWarning bool       `bson:"cloneWarning"`
	CreatedAt    time.Time  `bson:"createdAt"`
	LastUsedAt   *time.Time `bson:"lastUsedAt"`
}

func toPasskeyDoc(p account.Passkey) (passkeyDoc, error) {
	raw, err := p.Credential.MarshalMsg(nil)
	if err != nil {
		return passkeyDoc{}, err
	}
	d := passkeyDoc{ID: p.ID, UserID: p.UserID, Name: p.Name, Credential: raw, SignCount: int64(p.Credential.Authenticator.SignCount),
		CloneWarning: p.CloneWarning, CreatedAt: p.CreatedAt}
	if !p.LastUsedAt.IsZero() {
		d.LastUsedAt = &p.LastUsedAt
	}
	return d, nil
}

func fromPasskeyDoc(d passkeyDoc) (account.Passkey, error) {
	var cred webauthn.Credential
	if _, err := cred.UnmarshalMsg(d.Credential); err != nil {
		return account.Passkey{}, err
	}
	cred.Authenticator.SignCount = uint32(d.SignCount)
	p := account.Passkey{ID: d.ID, UserID: d.UserID, Name: d.Name, Credential: cred, CloneWarning: d.CloneWarning, CreatedAt: d.CreatedAt.UTC()}
	if d.LastUsedAt != nil {
		p.LastUsedAt = d.LastUsedAt.UTC()
	}
	return p, nil
}

// Create implements account.PasskeyStore.
func (s *Passkeys) Create(ctx context.Context, p account.Passkey) error {
	d, err := toPasskeyDoc(p)
	if err != nil {
		return err
	}
	if _, err := s.c.InsertOne(ctx, d); err != nil {
		if mongox.IsDuplicate(err) {
			return account.ErrPasskeyExists
		}
		return err
	}
	return nil
}

// ByID implements account.PasskeyStore.
func (s *Passkeys) ByID(ctx context.Context, id string) (account.Passkey, error) {
	d, err := decodeOne(s.c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}), account.ErrPasskeyNotFound, func(d passkeyDoc) passkeyDoc { return d })
	if err != nil {
		return account.Passkey{}, err
	}
	return fromPasskeyDoc(d)
}

// ListByUser implements account.PasskeyStore.
func (s *Passkeys) ListByUser(ctx context.Context, userID string) ([]account.Passkey, error) {
	cur, err := s.c.Find(ctx, bson.D{{Key: "userId", Value: userID}}, options.Find().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var docs []passkeyDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make([]account.Passkey, 0, len(docs))
	for _, d := range docs {
		p, err := fromPasskeyDoc(d)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Used implements account.PasskeyStore: the stored sign count is the
// filter's guard, so of two sign-ins reading the same count one applies.
func (s *Passkeys) Used(ctx context.Context, id string, prev uint32, cred webauthn.Credential, at time.Time) error {
	raw, err := cred.MarshalMsg(nil)
	if err != nil {
		return err
	}
	r, err := s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "signCount", Value: int64(prev)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "credential", Value: raw}, {Key: "signCount", Value: int64(cred.Authenticator.SignCount)}, {Key: "lastUsedAt", Value: at}}}})
	if err != nil {
		return err
	}
	if r.MatchedCount == 0 {
		if _, err := s.ByID(ctx, id); err != nil {
			return err
		}
		return account.ErrPasskeyMoved
	}
	return nil
}

// MarkCloned implements account.PasskeyStore.
func (s *Passkeys) MarkCloned(ctx context.Context, id string) error {
	_, err := s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "cloneWarning", Value: true}}}})
	return err
}

// Delete implements account.PasskeyStore.
func (s *Passkeys) Delete(ctx context.Context, userID, id string) error {
	r, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "userId", Value: userID}})
	if err != nil {
		return err
	}
	if r.DeletedCount == 0 {
		return account.ErrPasskeyNotFound
	}
	return nil
}

// DeleteByUser implements account.PasskeyStore.
func (s *Passkeys) DeleteByUser(ctx context.Context, userID string) (int64, error) {
	r, err := s.c.DeleteMany(ctx, bson.D{{Key: "userId", Value: userID}})
	if err != nil {
		return 0, err
	}
	return r.DeletedCount, nil
}
