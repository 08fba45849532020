package mongostore_test

import (
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
