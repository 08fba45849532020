package mongostore

// The stored form of a chunk (a document of log_chunks). Its records are
// plain sub-documents in the array r, with the fields of the API's log
// record, so that MongoDB's own tools (mongosh, Compass, mongoexport) find,
// count and export them with $unwind:
//
//	{_id: "t.log#12", key: "t.log", n: 12, pos: 11000, count: 1000, batch: "…",
//	 minAt, maxAt, at, hiAt: ISODate(…), low: BinData(…), bloom: BinData(…),
//	 r: [{id: "01…", appId: "…", type: "log", logBody: "…", metricsId: "…",
//	      createdAt: ISODate(…)}, …]}
//
// metricsId is absent when the record has none. Every record is in two
// chains (its type's and its app's): a query over all chunks counts each
// twice unless it keeps to one kind of chain (key "t.<type>" or
// "a.<appId>.<type>"); docs/logs.md shows such queries.
//
// Chunks are built and read with bsoncore, without reflection: the chunk
// is the unit of every write and read, and its records are most of the
// store's work in this process.
//
// Chunks written before records were documents hold r as one binary value
// (a BSON document {r: [...]} of records with short field names and no
// type); they are read through decodeLegacyRecords and never written again.

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Field names of a record in a chunk: those of the API's log record.
const (
	fieldID        = "id"
	fieldAppID     = "appId"
	fieldType      = "type"
	fieldLogBody   = "logBody"
	fieldMetricsID = "metricsId"
	fieldCreatedAt = "createdAt"
)

// MarshalBSON encodes c as stored.
func (c chunkDoc) MarshalBSON() ([]byte, error) {
	size := 512 + len(c.Bloom)*(bloomBytes+1)
	for _, r := range c.Records {
		size += len(r.LogBody) + len(r.MetricsID) + len(r.AppID) + 128
	}
	dst := make([]byte, 0, size)
	start, dst := bsoncore.AppendDocumentStart(dst)
	dst = bsoncore.AppendStringElement(dst, "_id", c.ID)
	dst = bsoncore.AppendStringElement(dst, "key", c.Key)
	dst = bsoncore.AppendInt64Element(dst, "n", c.N)
	dst = bsoncore.AppendInt64Element(dst, "pos", c.Pos)
	dst = bsoncore.AppendInt64Element(dst, "count", c.Count)
	dst = bsoncore.AppendStringElement(dst, "batch", c.Batch)
	dst = bsoncore.AppendTimeElement(dst, "minAt", c.MinAt)
	dst = bsoncore.AppendTimeElement(dst, "maxAt", c.MaxAt)
	dst = bsoncore.AppendTimeElement(dst, "at", c.At)
	dst = bsoncore.AppendTimeElement(dst, "hiAt", c.HiAt)
	if len(c.Low) > 0 {
		low := make([]byte, 0, 8*len(c.Low))
		for _, t := range c.Low {
			low = binary.BigEndian.AppendUint64(low, uint64(t.UnixMilli()))
		}
		dst = bsoncore.AppendBinaryElement(dst, "low", bson.TypeBinaryGeneric, low)
	}
	if bl := encodeBlooms(c.Bloom); len(bl) > 0 {
		dst = bsoncore.AppendBinaryElement(dst, "bloom", bson.TypeBinaryGeneric, bl)
	}
	typ, keyApp := splitKey(c.Key)
	arr, dst := bsoncore.AppendArrayElementStart(dst, "r")
	for i, r := range c.Records {
		// The array index as the element's key, without a string.
		dst = append(dst, byte(bsoncore.TypeEmbeddedDocument))
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, 0)
		var rec int32
		rec, dst = bsoncore.AppendDocumentStart(dst)
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeString, fieldID)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(2*len(r.ID)+1))
		dst = hex.AppendEncode(dst, r.ID[:])
		dst = append(dst, 0)
		appID := r.AppID
		if appID == "" {
			appID = keyApp
		}
		dst = bsoncore.AppendStringElement(dst, fieldAppID, appID)
		dst = bsoncore.AppendStringElement(dst, fieldType, typ)
		dst = bsoncore.AppendStringElement(dst, fieldLogBody, r.LogBody)
		if r.MetricsID != "" {
			dst = bsoncore.AppendStringElement(dst, fieldMetricsID, r.MetricsID)
		}
		dst = bsoncore.AppendTimeElement(dst, fieldCreatedAt, r.CreatedAt)
		var err error
		if dst, err = bsoncore.AppendDocumentEnd(dst, rec); err != nil {
			return nil, err
		}
	}
	dst, err := bsoncore.AppendArrayEnd(dst, arr)
	if err != nil {
		return nil, err
	}
	return bsoncore.AppendDocumentEnd(dst, start)
}

// UnmarshalBSON decodes a stored chunk, either form of its records.
func (c *chunkDoc) UnmarshalBSON(b []byte) error { return decodeChunk(b, c, true) }

// decodeChunk decodes a chunk's fields into c; its records too when
// records is set (a chunk read without r, for its header, has none).
func decodeChunk(b []byte, c *chunkDoc, records bool) error {
	*c = chunkDoc{}
	elems, err := bsoncore.Document(b).Elements()
	if err != nil {
		return err
	}
	var low, bloom, r bsoncore.Value
	for _, e := range elems {
		switch v := e.Value(); string(e.KeyBytes()) {
		case "low":
			low = v
		case "bloom":
			bloom = v
		case "r":
			r = v
		default:
			c.setHeaderField(string(e.KeyBytes()), v)
		}
	}
	if c.HiAt.IsZero() {
		c.HiAt = c.MaxAt // written before HiAt existed
	}
	if err := c.decodeSummaries(low, bloom); err != nil {
		return err
	}
	if !records {
		return nil
	}
	switch r.Type {
	case bsoncore.TypeArray:
		c.Records, err = decodeRecords(r.Array())
	case bsoncore.TypeBinary:
		_, data := r.Binary()
		c.Records, err = decodeLegacyRecords(data)
	default:
		err = errors.New("no records")
	}
	if err != nil {
		return fmt.Errorf("chunk %s: records: %w", c.ID, err)
	}
	if int64(len(c.Records)) != c.Count {
		return fmt.Errorf("chunk %s: %d records, count says %d", c.ID, len(c.Records), c.Count)
	}
	return nil
}

// setHeaderField sets the field of c stored under key (other keys are
// ignored).
func (c *chunkDoc) setHeaderField(key string, v bsoncore.Value) {
	switch key {
	case "_id":
		c.ID, _ = v.StringValueOK()
	case "key":
		c.Key, _ = v.StringValueOK()
	case "n":
		c.N, _ = v.AsInt64OK()
	case "pos":
		c.Pos, _ = v.AsInt64OK()
	case "count":
		c.Count, _ = v.AsInt64OK()
	case "batch":
		c.Batch, _ = v.StringValueOK()
	case "minAt":
		c.MinAt = timeOf(v)
	case "maxAt":
		c.MaxAt = timeOf(v)
	case "at":
		c.At = timeOf(v)
	case "hiAt":
		c.HiAt = timeOf(v)
	}
}

// decodeSummaries sets c.Low and c.Bloom from their stored forms (absent:
// none).
func (c *chunkDoc) decodeSummaries(low, bloom bsoncore.Value) error {
	if low.Type == bsoncore.TypeBinary {
		_, b := low.Binary()
		if len(b)%8 != 0 {
			return fmt.Errorf("chunk %s: low has %d bytes", c.ID, len(b))
		}
		for ; len(b) > 0; b = b[8:] {
			c.Low = append(c.Low, time.UnixMilli(int64(binary.BigEndian.Uint64(b))).UTC())
		}
	}
	if bloom.Type == bsoncore.TypeBinary {
		_, b := bloom.Binary()
		bl, err := decodeBlooms(b)
		if err != nil {
			return fmt.Errorf("chunk %s: %w", c.ID, err)
		}
		c.Bloom = bl
	}
	return nil
}

func timeOf(v bsoncore.Value) time.Time {
	ms, ok := v.DateTimeOK()
	if !ok {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// decodeRecords reads the sub-documents of r.
func decodeRecords(arr bsoncore.Array) ([]chunkRec, error) {
	vals, err := arr.Values()
	if err != nil {
		return nil, err
	}
	out := make([]chunkRec, len(vals))
	for i, v := range vals {
		doc, ok := v.DocumentOK()
		if !ok {
			return nil, fmt.Errorf("record %d is not a document", i)
		}
		if out[i], err = decodeRecord(doc); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
	}
	return out, nil
}

func decodeRecord(doc bsoncore.Document) (chunkRec, error) {
	var r chunkRec
	var haveID, haveAt bool
	for rem := doc[4 : len(doc)-1]; len(rem) > 0; {
		e, next, ok := bsoncore.ReadElement(rem)
		if !ok {
			return r, errors.New("malformed")
		}
		rem = next
		v := e.Value()
		switch string(e.KeyBytes()) {
		case fieldID:
			s, _ := v.StringValueOK()
			id, err := bson.ObjectIDFromHex(s)
			if err != nil {
				return r, fmt.Errorf("id %q: %w", s, err)
			}
			r.ID, haveID = id, true
		case fieldAppID:
			r.AppID, _ = v.StringValueOK()
		case fieldLogBody:
			r.LogBody, _ = v.StringValueOK()
		case fieldMetricsID:
			r.MetricsID, _ = v.StringValueOK()
		case fieldCreatedAt:
			var ms int64
			ms, haveAt = v.DateTimeOK()
			r.CreatedAt = time.UnixMilli(ms).UTC()
		}
	}
	if !haveID || !haveAt {
		return r, errors.New("no id or createdAt")
	}
	return r, nil
}

// legacyRec is a record as chunks kept them in their binary field r.
type legacyRec struct {
	ID        bson.ObjectID `bson:"i"`
	AppID     string        `bson:"a,omitempty"`
	LogBody   string        `bson:"b"`
	MetricsID *string       `bson:"m,omitempty"`
	CreatedAt time.Time     `bson:"c"`
}

// decodeLegacyRecords reads the records of a chunk written before records
// were documents: r was a binary value holding the document {r: [...]}.
func decodeLegacyRecords(data []byte) ([]chunkRec, error) {
	var w struct {
		R []legacyRec `bson:"r"`
	}
	if err := bson.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	out := make([]chunkRec, len(w.R))
	for i, l := range w.R {
		out[i] = chunkRec{ID: l.ID, AppID: l.AppID, LogBody: l.LogBody, CreatedAt: l.CreatedAt.UTC()}
		if l.MetricsID != nil {
			out[i].MetricsID = *l.MetricsID
		}
	}
	return out, nil
}
