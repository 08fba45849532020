package mongostore

import (
	"context"
	"errors"
	"fmt"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/files/internal/files"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// UsageCollection holds one document per owner, their account:
// {_id: owner, bytes, count, quota}. bytes and count are the sum of the
// sizes of the owner's records and their number, reservations of uploads
// in flight included; quota is the owner's own quota, absent when the
// service's default applies. Keeping the quota in the same document lets
// a reservation be checked against it in the one atomic write that takes
// it, and an administrator's change of it be a write of that document.
//
// Exactness: bytes and count are made once from the records (makeUsage),
// before the first change of the owner's records, and every change after
// that is an $inc of this one document, atomic on MongoDB and on the
// embedded server (docs/design/ferretdb.md; TestReserveIsAtomic): an
// upload's reservation before its record is written, a deletion's give
// back after its record is removed. Of concurrent makers the first write
// wins: a reservation needs bytes to be there, so every record written
// after a reservation was written after the sum that made bytes, and no
// record is counted twice or missed. A process killed between a
// reservation and its record's insert leaves the count one upload high
// (never low, so the quota holds); one killed between a record's delete
// and its give back leaves it high by that record. ForgetUsage drops bytes
// and count, so the next use makes them again from the records.
const UsageCollection = "file_usage"

type accountDoc struct {
	ID    string `bson:"_id"`
	Bytes *int64 `bson:"bytes"` // nil: not counted yet
	Count int64  `bson:"count"`
	Quota *int64 `bson:"quota"` // nil: the default quota applies
}

func fromAccountDoc(d *accountDoc) files.Account {
	a := files.Account{Count: max(d.Count, 0)}
	if d.Bytes != nil {
		a.Bytes = max(*d.Bytes, 0)
	}
	if d.Quota != nil {
		a.Quota, a.OwnQuota = *d.Quota, true
	}
	return a
}

func byOwner(owner string) bson.D { return bson.D{{Key: "_id", Value: owner}} }

// Account implements files.AccountStore: one read by _id, and, the first
// time, the count made from the records.
func (s *Store) Account(ctx context.Context, owner string) (files.Account, error) {
	d, err := s.ensureUsage(ctx, owner)
	if err != nil {
		return files.Account{}, err
	}
	return fromAccountDoc(&d), nil
}

// ensureUsage returns owner's account document, with bytes and count made
// from the owner's records when they are not there yet.
func (s *Store) ensureUsage(ctx context.Context, owner string) (accountDoc, error) {
	var d accountDoc
	err := s.usage.FindOne(ctx, byOwner(owner)).Decode(&d)
	if err == nil && d.Bytes != nil {
		return d, nil
	}
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return d, mapErr(err)
	}
	return s.makeUsage(ctx, owner)
}

// makeUsage sets owner's bytes and count from the sum of their records,
// unless another caller set them first. It is one write, an upsert on the
// known _id conditioned on bytes being absent: the document is made, or
// completed (an own quota set before the owner's first upload), or, when
// bytes are there already, the upsert's insert fails on the duplicate _id
// and the count that holds is the one the other caller made.
func (s *Store) makeUsage(ctx context.Context, owner string) (accountDoc, error) {
	var d accountDoc
	bytes, n, err := s.sumRecords(ctx, owner)
	if err != nil {
		return d, err
	}
	err = s.usage.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: owner}, {Key: "bytes", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "bytes", Value: bytes}, {Key: "count", Value: n}}}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&d)
	if mongox.IsDuplicate(err) {
		err = s.usage.FindOne(ctx, byOwner(owner)).Decode(&d)
	}
	if err == nil && d.Bytes == nil {
		err = fmt.Errorf("files: usage of %s not counted after it was made", owner)
	}
	return d, mapErr(err)
}

// Reserve implements files.AccountStore: findOneAndUpdate({_id: owner,
// quota: <as expected>, bytes: {$lte: max - n}}, {$inc: {bytes: n,
// count: 1}}), one atomic write. When nothing matches, the account is
// read (and made, the first time) to be returned.
func (s *Store) Reserve(ctx context.Context, owner string, n int64, expect files.Account, max int64) (files.Account, bool, error) {
	filter := byOwner(owner)
	if expect.OwnQuota {
		filter = append(filter, bson.E{Key: "quota", Value: expect.Quota})
	} else {
		filter = append(filter, bson.E{Key: "quota", Value: bson.D{{Key: "$exists", Value: false}}})
	}
	if max >= 0 {
		filter = append(filter, bson.E{Key: "bytes", Value: bson.D{{Key: "$lte", Value: max - n}}})
	} else {
		filter = append(filter, bson.E{Key: "bytes", Value: bson.D{{Key: "$exists", Value: true}}})
	}
	var d accountDoc
	err := s.usage.FindOneAndUpdate(ctx, filter,
		bson.D{{Key: "$inc", Value: bson.D{{Key: "bytes", Value: n}, {Key: "count", Value: int64(1)}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&d)
	if err == nil {
		return fromAccountDoc(&d), true, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return files.Account{}, false, mapErr(err)
	}
	a, err := s.Account(ctx, owner)
	return a, false, err
}

// Release implements files.AccountStore.
func (s *Store) Release(ctx context.Context, owner string, n int64) error {
	return s.addUsage(ctx, owner, -n, -1)
}

// SetQuota implements files.AccountStore: one write of the owner's
// account document, made with the quota alone when there is none yet
// (bytes and count are made from the records on first use).
func (s *Store) SetQuota(ctx context.Context, owner string, quota *int64) error {
	if quota == nil {
		_, err := s.usage.UpdateOne(ctx, byOwner(owner), bson.D{{Key: "$unset", Value: bson.D{{Key: "quota", Value: ""}}}})
		return mapErr(err)
	}
	_, err := s.usage.UpdateOne(ctx, byOwner(owner),
		bson.D{{Key: "$set", Value: bson.D{{Key: "quota", Value: *quota}}}}, options.UpdateOne().SetUpsert(true))
	return mapErr(err)
}

// ForgetUsage implements files.AccountStore: the owner's document goes
// when it holds no own quota, else its bytes and count go. Either way the
// next use makes them again from the records.
func (s *Store) ForgetUsage(ctx context.Context, owner string) error {
	res, err := s.usage.DeleteOne(ctx, bson.D{{Key: "_id", Value: owner}, {Key: "quota", Value: bson.D{{Key: "$exists", Value: false}}}})
	if err != nil || res.DeletedCount == 1 {
		return mapErr(err)
	}
	_, err = s.usage.UpdateOne(ctx, byOwner(owner), bson.D{{Key: "$unset", Value: bson.D{{Key: "bytes", Value: ""}, {Key: "count", Value: ""}}}})
	return mapErr(err)
}

// addUsage adds bytes and n to owner's counted usage.
func (s *Store) addUsage(ctx context.Context, owner string, bytes, n int64) error {
	res, err := s.usage.UpdateOne(ctx, bson.D{{Key: "_id", Value: owner}, {Key: "bytes", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "bytes", Value: bytes}, {Key: "count", Value: n}}}})
	if err != nil {
		return mapErr(err)
	}
	if res.MatchedCount == 0 {
		return errors.New("files: usage of " + owner + " vanished")
	}
	return nil
}

// sumRecords sums the sizes of owner's records and counts them.
func (s *Store) sumRecords(ctx context.Context, owner string) (int64, int64, error) {
	cur, err := s.coll.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "owner", Value: owner}}}},
		{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: nil},
			{Key: "bytes", Value: bson.D{{Key: "$sum", Value: "$size"}}},
		}}},
	})
	if err != nil {
		return 0, 0, mapErr(err)
	}
	var out []struct {
		Bytes int64 `bson:"bytes"`
	}
	if err := cur.All(ctx, &out); err != nil {
		return 0, 0, mapErr(err)
	}
	// Counted apart: FerretDB's $group does not sum constants.
	n, err := s.coll.CountDocuments(ctx, bson.D{{Key: "owner", Value: owner}})
	if err != nil || len(out) == 0 {
		return 0, n, mapErr(err)
	}
	return out[0].Bytes, n, nil
}

// Insert writes a new record. Its bytes were reserved (Reserve).
func (s *Store) Insert(ctx context.Context, f *files.File) error {
	_, err := s.coll.InsertOne(ctx, toDoc(f))
	return mapErr(err)
}

// Delete removes a record and gives its bytes back to its owner's account.
// The account is counted (made, the first time) before the record goes,
// so that the give back has a count to go to and a count made
// concurrently cannot include the removed record.
func (s *Store) Delete(ctx context.Context, id string) error {
	var d fileDoc
	if err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		return mapErr(err)
	}
	if _, err := s.ensureUsage(ctx, d.Owner); err != nil {
		return err
	}
	res, err := s.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return mapErr(err)
	}
	if res.DeletedCount == 0 {
		return files.ErrNotFound // a concurrent delete took it out
	}
	return s.addUsage(context.WithoutCancel(ctx), d.Owner, -d.Size, -1)
}
