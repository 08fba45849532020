package files

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/jpeg"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/imaging"
)

// oneImage is a Store holding one image record and its variant count.
type oneImage struct {
	Store
	f                *File
	taken, givenBack atomic.Int64
	slow             time.Duration // each TakeVariant takes this long
}

func (s *oneImage) Get(_ context.Context, id string) (*File, error) {
	if id != s.f.ID {
		return nil, ErrNotFound
	}
	return s.f, nil
}

func (s *oneImage) TakeVariant(context.Context, string, int64) (bool, error) {
	s.taken.Add(1)
	time.Sleep(s.slow)
	return true, nil
}

func (s *oneImage) GiveBackVariant(context.Context, string) error {
	s.givenBack.Add(1)
	return nil
}

// memObjects is an ObjectStore in memory, with the conditional put.
type memObjects struct {
	ObjectStore
	mu   sync.Mutex
	m    map[string][]byte
	gets int
}

func (o *memObjects) Get(_ context.Context, key string, _, _ int64) (*Object, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.gets++
	b, ok := o.m[key]
	if !ok {
		return nil, ErrNotFound
	}
	return &Object{Body: io.NopCloser(bytes.NewReader(b)), Size: int64(len(b))}, nil
}

func (o *memObjects) Stat(_ context.Context, key string) (ObjectStat, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.m[key]
	if !ok {
		return ObjectStat{}, ErrNotFound
	}
	return ObjectStat{Size: int64(len(b))}, nil
}

func (o *memObjects) PutNew(_ context.Context, key string, data []byte, _, _ string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.m[key]; ok {
		return ErrConflict
	}
	o.m[key] = bytes.Clone(data)
	return nil
}

func variantService(t *testing.T, wait time.Duration) (*Service, *oneImage, string) {
	s, st, _, id := variantServiceObjects(t, wait)
	return s, st, id
}

func variantServiceObjects(t *testing.T, wait time.Duration) (*Service, *oneImage, *memObjects, string) {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, 300, 200)), nil); err != nil {
		t.Fatal(err)
	}
	f := &File{ID: NewID(), Kind: KindImage, Type: "image/jpeg", Key: "images/2026/01/x", Width: 300, Height: 200,
		Size: int64(b.Len()), Stored: int64(b.Len()), CreatedAt: time.Now()}
	st := &oneImage{f: f}
	objs := &memObjects{m: map[string][]byte{f.Key: b.Bytes()}}
	s := NewService(st, objs, nil, Config{
		ImageConcurrency: 1, ImageWait: wait, ImageMemory: 256 << 20, ImageMaxBytes: 1 << 20,
		Image:    imaging.Options{MaxPixels: 40_000_000, MaxSide: 256, MaxMemory: 256 << 20, MaxScans: 16, JPEGQuality: 80},
		Variants: VariantConfig{MaxSide: 256, PerImage: 10, MetaCache: 100},
	})
	return s, st, objs, f.ID
}

// A render that cannot get a slot within ImageWait is ErrBusy (503 busy
// with Retry-After), its count is given back and the stored image was not
// even read (the budget comes first); once the slot is free the same
// variant renders.
func TestVariantBusy(t *testing.T) {
	s, st, objs, id := variantServiceObjects(t, 50*time.Millisecond)
	s.sem <- struct{}{} // another image holds the only slot
	_, err := s.Variant(context.Background(), id, VariantRequest{Width: 30})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("err %v, want ErrBusy", err)
	}
	if st.taken.Load() != 1 || st.givenBack.Load() != 1 || objs.gets != 0 {
		t.Fatalf("taken %d, given back %d, image read %d times", st.taken.Load(), st.givenBack.Load(), objs.gets)
	}
	<-s.sem
	v, err := s.Variant(context.Background(), id, VariantRequest{Width: 30})
	if err != nil || v.Width != 30 || v.Height != 20 || s.VariantRenders() != 1 {
		t.Fatalf("%+v %v renders %d", v, err, s.VariantRenders())
	}
}

// A variant whose render would take more than the per-image memory is
// refused before anything is decoded, and its count given back.
func TestVariantOverMemory(t *testing.T) {
	s, st, id := variantService(t, time.Second)
	s.cfg.Image.MaxMemory = 1 << 20
	_, err := s.Variant(context.Background(), id, VariantRequest{Width: 200, Format: "webp"})
	if !errors.Is(err, ErrImageTooMuchMemory) || st.givenBack.Load() != 1 {
		t.Fatalf("err %v, given back %d", err, st.givenBack.Load())
	}
}

// Concurrent first requests in one process wait for one render.
func TestVariantSingleRender(t *testing.T) {
	s, st, id := variantService(t, 10*time.Second)
	st.slow = 200 * time.Millisecond // all 20 arrive while the first renders
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := s.Variant(context.Background(), id, VariantRequest{Width: 64, Height: 64}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if s.VariantRenders() != 1 || st.taken.Load() != 1 {
		t.Fatalf("renders %d, counts taken %d", s.VariantRenders(), st.taken.Load())
	}
}
