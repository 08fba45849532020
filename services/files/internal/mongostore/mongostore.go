// Package mongostore keeps file records in MongoDB (or a MongoDB-wire
// server such as FerretDB), translating driver errors into the files
// domain's.
package mongostore

import (
	"context"
	"errors"
	"fmt"
	"github.com/acme/platform/pkg/mongox"
	"time"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Collection is the collection of file records.
const Collection = "files"

// Store is a files.Store.
type Store struct {
	coll *mongo.Collection
}

var _ files.Store = (*Store)(nil)

// New returns a store on db.
func New(db *mongo.Database) *Store {
	return &Store{coll: db.Collection(Collection)}
}

// EnsureIndexes creates the listing index (idempotent).
func (s *Store) EnsureIndexes(ctx context.Context) error {
	return mapErr(mongox.EnsureIndexes(ctx, s.coll, mongo.IndexModel{
		Keys:    bson.D{{Key: "owner", Value: 1}, {Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}},
		Options: options.Index().SetName("owner_createdAt"),
	}))
}

type fileDoc struct {
	ID        string    `bson:"_id"`
	Kind      string    `bson:"kind"`
	Owner     string    `bson:"owner"`
	Type      string    `bson:"type"`
	Key       string    `bson:"key"`
	Name      string    `bson:"name"`
	Meta      *string   `bson:"meta"`
	Size      int64     `bson:"size"`
	SHA256    string    `bson:"sha256"`
	Encoding  string    `bson:"encoding,omitempty"`
	Stored    int64     `bson:"stored"`
	Width     int       `bson:"width,omitempty"`
	Height    int       `bson:"height,omitempty"`
	CreatedAt time.Time `bson:"createdAt"`
}

func toDoc(f *files.File) fileDoc {
	return fileDoc{
		ID: f.ID, Kind: string(f.Kind), Owner: f.Owner, Type: f.Type, Key: f.Key, Name: f.Name,
		Meta: f.Meta, Size: f.Size, SHA256: f.SHA256, Encoding: f.Encoding, Stored: f.Stored,
		Width: f.Width, Height: f.Height, CreatedAt: f.CreatedAt.UTC(),
	}
}

func fromDoc(d *fileDoc) *files.File {
	return &files.File{
		ID: d.ID, Kind: files.Kind(d.Kind), Owner: d.Owner, Type: d.Type, Key: d.Key, Name: d.Name,
		Meta: d.Meta, Size: d.Size, SHA256: d.SHA256, Encoding: d.Encoding, Stored: d.Stored,
		Width: d.Width, Height: d.Height, CreatedAt: d.CreatedAt.UTC(),
	}
}

// Insert writes a new record.
func (s *Store) Insert(ctx context.Context, f *files.File) error {
	_, err := s.coll.InsertOne(ctx, toDoc(f))
	return mapErr(err)
}

// Get finds a record by id.
func (s *Store) Get(ctx context.Context, id string) (*files.File, error) {
	var d fileDoc
	if err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		return nil, mapErr(err)
	}
	return fromDoc(&d), nil
}

// ListByOwner returns owner's records, newest first.
func (s *Store) ListByOwner(ctx context.Context, owner string, skip, limit int) ([]*files.File, error) {
	opts := options.Find().
		SetSort(bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}).
		SetSkip(int64(skip)).
		SetLimit(int64(limit))
	cur, err := s.coll.Find(ctx, bson.D{{Key: "owner", Value: owner}}, opts)
	if err != nil {
		return nil, mapErr(err)
	}
	var docs []fileDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, mapErr(err)
	}
	out := make([]*files.File, len(docs))
	for i := range docs {
		out[i] = fromDoc(&docs[i])
	}
	return out, nil
}

// Existing returns which of ids have a record.
func (s *Store) Existing(ctx context.Context, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	cur, err := s.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, mapErr(err)
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, mapErr(err)
	}
	for _, d := range docs {
		out[d.ID] = true
	}
	return out, nil
}

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return files.ErrNotFound
	case mongox.IsDuplicate(err):
		return fmt.Errorf("%w: %v", files.ErrConflict, err)
	case web.IsUnavailable(err):
		return fmt.Errorf("%w: %v", files.ErrUnavailable, err)
	}
	return err
}
