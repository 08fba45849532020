// Package mongostore keeps the auth service's users, sessions and sign-in
// throttle state in MongoDB (or any MongoDB-wire server such as FerretDB),
// translating driver errors into the account package's errors.
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

// Collection names.
const (
	UsersCollection    = "users"
	SessionsCollection = "sessions"
	ThrottleCollection = "signin_throttle"
)

// EnsureIndexes creates the indexes the stores rely on; it is idempotent and
// safe when several replicas start at once.
func EnsureIndexes(ctx context.Context, db *mongo.Database) error {
	specs := map[string][]mongo.IndexModel{
		UsersCollection: {
			{Keys: bson.D{{Key: "emailLower", Value: 1}}, Options: options.Index().SetUnique(true).SetName("emailLower_unique")},
			{Keys: bson.D{{Key: "createdAt", Value: 1}}, Options: options.Index().SetName("createdAt")},
		},
		SessionsCollection: {
			{Keys: bson.D{{Key: "userId", Value: 1}}, Options: options.Index().SetName("userId")},
			{Keys: bson.D{{Key: "publicId", Value: 1}}, Options: options.Index().SetUnique(true).SetName("publicId_unique")},
			{Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("expiresAt")},
			{Keys: bson.D{{Key: "lastSeenAt", Value: 1}}, Options: options.Index().SetName("lastSeenAt")},
		},
		APIKeysCollection: {
			{Keys: bson.D{{Key: "hash", Value: 1}}, Options: options.Index().SetUnique(true).SetName("hash_unique")},
			{Keys: bson.D{{Key: "userId", Value: 1}}, Options: options.Index().SetName("userId")},
		},
		PasskeysCollection: {
			{Keys: bson.D{{Key: "userId", Value: 1}, {Key: "createdAt", Value: 1}}, Options: options.Index().SetName("userId_createdAt")},
		},
		TokensCollection: {
			{Keys: bson.D{{Key: "userId", Value: 1}, {Key: "purpose", Value: 1}}, Options: options.Index().SetName("userId_purpose")},
			{Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("expiresAt")},
		},
	}
	for coll, models := range specs {
		if err := mongox.EnsureIndexes(ctx, db.Collection(coll), models...); err != nil {
			return err
		}
	}
	return nil
}

// Users is the account.UserStore on MongoDB.
type Users struct{ c *mongo.Collection }

// NewUsers returns the user store of db.
func NewUsers(db *mongo.Database) *Users { return &Users{c: db.Collection(UsersCollection)} }

type userDoc struct {
	ID            bson.ObjectID `bson:"_id"`
	Email         string        `bson:"email"`
	EmailLower    string        `bson:"emailLower"`
	FullName      string        `bson:"fullName"`
	Sector        *string       `bson:"sector"`
	EDV           string        `bson:"edv"`
	AvatarURL     *string       `bson:"avatarUrl"`
	Role          string        `bson:"roleName"`
	PasswordHash  string        `bson:"passwordHash"`
	EmailVerified bool          `bson:"emailVerified"`
	MFAEnabled    bool          `bson:"mfaEnabled"`
	CreatedAt     time.Time     `bson:"createdAt"`
	UpdatedAt     time.Time     `bson:"updatedAt"`
}

func toUserDoc(u account.User) userDoc {
	return userDoc{
		Email: u.Email, EmailLower: account.NormalizeEmail(u.Email), FullName: u.FullName,
		Sector: u.Sector, EDV: u.EDV, AvatarURL: u.AvatarURL, Role: u.Role,
		PasswordHash: u.PasswordHash, EmailVerified: u.EmailVerified, MFAEnabled: u.MFAEnabled, CreatedAt: u.CreatedAt, UpdatedAt: u.UpdatedAt,
	}
}

func fromUserDoc(d userDoc) account.User {
	return account.User{
		ID: d.ID.Hex(), Email: d.Email, FullName: d.FullName, Sector: d.Sector, EDV: d.EDV,
		AvatarURL: d.AvatarURL, Role: d.Role, PasswordHash: d.PasswordHash, EmailVerified: d.EmailVerified, MFAEnabled: d.MFAEnabled,
		CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(),
	}
}

// Create implements account.UserStore.
func (s *Users) Create(ctx context.Context, u account.User) (account.User, error) {
	d := toUserDoc(u)
	d.ID = bson.NewObjectID()
	if _, err := s.c.InsertOne(ctx, d); err != nil {
		if mongox.IsDuplicate(err) {
			return account.User{}, account.ErrEmailTaken
		}
		return account.User{}, err
	}
	return fromUserDoc(d), nil
}

// decodeOne decodes the document of r (a FindOne, a FindOneAndDelete) into
// a D and converts it; notFound when there was none.
func decodeOne[D, T any](r *mongo.SingleResult, notFound error, conv func(D) T) (T, error) {
	var d D
	err := r.Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		var zero T
		return zero, notFound
	}
	if err != nil {
		var zero T
		return zero, err
	}
	return conv(d), nil
}

func (s *Users) findOne(ctx context.Context, filter bson.D) (account.User, error) {
	return decodeOne(s.c.FindOne(ctx, filter), account.ErrUserNotFound, fromUserDoc)
}

// ByID implements account.UserStore.
func (s *Users) ByID(ctx context.Context, id string) (account.User, error) {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return account.User{}, account.ErrUserNotFound
	}
	return s.findOne(ctx, bson.D{{Key: "_id", Value: oid}})
}

// ByEmail implements account.UserStore.
func (s *Users) ByEmail(ctx context.Context, email string) (account.User, error) {
	return s.findOne(ctx, bson.D{{Key: "emailLower", Value: account.NormalizeEmail(email)}})
}

// Update implements account.UserStore.
func (s *Users) Update(ctx context.Context, id string, p account.UserPatch, now time.Time) (account.User, error) {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return account.User{}, account.ErrUserNotFound
	}
	set := bson.D{{Key: "updatedAt", Value: now}}
	str := func(key string, v *string) {
		if v != nil {
			set = append(set, bson.E{Key: key, Value: *v})
		}
	}
	nullable := func(key string, v *string) {
		if v == nil {
			return
		}
		if *v == "" {
			set = append(set, bson.E{Key: key, Value: nil})
		} else {
			set = append(set, bson.E{Key: key, Value: *v})
		}
	}
	if p.Email != nil {
		str("email", p.Email)
		lower := account.NormalizeEmail(*p.Email)
		str("emailLower", &lower)
	}
	str("fullName", p.FullName)
	nullable("sector", p.Sector)
	str("edv", p.EDV)
	nullable("avatarUrl", p.AvatarURL)
	str("roleName", p.Role)
	str("passwordHash", p.PasswordHash)
	if p.EmailVerified != nil {
		set = append(set, bson.E{Key: "emailVerified", Value: *p.EmailVerified})
	}
	if p.MFAEnabled != nil {
		set = append(set, bson.E{Key: "mfaEnabled", Value: *p.MFAEnabled})
	}
	var d userDoc
	err = s.c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: oid}}, bson.D{{Key: "$set", Value: set}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return account.User{}, account.ErrUserNotFound
	case mongox.IsDuplicate(err):
		return account.User{}, account.ErrEmailTaken
	case err != nil:
		return account.User{}, err
	}
	return fromUserDoc(d), nil
}

// ReplaceHash implements account.UserStore.
func (s *Users) ReplaceHash(ctx context.Context, id, old, new string) error {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return account.ErrUserNotFound
	}
	_, err = s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: oid}, {Key: "passwordHash", Value: old}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "passwordHash", Value: new}}}})
	return err
}

// Delete implements account.UserStore.
func (s *Users) Delete(ctx context.Context, id string) error {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return account.ErrUserNotFound
	}
	res, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: oid}})
	if err != nil {
		return err
	}
	if res.DeletedCount == 0 {
		return account.ErrUserNotFound
	}
	return nil
}

// List implements account.UserStore.
func (s *Users) List(ctx context.Context, skip, limit int) ([]account.User, int64, error) {
	total, err := s.c.CountDocuments(ctx, bson.D{})
	if err != nil {
		return nil, 0, err
	}
	cur, err := s.c.Find(ctx, bson.D{}, options.Find().
		SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).
		SetSkip(int64(skip)).SetLimit(int64(limit)))
	if err != nil {
		return nil, 0, err
	}
	var docs []userDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, 0, err
	}
	out := make([]account.User, 0, len(docs))
	for _, d := range docs {
		out = append(out, fromUserDoc(d))
	}
	return out, total, nil
}
