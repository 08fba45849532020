package mongostore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/services/files/internal/files"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func newStore(t *testing.T) *Store {
	t.Helper()
	kit := testkit.Get(t, testkit.Mongo)
	s := New(kit.Mongo.Database(kit.Database(t)))
	for i := 0; i < 2; i++ { // idempotent
		if err := s.EnsureIndexes(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func record(owner string, at time.Time) *files.File {
	id := files.NewID()
	meta := `{"a":1}`
	return &files.File{ID: id, Kind: files.KindFile, Owner: owner, Type: "text/plain", Key: files.ObjectKey(files.KindFile, id, at),
		Name: "n.txt", Meta: &meta, Size: 10, SHA256: "ab", Encoding: files.EncodingGzip, Stored: 8, CreatedAt: at.UTC().Truncate(time.Millisecond)}
}

func TestRoundTrip(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	f := record("u1", time.Now())
	if err := s.Insert(ctx, f); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if *got.Meta != *f.Meta || got.Key != f.Key || !got.CreatedAt.Equal(f.CreatedAt) || got.Encoding != f.Encoding || got.Stored != 8 || got.Owner != "u1" {
		t.Fatalf("got %+v, want %+v", got, f)
	}
	img := record("u1", time.Now())
	img.Kind, img.Meta, img.Width, img.Height = files.KindImage, nil, 3, 4
	if err := s.Insert(ctx, img); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, img.ID); got.Meta != nil || got.Width != 3 || got.Height != 4 || got.Kind != files.KindImage {
		t.Fatalf("image %+v", got)
	}
	if _, err := s.Get(ctx, files.NewID()); !errors.Is(err, files.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if err := s.Insert(ctx, f); !errors.Is(err, files.ErrConflict) {
		t.Fatalf("duplicate id: %v", err)
	}
}

func TestListAndExisting(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	base := time.Now()
	var mine []*files.File
	for i := 0; i < 5; i++ {
		f := record("me", base.Add(time.Duration(i)*time.Second))
		mine = append(mine, f)
		if err := s.Insert(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Insert(ctx, record("other", base.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListByOwner(ctx, "me", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 3 || page[0].ID != mine[3].ID || page[2].ID != mine[1].ID {
		t.Fatalf("page: %v", page)
	}
	have, err := s.Existing(ctx, []string{mine[0].ID, files.NewID(), mine[4].ID})
	if err != nil || len(have) != 2 || !have[mine[0].ID] || !have[mine[4].ID] {
		t.Fatalf("existing %v %v", have, err)
	}
}
