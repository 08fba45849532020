package s3store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/acme/platform/services/files/internal/files"
)

// PutNew is a conditional write on MinIO: of 8 concurrent writers of one
// key exactly one stores its bytes, the others get ErrConflict and the
// stored object is the winner's, with its digest.
func TestPutNewFirstWins(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const key = "variants/2026/01/0123456789abcdef0123456789abcdef/10x10-q82.jpeg"
	if _, err := s.Stat(ctx, key); !errors.Is(err, files.ErrNotFound) {
		t.Fatalf("stat of a missing key: %v", err)
	}
	var won atomic.Int64
	var winner atomic.Value
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			data := bytes.Repeat([]byte{byte('a' + i)}, 1000+i)
			err := s.PutNew(ctx, key, data, "image/jpeg", string(rune('a'+i)))
			switch {
			case err == nil:
				won.Add(1)
				winner.Store(data)
			case !errors.Is(err, files.ErrConflict):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d writers won, want 1", won.Load())
	}
	want := winner.Load().([]byte)
	st, err := s.Stat(ctx, key)
	if err != nil || st.Size != int64(len(want)) || st.SHA256 != string(rune(want[0])) {
		t.Fatalf("stat %+v %v", st, err)
	}
	obj, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	if !bytes.Equal(got, want) {
		t.Fatal("stored bytes are not the winner's")
	}
}
