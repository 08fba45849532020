package mongostore

import (
	"context"
	"errors"
	"log/slog"

	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/files/internal/files"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// UsageCollection holds one document per owner, {_id: owner, bytes,
// count}: the sum of the sizes of the owner's records and their number,
// kept by $inc on every insert and delete of a record. Reading an owner's
// usage is then one read by _id, whatever the number of records (a sum
// over them cost a read of every record on each upload, which grew with
// the owner's files).
//
// Exactness: the document is made before the first change of its owner's
// records (ensureUsage, from the sum of the records then), and every
// change after it is counted by $inc, which is atomic on MongoDB and on
// the embedded server (docs/design/ferretdb.md). Of concurrent first
// changes, the first insert of the document wins; its sum was read before
// it was written, and every change made after some caller's ensureUsage
// returned is counted by $inc, so no record is counted twice or missed.
// A failure between a record's write and its $inc is undone where it can
// be (the record removed); a process killed in between leaves the count
// off by that record until the document is made again: an erased owner's
// is deleted at the end of the erasure (ForgetUsage). Deleting an owner's document while the owner has no
// upload in flight makes the next use count the records again
// (docs/files.md, Quotas).
const UsageCollection = "file_usage"

type usageDoc struct {
	ID    string `bson:"_id"`
	Bytes int64  `bson:"bytes"`
	Count int64  `bson:"count"`
}

// Usage returns owner's bytes and number of records.
func (s *Store) Usage(ctx context.Context, owner string) (int64, int64, error) {
	d, err := s.ensureUsage(ctx, owner)
	if err != nil {
		return 0, 0, err
	}
	return max(d.Bytes, 0), max(d.Count, 0), nil
}

// ensureUsage returns owner's usage document, making it from the sum of
// the owner's records when there is none.
func (s *Store) ensureUsage(ctx context.Context, owner string) (usageDoc, error) {
	var d usageDoc
	err := s.usage.FindOne(ctx, bson.D{{Key: "_id", Value: owner}}).Decode(&d)
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return d, mapErr(err)
	}
	bytes, n, err := s.sumRecords(ctx, owner)
	if err != nil {
		return d, err
	}
	d = usageDoc{ID: owner, Bytes: bytes, Count: n}
	if _, err := s.usage.InsertOne(ctx, d); mongox.IsDuplicate(err) {
		// Another caller made it first: its count is the one that holds.
		err = s.usage.FindOne(ctx, bson.D{{Key: "_id", Value: owner}}).Decode(&d)
		return d, mapErr(err)
	} else if err != nil {
		return d, mapErr(err)
	}
	return d, nil
}

// ForgetUsage implements files.Store: owner's usage document is deleted,
// and the next Usage, Insert or Delete of the owner makes it again from
// the records.
func (s *Store) ForgetUsage(ctx context.Context, owner string) error {
	_, err := s.usage.DeleteOne(ctx, bson.D{{Key: "_id", Value: owner}})
	return mapErr(err)
}

// addUsage adds bytes and n to owner's usage document.
func (s *Store) addUsage(ctx context.Context, owner string, bytes, n int64) error {
	res, err := s.usage.UpdateOne(ctx, bson.D{{Key: "_id", Value: owner}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "bytes", Value: bytes}, {Key: "count", Value: n}}}})
	if err != nil {
		return mapErr(err)
	}
	if res.MatchedCount == 0 {
		return errors.New("files: usage document of " + owner + " vanished")
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

// Insert writes a new record and counts it in its owner's usage.
func (s *Store) Insert(ctx context.Context, f *files.File) error {
	if _, err := s.ensureUsage(ctx, f.Owner); err != nil {
		return err
	}
	doc := toDoc(f)
	if _, err := s.coll.InsertOne(ctx, doc); err != nil {
		// An insert whose answer was lost may have been written: count it
		// if it was. A duplicate is a record counted when it was written.
		var got fileDoc
		if mongox.IsDuplicate(err) || s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: f.ID}}).Decode(&got) != nil || got.Key != doc.Key {
			return mapErr(err)
		}
	}
	if err := s.addUsage(ctx, f.Owner, f.Size, 1); err != nil {
		// Uncounted, the record would let its owner pass the quota: take
		// it back.
		if _, derr := s.coll.DeleteOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: f.ID}}); derr != nil {
			slog.Default().Error("files: record stored but not counted in its owner's usage", "file", f.ID, "owner", f.Owner, "err", derr)
		}
		return err
	}
	return nil
}

// Delete removes a record and takes it out of its owner's usage.
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
