package mongostore

import (
	"context"
	"time"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/auth/internal/account"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// FactorsCollection keeps one TOTP factor per user, by user id.
const FactorsCollection = "mfa_factors"

// Factors is the account.FactorStore on MongoDB.
type Factors struct{ c *mongo.Collection }

// NewFactors returns the factor store of db.
func NewFactors(db *mongo.Database) *Factors { return &Factors{c: db.Collection(FactorsCollection)} }

type factorDoc struct {
	UserID    string    `bson:"_id"`
	Secret    string    `bson:"secret"` // sealed unless no key is configured
	Confirmed bool      `bson:"confirmed"`
	Recovery  []string  `bson:"recovery"` // hex SHA-256 of the unspent codes
	LastStep  int64     `bson:"lastStep"`
	CreatedAt time.Time `bson:"createdAt"`
}

// Begin implements account.FactorStore.
func (s *Factors) Begin(ctx context.Context, f account.Factor) error {
	d := factorDoc{UserID: f.UserID, Secret: f.Secret, Recovery: []string{}, CreatedAt: f.CreatedAt}
	_, err := s.c.ReplaceOne(ctx, bson.D{{Key: "_id", Value: f.UserID}, {Key: "confirmed", Value: false}}, d, options.Replace().SetUpsert(true))
	if mongox.IsDuplicate(err) {
		return account.ErrMFAEnabled // a confirmed factor holds the id
	}
	return err
}

// Get implements account.FactorStore.
func (s *Factors) Get(ctx context.Context, userID string) (account.Factor, error) {
	return decodeOne(s.c.FindOne(ctx, bson.D{{Key: "_id", Value: userID}}), account.ErrFactorNotFound, func(d factorDoc) account.Factor {
		return account.Factor{UserID: d.UserID, Secret: d.Secret, Confirmed: d.Confirmed, Recovery: d.Recovery, LastStep: d.LastStep, CreatedAt: d.CreatedAt.UTC()}
	})
}

// Confirm implements account.FactorStore.
func (s *Factors) Confirm(ctx context.Context, userID string, recovery []string, step int64) error {
	r, err := s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}, {Key: "confirmed", Value: false}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "confirmed", Value: true}, {Key: "recovery", Value: recovery}, {Key: "lastStep", Value: step}}}})
	if err != nil {
		return err
	}
	if r.MatchedCount == 0 {
		return account.ErrNoEnrolment
	}
	return nil
}

// UseStep implements account.FactorStore: the filter admits only a later
// step, so one code is accepted once even by concurrent requests.
func (s *Factors) UseStep(ctx context.Context, userID string, step int64) error {
	r, err := s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}, {Key: "confirmed", Value: true}, {Key: "lastStep", Value: bson.D{{Key: "$lt", Value: step}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastStep", Value: step}}}})
	if err != nil {
		return err
	}
	if r.MatchedCount == 0 {
		return account.ErrCodeUsed
	}
	return nil
}

// UseRecovery implements account.FactorStore: the hash is matched and
// pulled by one single-document update.
func (s *Factors) UseRecovery(ctx context.Context, userID, hash string) error {
	r, err := s.c.UpdateOne(ctx, bson.D{{Key: "_id", Value: userID}, {Key: "confirmed", Value: true}, {Key: "recovery", Value: hash}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "recovery", Value: hash}}}})
	if err != nil {
		return err
	}
	if r.MatchedCount == 0 {
		return account.ErrCodeUsed
	}
	return nil
}

// Delete implements account.FactorStore.
func (s *Factors) Delete(ctx context.Context, userID string) error {
	_, err := s.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: userID}})
	return err
}
