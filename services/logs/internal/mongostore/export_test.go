package mongostore

import "context"

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
