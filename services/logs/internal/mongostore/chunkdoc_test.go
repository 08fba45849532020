package mongostore

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Chunks are encoded byte for byte as earlier versions encoded them, and
// decode back to what was encoded: a database written before keeps
// working, in both directions.
func TestChunkEncodingIsTheEarlierOne(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, key := range []string{typeKey("log"), appKey("665f1c2e9b1e8a0012345678", "error")} {
		c := chunkDoc{ID: chunkID(key, 4), Key: key, N: 4, Pos: 30, Count: 3, Batch: "00112233445566", MinAt: at, MaxAt: at.Add(2 * time.Second),
			At: at.Add(time.Minute), HiAt: at.Add(3 * time.Second), Low: []time.Time{at, at.Add(-time.Second), at.Add(-2 * time.Second)},
			Bloom: [][]byte{bytes.Repeat([]byte{1}, bloomBytes), nil}}
		for i := range 3 {
			r := chunkRec{ID: bson.NewObjectID(), LogBody: fmt.Sprint("body ", i), CreatedAt: at.Add(time.Duration(i) * time.Second)}
			if key[0] == 't' {
				r.AppID = "665f1c2e9b1e8a00123456aa"
			}
			if i == 1 {
				r.MetricsID = "m1"
			}
			c.Records = append(c.Records, r)
		}
		got, err := bson.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		old, err := toLegacy(c)
		if err != nil {
			t.Fatal(err)
		}
		want, err := bson.Marshal(old)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: encoded\n%v\nearlier versions encode\n%v", key, bson.Raw(got), bson.Raw(want))
		}
		var back chunkDoc
		if err := bson.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("%s: decoded %+v, encoded %+v", key, back, c)
		}
	}
}
