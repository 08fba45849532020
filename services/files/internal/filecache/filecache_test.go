package filecache

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/files"
)

// fakeStore is a files.Store whose Get and Delete call the test's functions
// (the other methods are not used here and panic).
type fakeStore struct {
	files.Store
	get    func(id string) (*files.File, error)
	delete func(id string) error
}

func (f fakeStore) Get(_ context.Context, id string) (*files.File, error) { return f.get(id) }
func (f fakeStore) Delete(_ context.Context, id string) error             { return f.delete(id) }

func TestGetCachesCopiesAndDeleteAnnounces(t *testing.T) {
	reads := 0
	inner := fakeStore{
		get: func(id string) (*files.File, error) {
			reads++
			if id != "f1" {
				return nil, files.ErrNotFound
			}
			return &files.File{ID: "f1", Name: "a.txt"}, nil
		},
		delete: func(string) error { return nil },
	}
	var announced [][]string
	s := New(inner, NewCache(time.Minute, 10), nil, func(_ context.Context, d Deleted) { announced = append(announced, d.Files) })
	ctx := context.Background()
	f, err := s.Get(ctx, "f1")
	if err != nil || f.Name != "a.txt" {
		t.Fatalf("Get: %+v %v", f, err)
	}
	f.Name = "changed by a caller"
	g, _ := s.Get(ctx, "f1")
	if g.Name != "a.txt" || reads != 1 {
		t.Fatalf("second Get: %q after %d reads; want the cached record, unchanged by the first caller", g.Name, reads)
	}
	for range 2 {
		if _, err := s.Get(ctx, "nope"); !errors.Is(err, files.ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
	}
	if reads != 3 {
		t.Fatalf("%d reads: a not-found answer was cached", reads)
	}
	if err := s.Delete(ctx, "f1"); err != nil {
		t.Fatal(err)
	}
	if len(announced) != 1 || len(announced[0]) != 1 || announced[0][0] != "f1" {
		t.Fatalf("announced %v, want [[f1]]", announced)
	}
	_, _ = s.Get(ctx, "f1")
	if reads != 4 { // the delete read the owner from the cache
		t.Fatal("the deleted record was still served from the cache")
	}
}

func TestApply(t *testing.T) {
	c := NewCache(time.Minute, 10)
	load := func(_ context.Context, id string) (files.File, error) { return files.File{ID: id}, nil }
	for _, id := range []string{"a", "b", "c"} {
		_, _ = c.Get(context.Background(), id, load)
	}
	apply := Apply(c, nil, "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	apply([]byte(`{"files":["a","b"]}`))
	if c.Len() != 1 {
		t.Fatalf("%d entries after deleting a and b, want 1", c.Len())
	}
	apply([]byte(`not json`))
	if c.Len() != 0 {
		t.Fatal("an unreadable message must clear the cache")
	}
}
