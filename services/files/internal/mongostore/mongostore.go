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

// Collections of the store.
const (
	Collection      = "files"      // file records
	LinksCollection = "file_links" // share links
	// QuotaCollection held the quotas set for single users; they are kept
	// in UsageCollection, and EnsureIndexes moves any found here there.
	QuotaCollection = "file_quotas"
	// SlotsCollection held one document per download taken of a limited
	// link; the link's downloads field counts them, and EnsureIndexes
	// folds any found here into it.
	SlotsCollection = "file_link_downloads"
	// UsageCollection (usage.go) holds each owner's account: bytes,
	// count and own quota.
)

// Store is a files.Store.
type Store struct {
	coll   *mongo.Collection
	links  *mongo.Collection
	quotas *mongo.Collection // only read to move its quotas (EnsureIndexes)
	slots  *mongo.Collection // only read to fold its slots (EnsureIndexes)
	usage  *mongo.Collection // each owner's account (usage.go)
}

var _ files.Store = (*Store)(nil)

// New returns a store on db.
func New(db *mongo.Database) *Store {
	return &Store{coll: db.Collection(Collection), links: db.Collection(LinksCollection), quotas: db.Collection(QuotaCollection), slots: db.Collection(SlotsCollection), usage: db.Collection(UsageCollection)}
}

// EnsureIndexes creates the listing and link indexes, moves quotas left in
// QuotaCollection into the owners' accounts and folds download slots left
// in SlotsCollection into their links' counts (idempotent).
func (s *Store) EnsureIndexes(ctx context.Context) error {
	if err := s.moveQuotas(ctx); err != nil {
		return err
	}
	if err := s.foldDownloadSlots(ctx); err != nil {
		return err
	}
	if err := mongox.EnsureIndexes(ctx, s.coll, mongo.IndexModel{
		Keys:    bson.D{{Key: "owner", Value: 1}, {Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}},
		Options: options.Index().SetName("owner_createdAt"),
	}); err != nil {
		return mapErr(err)
	}
	if err := mongox.EnsureIndexes(ctx, s.links,
		mongo.IndexModel{Keys: bson.D{{Key: "tokenHash", Value: 1}}, Options: options.Index().SetName("tokenHash").SetUnique(true)},
		mongo.IndexModel{Keys: bson.D{{Key: "fileId", Value: 1}, {Key: "createdAt", Value: -1}}, Options: options.Index().SetName("fileId_createdAt")},
		mongo.IndexModel{Keys: bson.D{{Key: "expiresAt", Value: 1}}, Options: options.Index().SetName("expiresAt")},
	); err != nil {
		return mapErr(err)
	}
	return nil
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

type linkDoc struct {
	ID           string    `bson:"_id"`
	FileID       string    `bson:"fileId"`
	Owner        string    `bson:"owner"`
	TokenHash    string    `bson:"tokenHash"`
	CreatedAt    time.Time `bson:"createdAt"`
	ExpiresAt    time.Time `bson:"expiresAt"`
	MaxDownloads int64     `bson:"maxDownloads"`
	Downloads    int64     `bson:"downloads"`
}

func toLinkDoc(l *files.Link) linkDoc {
	return linkDoc{ID: l.ID, FileID: l.FileID, Owner: l.Owner, TokenHash: l.TokenHash, CreatedAt: l.CreatedAt.UTC(),
		ExpiresAt: l.ExpiresAt.UTC(), MaxDownloads: l.MaxDownloads, Downloads: l.Downloads}
}

func fromLinkDoc(d *linkDoc) *files.Link {
	return &files.Link{ID: d.ID, FileID: d.FileID, Owner: d.Owner, TokenHash: d.TokenHash, CreatedAt: d.CreatedAt.UTC(),
		ExpiresAt: d.ExpiresAt.UTC(), MaxDownloads: d.MaxDownloads, Downloads: d.Downloads}
}

// InsertLink writes a new share link.
func (s *Store) InsertLink(ctx context.Context, l *files.Link) error {
	_, err := s.links.InsertOne(ctx, toLinkDoc(l))
	return mapErr(err)
}

// LinkByTokenHash finds a link by the hash of its token.
func (s *Store) LinkByTokenHash(ctx context.Context, hash string) (*files.Link, error) {
	var d linkDoc
	if err := s.links.FindOne(ctx, bson.D{{Key: "tokenHash", Value: hash}}).Decode(&d); err != nil {
		return nil, linkErr(err)
	}
	return fromLinkDoc(&d), nil
}

// LinksByFile returns a file's links, newest first.
func (s *Store) LinksByFile(ctx context.Context, fileID string) ([]*files.Link, error) {
	cur, err := s.links.Find(ctx, bson.D{{Key: "fileId", Value: fileID}},
		options.Find().SetSort(bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}).SetLimit(1000))
	if err != nil {
		return nil, mapErr(err)
	}
	var docs []linkDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, mapErr(err)
	}
	out := make([]*files.Link, len(docs))
	for i := range docs {
		out[i] = fromLinkDoc(&docs[i])
	}
	return out, nil
}

// DeleteLink removes one link of a file.
func (s *Store) DeleteLink(ctx context.Context, fileID, id string) error {
	res, err := s.links.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "fileId", Value: fileID}})
	if err != nil {
		return mapErr(err)
	}
	if res.DeletedCount == 0 {
		return files.ErrLinkNotFound
	}
	return nil
}

// DeleteLinksByFile removes every link of a file.
func (s *Store) DeleteLinksByFile(ctx context.Context, fileID string) error {
	_, err := s.links.DeleteMany(ctx, bson.D{{Key: "fileId", Value: fileID}})
	return mapErr(err)
}

// CountDownload takes one of the link's max downloads in one atomic
// conditional update: updateOne({_id, downloads: {$lt: max}}, {$inc:
// {downloads: 1}}), atomic on MongoDB and on the embedded server
// (TestCountDownloadIsAtomic). Nothing matched means none was left, or
// the link is gone (then ErrLinkNotFound).
func (s *Store) CountDownload(ctx context.Context, id string, max int64) (bool, error) {
	res, err := s.links.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "downloads", Value: bson.D{{Key: "$lt", Value: max}}}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "downloads", Value: int64(1)}}}})
	if err != nil {
		return false, mapErr(err)
	}
	if res.MatchedCount == 1 {
		return true, nil
	}
	if err := s.links.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Err(); err != nil {
		return false, linkErr(err)
	}
	return false, nil
}

// DeleteLinksExpiredBefore removes links that expired before t.
func (s *Store) DeleteLinksExpiredBefore(ctx context.Context, t time.Time) (int64, error) {
	filter := bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$lt", Value: t.UTC()}}}}
	cur, err := s.links.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetLimit(1000))
	if err != nil {
		return 0, mapErr(err)
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil || len(docs) == 0 {
		return 0, mapErr(err)
	}
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	res, err := s.links.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return 0, mapErr(err)
	}
	return res.DeletedCount, nil
}

// moveQuotas moves the quotas of QuotaCollection into the owners' account
// documents that have none, then deletes each there unless it changed
// meanwhile. The collection's count is read first (in
// constant time), so an empty one costs no read of its documents.
func (s *Store) moveQuotas(ctx context.Context) error {
	if n, err := s.quotas.EstimatedDocumentCount(ctx); err != nil || n == 0 {
		return mapErr(err)
	}
	cur, err := s.quotas.Find(ctx, bson.D{})
	if err != nil {
		return mapErr(err)
	}
	var docs []struct {
		ID    string `bson:"_id"`
		Quota int64  `bson:"quota"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return mapErr(err)
	}
	for _, d := range docs {
		// An account that has its own quota already was set since: it wins.
		_, err := s.usage.UpdateOne(ctx, bson.D{{Key: "_id", Value: d.ID}, {Key: "quota", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "quota", Value: d.Quota}}}}, options.UpdateOne().SetUpsert(true))
		if err != nil && !mongox.IsDuplicate(err) {
			return mapErr(err)
		}
		if _, err := s.quotas.DeleteOne(ctx, bson.D{{Key: "_id", Value: d.ID}, {Key: "quota", Value: d.Quota}}); err != nil {
			return mapErr(err)
		}
	}
	return nil
}

// foldDownloadSlots raises each link's downloads to the number of slot
// documents SlotsCollection holds for it, then drops the collection. The
// collection's count is read first (in constant time), so an empty or
// missing one costs no read of its documents.
func (s *Store) foldDownloadSlots(ctx context.Context) error {
	if n, err := s.slots.EstimatedDocumentCount(ctx); err != nil || n == 0 {
		return mapErr(err)
	}
	cur, err := s.slots.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "linkId", Value: 1}}))
	if err != nil {
		return mapErr(err)
	}
	var slots []struct {
		LinkID string `bson:"linkId"`
	}
	if err := cur.All(ctx, &slots); err != nil {
		return mapErr(err)
	}
	taken := map[string]int64{}
	for _, sl := range slots {
		taken[sl.LinkID]++
	}
	for id, n := range taken {
		if _, err := s.links.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "downloads", Value: bson.D{{Key: "$lt", Value: n}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "downloads", Value: n}}}}); err != nil {
			return mapErr(err)
		}
	}
	return mapErr(s.slots.Drop(ctx))
}

func linkErr(err error) error {
	if errors.Is(err, mongo.ErrNoDocuments) {
		return files.ErrLinkNotFound
	}
	return mapErr(err)
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

// TakeVariant counts one more variant of image id in one atomic
// conditional write: findOneAndUpdate({_id, kind: image, variants: {$lt:
// max} or missing}, {$inc: {variants: 1}}), atomic on MongoDB and on the
// embedded server (TestTakeVariantIsAtomic). Nothing matched: the image
// has max variants, or is gone.
func (s *Store) TakeVariant(ctx context.Context, id string, max int64) (bool, error) {
	filter := bson.D{{Key: "_id", Value: id}, {Key: "kind", Value: string(files.KindImage)}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "variants", Value: bson.D{{Key: "$lt", Value: max}}}},
		bson.D{{Key: "variants", Value: bson.D{{Key: "$exists", Value: false}}}},
	}}}
	err := s.coll.FindOneAndUpdate(ctx, filter, bson.D{{Key: "$inc", Value: bson.D{{Key: "variants", Value: int64(1)}}}}).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, mapErr(err)
}

// GiveBackVariant uncounts one variant of image id.
func (s *Store) GiveBackVariant(ctx context.Context, id string) error {
	_, err := s.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "variants", Value: bson.D{{Key: "$gt", Value: 0}}}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "variants", Value: int64(-1)}}}})
	return mapErr(err)
}
