package mongostore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// FailBeforeAppend makes InsertBatch fail before listing in a chain for
// which fail returns true (a crash between the id documents and the
// chunks, or between two chains).
func FailBeforeAppend(s *Store, fail func(key string) bool) {
	s.beforeAppend = func(_ context.Context, key string) error {
		if fail != nil && fail(key) {
			return errCrash
		}
		return nil
	}
}

// TypeKey and AppKey name the chains.
func TypeKey(typ string) string       { return typeKey(typ) }
func AppKey(appID, typ string) string { return appKey(appID, typ) }

// SetChunkMax sets the records per chunk (small in tests, so that a few
// hundred records span many chunks).
func SetChunkMax(s *Store, n int) { s.chunkMax = n }

// CheckBlocks reads key's chain from the server and reports the first
// chunk whose HiAt is not the newest createdAt of it and every chunk before
// it, or whose Low or Bloom levels are not those of the blocks ending at it
// recomputed from the records (a Bloom level is kept while not more than
// half full).
func CheckBlocks(ctx context.Context, s *Store, key string) error {
	head, err := s.head(ctx, key)
	if err != nil || head == nil {
		return err
	}
	var hi time.Time
	var mins []time.Time // by chunk number - 1
	var own [][]byte     // each chunk's own Bloom filter
	for n := int64(1); n <= head.N; n++ {
		c, err := s.storedChunk(ctx, key, n)
		if err != nil {
			return err
		}
		lo := c.Records[0].CreatedAt
		f := make([]byte, bloomBytes)
		for _, r := range c.Records {
			hi, lo = maxTime(hi, r.CreatedAt), minTime(lo, r.CreatedAt)
			if r.MetricsID != "" {
				for _, p := range bloomPositions(r.MetricsID) {
					f[p/8] |= 1 << (p % 8)
				}
			}
		}
		mins, own = append(mins, lo), append(own, f)
		if !c.HiAt.Equal(hi) {
			return fmt.Errorf("chunk %s: HiAt %v, the newest createdAt up to it is %v", c.ID, c.HiAt, hi)
		}
		levels := 0
		for n%(1<<levels) == 0 {
			levels++
		}
		if len(c.Low) != levels {
			return fmt.Errorf("chunk %s: %d levels of Low, want %d", c.ID, len(c.Low), levels)
		}
		blooms := 0
		for l := range levels {
			block := mins[n-1<<l:]
			if w := slices.MinFunc(block, func(a, b time.Time) int { return a.Compare(b) }); !c.Low[l].Equal(w) {
				return fmt.Errorf("chunk %s: Low[%d] %v, the oldest createdAt of chunks %d..%d is %v", c.ID, l, c.Low[l], n-1<<l+1, n, w)
			}
			want := make([]byte, bloomBytes)
			for _, g := range own[n-1<<l:] {
				for i := range want {
					want[i] |= g[i]
				}
			}
			if bloomFull(want) || blooms < l {
				continue
			}
			blooms++
			if l >= len(c.Bloom) {
				return fmt.Errorf("chunk %s: no Bloom level %d, though it is %d%% full", c.ID, l, fill(want))
			}
			got := c.Bloom[l]
			if len(got) == 0 {
				got = make([]byte, bloomBytes)
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("chunk %s: Bloom level %d differs from the blocks' metricsIds", c.ID, l)
			}
		}
		if len(c.Bloom) != blooms {
			return fmt.Errorf("chunk %s: %d Bloom levels, want %d", c.ID, len(c.Bloom), blooms)
		}
	}
	return nil
}

func fill(f []byte) int {
	n := 0
	for _, x := range f {
		n += bits.OnesCount8(x)
	}
	return n * 100 / bloomBits
}

// ChunkReads is how many chunks the store has read from the server (not
// from its cache).
func ChunkReads(s *Store) int64 { return s.chunkReads.Load() }

// legacyChunk is a chunk as earlier versions encoded it, by reflection.
type legacyChunk struct {
	ID    string      `bson:"_id"`
	Key   string      `bson:"key"`
	N     int64       `bson:"n"`
	Pos   int64       `bson:"pos"`
	Count int64       `bson:"count"`
	Batch string      `bson:"batch"`
	MinAt time.Time   `bson:"minAt"`
	MaxAt time.Time   `bson:"maxAt"`
	At    time.Time   `bson:"at"`
	HiAt  time.Time   `bson:"hiAt"`
	Low   []byte      `bson:"low,omitempty"`
	Bloom []byte      `bson:"bloom,omitempty"`
	R     bson.Binary `bson:"r"`
}

func toLegacy(c chunkDoc) (legacyChunk, error) {
	inner, err := packRecords(c.Records, c.Key[0] == 't')
	if err != nil {
		return legacyChunk{}, err
	}
	l := legacyChunk{ID: c.ID, Key: c.Key, N: c.N, Pos: c.Pos, Count: c.Count, Batch: c.Batch, MinAt: c.MinAt, MaxAt: c.MaxAt,
		At: c.At, HiAt: c.HiAt, Bloom: encodeBlooms(c.Bloom), R: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: inner}}
	for _, t := range c.Low {
		l.Low = binary.BigEndian.AppendUint64(l.Low, uint64(t.UnixMilli()))
	}
	return l, nil
}

// FailBeforeCopy makes writes fail before they write records documents
// (a crash between a write's chunks and their copy), while fail is set.
func FailBeforeCopy(s *Store, fail bool) {
	s.beforeCopy = nil
	if fail {
		s.beforeCopy = func() error { return errCrash }
	}
}

// MoveRelistMarksToHeads moves the relist marks from log_ids to log_heads,
// where versions before them kept them, and reports how many it moved.
func MoveRelistMarksToHeads(ctx context.Context, s *Store) (int, error) {
	testkit.AllowScan(s.db.Name(), IDsCollection, "{_id: {$regex: string}}") // the test's own move
	cur, err := s.ids.Find(ctx, bson.M{"_id": bson.M{"$regex": "^r\\|"}})
	if err != nil {
		return 0, err
	}
	var marks []relistDoc
	if err := cur.All(ctx, &marks); err != nil {
		return 0, err
	}
	for _, m := range marks {
		if _, err := s.headHints.InsertOne(ctx, m); err != nil {
			return 0, err
		}
		if _, err := s.ids.DeleteOne(ctx, bson.M{"_id": m.ID}); err != nil {
			return 0, err
		}
	}
	return len(marks), nil
}
