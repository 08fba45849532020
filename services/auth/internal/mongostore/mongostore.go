// Package mongostore keeps the auth service's users, sessions and sign-in
// throttle state in MongoDB (or any MongoDB-wire server such as FerretDB),
// translating driver errors into the account package's errors.
package mongostore

import (
	"context"
	"errors"
	"time"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/auth/internal/account"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Collection names.
const (
	UsersCollection    = "users"
	EmailsCollection   = "user_emails"
	SessionsCollection = "sessions"
	ThrottleCollection = "signin_throttle"
)

// EnsureIndexes creates the indexes the stores rely on; it is idempotent and
// safe when several replicas start at once.
func EnsureIndexes(ctx context.Context, db *mongo.Database) error {
	specs := map[string][]mongo.IndexModel{
		UsersCollection: {
			{Keys: bson.D{{Key: "emailLower", Value: 1}}, Options: options.Index().SetUnique(true).SetName("emailLower_unique")},
			{Keys: bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName("createdAt_id")},
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
		// Reset deletes a key's documents (slots and state) by key.
		ThrottleCollection: {
			{Keys: bson.D{{Key: "key", Value: 1}}, Options: options.Index().SetName("key")},
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
	// Throttle slots end with their window: where the server has TTL
	// indexes (MongoDB), it deletes them too. An optimisation only: the
	// service ignores ended windows and the sweeper deletes them (FerretDB
	// has no TTL indexes), so a server that refuses the index is fine.
	_ = mongox.EnsureIndexes(ctx, db.Collection(ThrottleCollection),
		mongo.IndexModel{Keys: bson.D{{Key: "expires", Value: 1}}, Options: options.Index().SetExpireAfterSeconds(0).SetName("expires_ttl")})
	return nil
}

// Users is the account.UserStore on MongoDB.
//
// Users are found by e-mail through user_emails, one document per address
// keyed by its normalized form ({_id: "a@example.com", user: <user id>}).
// The key document is what makes an address change safe on every server:
// FerretDB (the embedded default) reports a unique-index violation of an
// update as an internal error, not as a duplicate key, so a change to a
// taken address cannot be told from a failure by users.emailLower's index
// alone; an insert of the key document reports it on every server.
// (A lookup by emailLower would now use its index on FerretDB too,
// docs/design/ferretdb.md.) The key document is written before the user (its unique
// _id claims the address), changed before an address change and removed
// after the user; a key left behind by a crash between two steps names a
// user that does not exist or has another address, and is taken over once
// it is older than KeyGrace (see claim). The unique index on
// users.emailLower stays as a second guard.
type Users struct {
	c, emails *mongo.Collection
	// KeyGrace is how long a key naming a user that does not exist (yet)
	// or has another address (yet) blocks its address: the time a sign-up
	// or an address change takes between its writes, with a wide margin.
	KeyGrace time.Duration
}

// NewUsers returns the user store of db.
func NewUsers(db *mongo.Database) *Users {
	return &Users{c: db.Collection(UsersCollection), emails: db.Collection(EmailsCollection), KeyGrace: time.Minute}
}

// emailDoc is the key of one address in user_emails.
type emailDoc struct {
	Lower string        `bson:"_id"`
	User  bson.ObjectID `bson:"user"`
	At    time.Time     `bson:"at"` // when User claimed it
}

// claim makes lower's key document name user: ErrEmailTaken when it names
// another user that exists with that address.
func (s *Users) claim(ctx context.Context, lower string, user bson.ObjectID) error {
	for attempt := 0; attempt < 3; attempt++ {
		_, err := s.emails.InsertOne(ctx, emailDoc{Lower: lower, User: user, At: time.Now()})
		if err == nil || !mongox.IsDuplicate(err) {
			return err
		}
		var d emailDoc
		err = s.emails.FindOne(ctx, bson.D{{Key: "_id", Value: lower}}).Decode(&d)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue // released meanwhile
		}
		if err != nil {
			return err
		}
		if d.User == user {
			return nil
		}
		holder, err := s.findOne(ctx, bson.D{{Key: "_id", Value: d.User}})
		switch {
		case err == nil && holder.Email != "" && account.NormalizeEmail(holder.Email) == lower:
			return account.ErrEmailTaken
		case err != nil && !errors.Is(err, account.ErrUserNotFound):
			return err
		case time.Since(d.At) < s.KeyGrace:
			// Its holder may be between the key and the user's write.
			return account.ErrEmailTaken
		}
		// A key left behind: take it over unless someone else did first.
		res, err := s.emails.UpdateOne(ctx, bson.D{{Key: "_id", Value: lower}, {Key: "user", Value: d.User}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "user", Value: user}, {Key: "at", Value: time.Now()}}}})
		if err != nil {
			return err
		}
		if res.MatchedCount == 1 {
			return nil
		}
	}
	return account.ErrEmailTaken
}

// release removes lower's key document if it still names user.
func (s *Users) release(ctx context.Context, lower string, user bson.ObjectID) error {
	_, err := s.emails.DeleteOne(ctx, bson.D{{Key: "_id", Value: lower}, {Key: "user", Value: user}})
	return err
}

// BackfillEmails writes the key documents of users that have none (users
// written by a version without them) and returns how many it wrote. It
// reads both collections once; Run calls it at start-up.
func (s *Users) BackfillEmails(ctx context.Context) (int, error) {
	have := map[string]bool{}
	cur, err := s.emails.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, err
	}
	var keys []emailDoc
	if err := cur.All(ctx, &keys); err != nil {
		return 0, err
	}
	for _, k := range keys {
		have[k.Lower] = true
	}
	cur, err = s.c.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "emailLower", Value: 1}}))
	if err != nil {
		return 0, err
	}
	var users []struct {
		ID    bson.ObjectID `bson:"_id"`
		Lower string        `bson:"emailLower"`
	}
	if err := cur.All(ctx, &users); err != nil {
		return 0, err
	}
	n := 0
	for _, u := range users {
		if u.Lower == "" || have[u.Lower] {
			continue
		}
		if err := s.claim(ctx, u.Lower, u.ID); err != nil && !errors.Is(err, account.ErrEmailTaken) {
			return n, err
		}
		n++
	}
	return n, nil
}

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
	if err := s.claim(ctx, d.EmailLower, d.ID); err != nil {
		return account.User{}, err
	}
	if _, err := s.c.InsertOne(ctx, d); err != nil {
		if rerr := s.release(context.WithoutCancel(ctx), d.EmailLower, d.ID); rerr != nil {
			err = errors.Join(err, rerr)
		}
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

// ByEmail implements account.UserStore: two reads by _id.
func (s *Users) ByEmail(ctx context.Context, email string) (account.User, error) {
	lower := account.NormalizeEmail(email)
	var k emailDoc
	err := s.emails.FindOne(ctx, bson.D{{Key: "_id", Value: lower}}).Decode(&k)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.User{}, account.ErrUserNotFound
	}
	if err != nil {
		return account.User{}, err
	}
	u, err := s.findOne(ctx, bson.D{{Key: "_id", Value: k.User}})
	if err != nil {
		return account.User{}, err
	}
	if account.NormalizeEmail(u.Email) != lower { // a key left behind
		return account.User{}, account.ErrUserNotFound
	}
	return u, nil
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
	// An address change claims the new address's key first and releases
	// the old one after the user is written.
	var oldLower, newLower string
	if p.Email != nil {
		str("email", p.Email)
		newLower = account.NormalizeEmail(*p.Email)
		str("emailLower", &newLower)
		cur, err := s.findOne(ctx, bson.D{{Key: "_id", Value: oid}})
		if err != nil {
			return account.User{}, err
		}
		if oldLower = account.NormalizeEmail(cur.Email); oldLower == newLower {
			oldLower, newLower = "", ""
		} else if err := s.claim(ctx, newLower, oid); err != nil {
			return account.User{}, err
		}
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
	if newLower != "" {
		// Written: the old address is free; not written: the new one. A
		// release that fails leaves a key naming a user without that
		// address, which claim treats as free.
		free := oldLower
		if err != nil {
			free = newLower
		}
		_ = s.release(context.WithoutCancel(ctx), free, oid)
	}
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
	// One round trip deletes the user and returns its address.
	u, err := decodeOne(s.c.FindOneAndDelete(ctx, bson.D{{Key: "_id", Value: oid}}), account.ErrUserNotFound, fromUserDoc)
	if err != nil {
		return err
	}
	// A key left behind by a failure here names a deleted user: free.
	_ = s.release(context.WithoutCancel(ctx), account.NormalizeEmail(u.Email), oid)
	return nil
}

// LockMethods implements account.UserStore: one conditional
// find-and-modify of the user's document (atomic on MongoDB, and on the
// embedded FerretDB through its patch), which sets the holder and the end
// of its lease only where no lease is running.
func (s *Users) LockMethods(ctx context.Context, id, holder string, now, until time.Time) (bool, error) {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return false, account.ErrUserNotFound
	}
	free := bson.A{
		bson.D{{Key: "methodsLockUntil", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "methodsLockUntil", Value: bson.D{{Key: "$lte", Value: now}}}},
	}
	err = s.c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: oid}, {Key: "$or", Value: free}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "methodsLockHolder", Value: holder}, {Key: "methodsLockUntil", Value: until}}}}).Err()
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return false, err
	}
	// Held by another, or no such user.
	n, err := s.c.CountDocuments(ctx, bson.D{{Key: "_id", Value: oid}}, options.Count().SetLimit(1))
	if err != nil {
		return false, err
	}
	if n == 0 {
		return false, account.ErrUserNotFound
	}
	return false, nil
}

// UnlockMethods implements account.UserStore.
func (s *Users) UnlockMethods(ctx context.Context, id, holder string) error {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return account.ErrUserNotFound
	}
	_, err = s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: oid}, {Key: "methodsLockHolder", Value: holder}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "methodsLockHolder", Value: ""}, {Key: "methodsLockUntil", Value: ""}}}})
	return err
}

// List implements account.UserStore.
func (s *Users) List(ctx context.Context, skip, limit int) ([]account.User, int64, error) {
	// The count of the whole collection: on MongoDB from its metadata, on
	// the embedded FerretDB a SQL count (docs/design/queries.md).
	total, err := s.c.EstimatedDocumentCount(ctx)
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
