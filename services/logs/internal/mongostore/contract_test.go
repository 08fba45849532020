package mongostore_test

import (
	"context"
	"testing"

	"github.com/acme/platform/services/logs/internal/logs"
	"github.com/acme/platform/services/logs/internal/logs/storetest"
	"github.com/acme/platform/services/logs/internal/mongostore"
)

// The store keeps the contract of logs.Store, with chunks of the default
// size and with small ones (a write then spans several chunks per chain).
func TestStoreContract(t *testing.T) {
	t.Run("DefaultChunks", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) logs.Store { return newStore(t) })
	})
	t.Run("SmallChunks", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) logs.Store {
			st := newStore(t)
			mongostore.SetChunkMax(st, 16)
			return st
		})
	})
}

// A database written by an older version, whose chunks keep their records
// in one binary field, is read and written on as well: the contract holds
// when every chunk is rewritten in the old form after each write (the
// store then reads only old chunks, and builds each new chunk's summaries
// from old ones).
func TestStoreContractOnOldChunks(t *testing.T) {
	storetest.Run(t, func(t *testing.T) logs.Store {
		st := newStore(t)
		mongostore.SetChunkMax(st, 16)
		return oldChunks{st}
	})
}

// oldChunks rewrites every chunk in the old form after each write.
type oldChunks struct{ *mongostore.Store }

func (o oldChunks) InsertBatch(ctx context.Context, rs []logs.Record) ([]error, error) {
	per, err := o.Store.InsertBatch(ctx, rs)
	if err == nil {
		_, err = mongostore.ToLegacyChunks(ctx, o.Store)
	}
	return per, err
}
