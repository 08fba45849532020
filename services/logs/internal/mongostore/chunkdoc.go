package mongostore

// The stored forms of a chunk: the chunk itself (log_chunks), which the
// service reads, and for a type chain's chunk its records again as plain
// documents (log_records), which only MongoDB's own tools read.
//
// A chunk keeps its records packed in one binary value r (the BSON
// document {r: [packedRec]}): FerretDB parses every value of a document
// each time it is read, whatever the projection, so a chunk of 1,000
// records as sub-documents takes several times longer to read than a
// packed one, and every cold page, search and count reads chunks
// (docs/design/log-store.md has the figures).
//
// The records document of a type chain's chunk has the chunk's _id and
// time range and its records as sub-documents with the fields of the API's
// log record, so that mongosh, Compass or mongoexport find, count and
// export them with $unwind; each record is in exactly one type chain, so
// each is there once:
//
//	{_id: "t.log#12", key: "t.log", n: 12, minAt, maxAt: ISODate(…),
//	 r: [{id: "01…", appId: "…", type: "log", logBody: "…", metricsId: "…",
//	      createdAt: ISODate(…)}, …]}
//
// metricsId is absent when the record has none. Both are built with
// bsoncore, without reflection, and chunks are read the same way.

import (
	"encoding/binary"
	"encoding/hex"
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
	start, dst := c.startDoc(len(c.Bloom) * (bloomBytes + 1))
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
	packed, err := packRecords(c.Records, !isAppKey(c.Key))
	if err != nil {
		return nil, err
	}
	dst = bsoncore.AppendBinaryElement(dst, "r", bson.TypeBinaryGeneric, packed)
	return bsoncore.AppendDocumentEnd(dst, start)
}

// startDoc starts a document for c, of about its records' size plus
// extra bytes, with the fields that name it (_id, key, n).
func (c *chunkDoc) startDoc(extra int) (int32, []byte) {
	size := 512 + extra
	for _, r := range c.Records {
		size += len(r.LogBody) + len(r.MetricsID) + len(r.AppID) + 128
	}
	start, dst := bsoncore.AppendDocumentStart(make([]byte, 0, size))
	dst = bsoncore.AppendStringElement(dst, "_id", c.ID)
	dst = bsoncore.AppendStringElement(dst, "key", c.Key)
	return start, bsoncore.AppendInt64Element(dst, "n", c.N)
}

// recordsDoc is the records document of chunk c of a type chain.
func recordsDoc(c *chunkDoc) (bson.Raw, error) {
	start, dst := c.startDoc(0)
	dst = bsoncore.AppendTimeElement(dst, "minAt", c.MinAt)
	dst = bsoncore.AppendTimeElement(dst, "maxAt", c.MaxAt)
	dst, err := appendRecords(dst, c.Key, c.Records)
	if err != nil {
		return nil, err
	}
	return bsoncore.AppendDocumentEnd(dst, start)
}

// appendRecords appends the records of a type chain's chunk as the array
// r of plain documents.
func appendRecords(dst []byte, key string, recs []chunkRec) ([]byte, error) {
	typ, _ := splitKey(key)
	arr, dst := bsoncore.AppendArrayElementStart(dst, "r")
	for i, r := range recs {
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
		dst = bsoncore.AppendStringElement(dst, fieldAppID, r.AppID)
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
	return bsoncore.AppendArrayEnd(dst, arr)
}

// UnmarshalBSON decodes a stored chunk.
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
	_, data, ok := r.BinaryOK()
	if !ok {
		return fmt.Errorf("chunk %s: no packed records", c.ID)
	}
	if c.Records, err = decodePackedRecords(data); err != nil {
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

// packedRec is a record in a chunk: short names, no type (the chain's),
// no app id in an app chain (the chain's).
type packedRec struct {
	ID        bson.ObjectID `bson:"i"`
	AppID     string        `bson:"a,omitempty"`
	LogBody   string        `bson:"b"`
	MetricsID *string       `bson:"m,omitempty"`
	CreatedAt time.Time     `bson:"c"`
}

type packedRecs struct {
	R []packedRec `bson:"r"`
}

// packRecords packs the records of a chunk: the BSON document {r:
// [packedRec]}, stored as one binary value; with their app ids (in a type
// chain) when withApp is set.
func packRecords(recs []chunkRec, withApp bool) ([]byte, error) {
	w := packedRecs{R: make([]packedRec, len(recs))}
	for i, r := range recs {
		w.R[i] = packedRec{ID: r.ID, LogBody: r.LogBody, CreatedAt: r.CreatedAt}
		if withApp {
			w.R[i].AppID = r.AppID
		}
		if r.MetricsID != "" {
			w.R[i].MetricsID = &recs[i].MetricsID
		}
	}
	return bson.Marshal(w)
}

// decodePackedRecords reads the records of a chunk.
func decodePackedRecords(data []byte) ([]chunkRec, error) {
	var w packedRecs
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
