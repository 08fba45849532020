// Package mongostore keeps log records, apps and dead letters in MongoDB (or
// a MongoDB-wire server such as FerretDB) and maps driver errors to the
// logs package's errors.
package mongostore

import (
	"context"
	"errors"
	"fmt"
	"github.com/acme/platform/pkg/mongox"
	"time"

	"github.com/acme/platform/services/logs/internal/logs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Collection names.
const (
	LogsCollection        = "logs"
	AppsCollection        = "log_apps"
	DeadLettersCollection = "log_dead_letters"
)

// Store implements logs.Store.
type Store struct {
	db   *mongo.Database
	logs *mongo.Collection
	apps *mongo.Collection
	dead *mongo.Collection
}

var _ logs.Store = (*Store)(nil)

// New returns a store on db.
func New(db *mongo.Database) *Store {
	return &Store{
		db:   db,
		logs: db.Collection(LogsCollection),
		apps: db.Collection(AppsCollection),
		dead: db.Collection(DeadLettersCollection),
	}
}

// Logs is the records collection (benchmarks write to it directly).
func (s *Store) Logs() *mongo.Collection { return s.logs }

type recordDoc struct {
	ID        bson.ObjectID `bson:"_id"`
	MsgID     string        `bson:"msgId"`
	AppID     string        `bson:"appId"`
	App       string        `bson:"app"`
	Type      string        `bson:"type"`
	LogBody   string        `bson:"logBody"`
	MetricsID *string       `bson:"metricsId"`
	CreatedAt time.Time     `bson:"createdAt"`
}

func toDoc(r logs.Record) (recordDoc, error) {
	d := recordDoc{MsgID: r.MsgID, AppID: r.AppID, App: r.App, Type: r.Type, LogBody: r.LogBody, CreatedAt: r.CreatedAt.UTC()}
	if r.ID == "" {
		d.ID = bson.NewObjectID()
	} else {
		id, err := bson.ObjectIDFromHex(r.ID)
		if err != nil {
			return d, fmt.Errorf("record id %q: %w", r.ID, err)
		}
		d.ID = id
	}
	if r.MetricsID != "" {
		m := r.MetricsID
		d.MetricsID = &m
	}
	return d, nil
}

func fromDoc(d recordDoc) logs.Record {
	r := logs.Record{ID: d.ID.Hex(), MsgID: d.MsgID, AppID: d.AppID, App: d.App, Type: d.Type, LogBody: d.LogBody, CreatedAt: d.CreatedAt.UTC()}
	if d.MetricsID != nil {
		r.MetricsID = *d.MetricsID
	}
	return r
}

// EnsureIndexes creates the indexes (idempotent). Each query of the service
// has one: type+time, app+type+time, metricsId+time, time alone for
// retention, plus the unique message id that makes ingestion idempotent.
// On FerretDB's SQLite backend only uniqueness is enforced by an index; its
// queries scan (see the README).
func (s *Store) EnsureIndexes(ctx context.Context) error {
	type ix struct {
		c     *mongo.Collection
		model mongo.IndexModel
	}
	byTime := bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}
	with := func(prefix ...string) bson.D {
		var d bson.D
		for _, p := range prefix {
			d = append(d, bson.E{Key: p, Value: 1})
		}
		return append(d, byTime...)
	}
	all := []ix{
		{s.logs, mongo.IndexModel{Keys: bson.D{{Key: "msgId", Value: 1}}, Options: options.Index().SetUnique(true).SetName("msgId_unique")}},
		{s.logs, mongo.IndexModel{Keys: with("type"), Options: options.Index().SetName("type_time")}},
		{s.logs, mongo.IndexModel{Keys: with("appId", "type"), Options: options.Index().SetName("app_type_time")}},
		{s.logs, mongo.IndexModel{Keys: with("type", "metricsId"), Options: options.Index().SetName("type_metrics_time")}},
		{s.logs, mongo.IndexModel{Keys: bson.D{{Key: "createdAt", Value: 1}}, Options: options.Index().SetName("time")}},
		{s.apps, mongo.IndexModel{Keys: bson.D{{Key: "name", Value: 1}}, Options: options.Index().SetUnique(true).SetName("name_unique")}},
		{s.dead, mongo.IndexModel{Keys: bson.D{{Key: "receivedAt", Value: -1}}, Options: options.Index().SetName("received")}},
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
	return out, nil
}

// Insert implements logs.Store.
func (s *Store) Insert(ctx context.Context, r logs.Record) (logs.Record, error) {
	d, err := toDoc(r)
	if err != nil {
		return logs.Record{}, err
	}
	if _, err := s.logs.InsertOne(ctx, d); err != nil {
		if mongox.IsDuplicate(err) {
			return logs.Record{}, logs.ErrDuplicate
		}
		return logs.Record{}, err
	}
	return fromDoc(d), nil
}

// InsertBatch implements logs.Store with one unordered InsertMany: the
// documents that do not collide are all written, and a duplicate key on
// msgId (a redelivery) is reported as logs.ErrDuplicate, which callers
// treat as success.
func (s *Store) InsertBatch(ctx context.Context, rs []logs.Record) ([]error, error) {
	per := make([]error, len(rs))
	if len(rs) == 0 {
		return per, nil
	}
	docs := make([]any, len(rs))
	for i, r := range rs {
		d, err := toDoc(r)
		if err != nil {
			return nil, err
		}
		docs[i] = d
	}
	_, err := s.logs.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err == nil {
		return per, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
		return nil, err
	}
	for _, we := range bwe.WriteErrors {
		if we.Index < 0 || we.Index >= len(rs) {
			return nil, err
		}
		if isDuplicateCode(we.Code) {
			per[we.Index] = logs.ErrDuplicate
			continue
		}
		per[we.Index] = fmt.Errorf("write error %d: %s", we.Code, we.Message)
	}
	return per, nil
}

func isDuplicateCode(code int) bool { return code == 11000 || code == 11001 || code == 12582 }

// Get implements logs.Store; an id that is not an ObjectID is not found.
func (s *Store) Get(ctx context.Context, id string) (logs.Record, error) {
	oid, err := bson.ObjectIDFromHex(id)
	if err != nil {
		return logs.Record{}, logs.ErrNotFound
	}
	var d recordDoc
	if err := s.logs.FindOne(ctx, bson.M{"_id": oid}).Decode(&d); err != nil {
		if errors.Is(err, mongo.ErrNoDocuments) {
			return logs.Record{}, logs.ErrNotFound
		}
		return logs.Record{}, err
	}
	return fromDoc(d), nil
}

// List implements logs.Store: newest first by (createdAt, _id).
func (s *Store) List(ctx context.Context, q logs.Query) ([]logs.Record, error) {
	filter := bson.D{}
	if q.AppID != "" {
		filter = append(filter, bson.E{Key: "appId", Value: q.AppID})
	}
	filter = append(filter, bson.E{Key: "type", Value: q.Type})
	if q.MetricsID != "" {
		filter = append(filter, bson.E{Key: "metricsId", Value: q.MetricsID})
	}
	created := bson.D{}
	if !q.From.IsZero() {
		created = append(created, bson.E{Key: "$gte", Value: q.From.UTC()})
	}
	if !q.To.IsZero() {
		created = append(created, bson.E{Key: "$lt", Value: q.To.UTC()})
	}
	if len(created) > 0 {
		filter = append(filter, bson.E{Key: "createdAt", Value: created})
	}
	if q.Before != nil {
		oid, err := bson.ObjectIDFromHex(q.Before.ID)
		if err != nil {
			return nil, logs.ErrNotFound
		}
		t := q.Before.CreatedAt.UTC()
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "createdAt", Value: bson.D{{Key: "$lt", Value: t}}}},
			bson.D{{Key: "createdAt", Value: t}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: oid}}}},
		}})
	}
	opts := options.Find().
		SetSort(bson.D{{Key: "createdAt", Value: -1}, {Key: "_id", Value: -1}}).
		SetLimit(int64(q.Limit))
	if q.Skip > 0 {
		opts.SetSkip(int64(q.Skip))
	}
	cur, err := s.logs.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	var docs []recordDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make([]logs.Record, len(docs))
	for i, d := range docs {
		out[i] = fromDoc(d)
	}
	return out, nil
}

// DeleteBefore implements logs.Store.
func (s *Store) DeleteBefore(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.logs.DeleteMany(ctx, bson.M{"createdAt": bson.M{"$lt": t.UTC()}})
	if err != nil {
		return 0, err
	}
	return res.DeletedCount, nil
}

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
	_, err := s.dead.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
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

// Ping implements logs.Store.
func (s *Store) Ping(ctx context.Context) error {
	return s.db.Client().Ping(ctx, nil)
}
