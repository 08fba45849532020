// Package mongostore keeps log records, apps and dead letters in MongoDB (or
// a MongoDB-wire server such as FerretDB) and maps driver errors to the
// logs package's errors.
package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acme/platform/pkg/mongox"

	"github.com/acme/platform/services/logs/internal/logs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Collection names.
const (
	ChunksCollection = "log_chunks" // records, in chains of chunks (chunks.go, chunkdoc.go)
	// RecordsCollection holds the records of each type chain's chunk again
	// as plain documents, for MongoDB's own tools (chunkdoc.go); the
	// service writes it and never reads it.
	RecordsCollection = "log_records"
	// IDsCollection holds what each write did (ids.go): its batch document,
	// its slots of stream sequences, and its relist marks.
	IDsCollection = "log_ids"
	// HeadHintsCollection holds one head hint per chain: the number of a
	// recent chunk of the chain, where a process new to it starts looking
	// for its newest chunk (_id: the chain's key).
	HeadHintsCollection   = "log_heads"
	AppsCollection        = "log_apps"
	DeadLettersCollection = "log_dead_letters"
)

// Store implements logs.Store.
type Store struct {
	db        *mongo.Database
	chunks    *mongo.Collection
	records   *mongo.Collection
	ids       *mongo.Collection
	headHints *mongo.Collection
	apps      *mongo.Collection
	dead      *mongo.Collection
	heads     heads
	slots     slots
	cache     *chunkCache

	chunkMax   int  // records per chunk (chunkMaxRecords; tests make it small)
	filterScan int  // chunks a filtered read looks at (DefaultFilterScan)
	recordDocs bool // write log_records (SetRecordDocuments)
	// chunkReads counts chunks read from the server (tests count lookups).
	chunkReads atomic.Int64
	// beforeAppend, when set (tests), runs before each chain is written.
	beforeAppend func(ctx context.Context, key string) error
	// beforeCopy, when set (tests), runs before records documents are
	// written.
	beforeCopy func() error

	appsMu   sync.Mutex
	appIDs   []string          // the apps EnsureApps returned: the chains retention visits
	appNames map[string]string // App record id -> name ("" for none), for reads
}

var _ logs.Store = (*Store)(nil)

// New returns a store on db.
func New(db *mongo.Database) *Store {
	return &Store{
		db:         db,
		chunks:     db.Collection(ChunksCollection),
		records:    db.Collection(RecordsCollection),
		ids:        db.Collection(IDsCollection),
		headHints:  db.Collection(HeadHintsCollection),
		apps:       db.Collection(AppsCollection),
		dead:       db.Collection(DeadLettersCollection),
		heads:      heads{last: map[string]*chunkDoc{}, claim: map[string]*sync.Mutex{}},
		slots:      slots{ranges: map[string]*cachedRange{}, lock: map[string]*sync.Mutex{}},
		chunkMax:   chunkMaxRecords,
		filterScan: DefaultFilterScan,
		cache:      newChunkCache(DefaultChunkCacheBytes),
		appNames:   map[string]string{},
	}
}

// SetChunkCache sets the size of the chunk cache in bytes (0: none). Call
// it before using the store.
func (s *Store) SetChunkCache(bytes int64) { s.cache = newChunkCache(bytes) }

// SetFilterScan sets how many chunks a filtered read looks at, at most
// (n >= 1). Call it before using the store.
func (s *Store) SetFilterScan(n int) { s.filterScan = max(n, 1) }

// SetRecordDocuments says whether writes copy the records of the type
// chains to log_records as plain documents, for MongoDB's own tools (off
// unless asked, as LOGS_RECORD_DOCUMENTS is; on, a write costs about twice
// the CPU). Call it before using the store.
func (s *Store) SetRecordDocuments(on bool) { s.recordDocs = on }

// EnsureIndexes creates the indexes (idempotent). Reads address chunks and
// id documents by _id only; the other indexes serve retention and the
// uniqueness of app names.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	all := []struct {
		c     *mongo.Collection
		model mongo.IndexModel
	}{
		{s.ids, mongo.IndexModel{Keys: bson.D{{Key: "at", Value: 1}}, Options: options.Index().SetName("at_time")}},
		{s.apps, mongo.IndexModel{Keys: bson.D{{Key: "name", Value: 1}}, Options: options.Index().SetUnique(true).SetName("name_unique")}},
		{s.dead, mongo.IndexModel{Keys: bson.D{{Key: "receivedAt", Value: -1}, {Key: "_id", Value: -1}}, Options: options.Index().SetName("receivedAt_id")}},
	}
	for _, i := range all {
		if err := mongox.EnsureIndexes(ctx, i.c, i.model); err != nil {
			return err
		}
	}
	return nil
}

type appDoc struct {
	ID   bson.ObjectID `bson:"_id"`
	Name string        `bson:"name"`
}

// EnsureApps implements logs.Store: find by name, else insert; a duplicate
// key means another replica inserted it first, so read it again.
func (s *Store) EnsureApps(ctx context.Context, names []string) ([]logs.App, error) {
	out := make([]logs.App, 0, len(names))
	for _, name := range names {
		var d appDoc
		err := s.apps.FindOne(ctx, bson.M{"name": name}).Decode(&d)
		if errors.Is(err, mongo.ErrNoDocuments) {
			d = appDoc{ID: bson.NewObjectID(), Name: name}
			_, err = s.apps.InsertOne(ctx, d)
			if mongox.IsDuplicate(err) {
				err = s.apps.FindOne(ctx, bson.M{"name": name}).Decode(&d)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("app %q: %w", name, err)
		}
		out = append(out, logs.App{ID: d.ID.Hex(), Name: d.Name})
	}
	s.appsMu.Lock()
	for _, a := range out {
		if !slices.Contains(s.appIDs, a.ID) {
			s.appIDs = append(s.appIDs, a.ID)
		}
		s.appNames[a.ID] = a.Name
	}
	s.appsMu.Unlock()
	return out, nil
}

func isDuplicateCode(code int) bool { return code == 11000 || code == 11001 || code == 12582 }

type deadDoc struct {
	Key        string    `bson:"_id"`
	Stream     string    `bson:"stream"`
	Sequence   int64     `bson:"seq"`
	Subject    string    `bson:"subject"`
	MsgID      string    `bson:"msgId"`
	Data       string    `bson:"data"`
	Reason     string    `bson:"reason"`
	Deliveries int64     `bson:"deliveries"`
	ReceivedAt time.Time `bson:"receivedAt"`
}

// AddDeadLetters implements logs.Store; an entry already stored (same
// stream and sequence, a redelivery) is left as it is.
func (s *Store) AddDeadLetters(ctx context.Context, ds []logs.DeadLetter) error {
	if len(ds) == 0 {
		return nil
	}
	docs := make([]any, len(ds))
	for i, d := range ds {
		docs[i] = deadDoc{Key: d.Key, Stream: d.Stream, Sequence: int64(d.Sequence), Subject: d.Subject, MsgID: d.MsgID,
			Data: d.Data, Reason: d.Reason, Deliveries: int64(d.Deliveries), ReceivedAt: d.ReceivedAt.UTC()}
	}
	return insertNew(ctx, s.dead, docs)
}

// insertNew inserts docs (unordered); those whose _id is there already
// are left as they are.
func insertNew(ctx context.Context, coll *mongo.Collection, docs []any) error {
	_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && bwe.WriteConcernError == nil {
		for _, we := range bwe.WriteErrors {
			if !isDuplicateCode(we.Code) {
				return err
			}
		}
		return nil
	}
	return err
}

// ListDeadLetters implements logs.Store, newest first.
func (s *Store) ListDeadLetters(ctx context.Context, skip, limit int) ([]logs.DeadLetter, error) {
	opts := options.Find().SetSort(bson.D{{Key: "receivedAt", Value: -1}, {Key: "_id", Value: -1}}).SetLimit(int64(limit))
	if skip > 0 {
		opts.SetSkip(int64(skip))
	}
	cur, err := s.dead.Find(ctx, bson.D{}, opts)
	if err != nil {
		return nil, err
	}
	var docs []deadDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make([]logs.DeadLetter, len(docs))
	for i, d := range docs {
		out[i] = logs.DeadLetter{Key: d.Key, Stream: d.Stream, Sequence: uint64(d.Sequence), Subject: d.Subject, MsgID: d.MsgID,
			Data: d.Data, Reason: d.Reason, Deliveries: uint64(d.Deliveries), ReceivedAt: d.ReceivedAt.UTC()}
	}
	return out, nil
}

// Database is the database the store keeps its collections in.
func (s *Store) Database() *mongo.Database { return s.db }

// Ping implements logs.Store.
func (s *Store) Ping(ctx context.Context) error {
	return s.db.Client().Ping(ctx, nil)
}
