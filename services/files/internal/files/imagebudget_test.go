package files

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/png"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/imaging"
)

// png16 is a real w×h 16-bit RGBA PNG.
func png16(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA64(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 31)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// hostile16 is a PNG header claiming w×h at 16-bit RGBA with a few zeros of
// data: the attack's shape, a small upload that decodes to 8 bytes a pixel.
func hostile16(w, h uint32) []byte {
	chunk := func(typ string, data []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
		b = append(append(b, typ...), data...)
		return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, w), h)
	ihdr = append(ihdr, 16, 6, 0, 0, 0)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	_, _ = zw.Write(make([]byte, 8192))
	_ = zw.Close()
	b := append([]byte("\x89PNG\r\n\x1a\n"), chunk("IHDR", ihdr)...)
	b = append(b, chunk("IDAT", z.Bytes())...)
	return append(b, chunk("IEND", nil)...)
}

func budgetService(memory, perImage int64, wait time.Duration) *Service {
	return NewService(nil, nil, nil, Config{
		ImageConcurrency: 16, // only the memory budget limits here
		ImageWait:        wait,
		ImageMemory:      memory,
		Image:            imaging.Options{MaxPixels: 40_000_000, MaxSide: 256, MaxMemory: perImage, JPEGQuality: 80},
	})
}

// TestImageMemoryBudgetParallel: many images at once, within budget one by
// one, never hold more than the process budget together and all succeed;
// hostile ones (over the per-image budget) are refused before decoding.
func TestImageMemoryBudgetParallel(t *testing.T) {
	good := png16(t, 400, 400)
	cost, err := imaging.Estimate(good, imaging.Options{MaxPixels: 40_000_000, MaxSide: 256})
	if err != nil {
		t.Fatal(err)
	}
	weight := cost.Bytes() + int64(len(good))
	budget := 2*weight + weight/2 // room for two at once
	s := budgetService(budget, budget, 30*time.Second)
	s.freeAbove = 0
	var maxHeld, overBudget atomic.Int64
	s.afterImage = func() { // runs with the image's budget still held
		h := s.ImageMemoryHeld()
		for m := maxHeld.Load(); h > m && !maxHeld.CompareAndSwap(m, h); m = maxHeld.Load() {
		}
		if h > budget {
			overBudget.Store(h)
		}
		time.Sleep(20 * time.Millisecond) // let the others pile up
	}

	const nGood, nHostile = 8, 4
	var wg sync.WaitGroup
	errs := make([]error, nGood+nHostile)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := good
			if i >= nGood {
				b = hostile16(6300, 6300)
			}
			data := append(make([]byte, 0, len(b)), b...)
			_, errs[i] = s.processImage(context.Background(), data)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i < nGood && err != nil {
			t.Errorf("image %d within budget: %v", i, err)
		}
		if i >= nGood && !errors.Is(err, ErrImageTooMuchMemory) {
			t.Errorf("hostile image %d: %v, want ErrImageTooMuchMemory", i, err)
		}
	}
	if h := overBudget.Load(); h != 0 {
		t.Fatalf("images held %d bytes together, budget %d", h, budget)
	}
	if m := maxHeld.Load(); m < 2*weight {
		t.Fatalf("at most %d bytes held at once: two images of %d should have run together", m, weight)
	}
	if h := s.ImageMemoryHeld(); h != 0 {
		t.Fatalf("%d bytes still held after every image", h)
	}
}

// TestImageMemoryBusy: an image that cannot get its share within ImageWait
// is refused with ErrBusy, and gets it once the budget is free again.
func TestImageMemoryBusy(t *testing.T) {
	good := png16(t, 300, 300)
	cost, err := imaging.Estimate(good, imaging.Options{MaxPixels: 40_000_000, MaxSide: 256})
	if err != nil {
		t.Fatal(err)
	}
	budget := cost.Bytes() + int64(len(good)) + 1<<10 // one at a time
	s := budgetService(budget, budget, 100*time.Millisecond)
	s.freeAbove = 0
	release := make(chan struct{})
	started := make(chan struct{})
	var first atomic.Bool
	s.afterImage = func() {
		if first.CompareAndSwap(false, true) {
			close(started)
			<-release
		}
	}
	done := make(chan error)
	go func() { _, err := s.processImage(context.Background(), append([]byte{}, good...)); done <- err }()
	<-started
	if _, err := s.processImage(context.Background(), append([]byte{}, good...)); !errors.Is(err, ErrBusy) {
		t.Fatalf("second image while the budget is taken: %v, want ErrBusy", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := s.processImage(context.Background(), append([]byte{}, good...)); err != nil {
		t.Fatalf("after the budget was freed: %v", err)
	}
}

// TestImageMemoryPerImageCap: a per-image budget above the process budget
// is lowered to it, so no image waits for more than exists.
func TestImageMemoryPerImageCap(t *testing.T) {
	s := budgetService(64<<20, 1<<40, time.Second)
	if s.ImageMaxMemory() != 64<<20 {
		t.Fatalf("per-image budget %d, want the process budget", s.ImageMaxMemory())
	}
}

// zeroPNG16 is a complete w×h 16-bit RGBA PNG of zeros, quick to make.
func zeroPNG16(t *testing.T, w, h int) []byte {
	t.Helper()
	chunk := func(typ string, data []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
		b = append(append(b, typ...), data...)
		return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(w)), uint32(h))
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestSpeed)
	row := make([]byte, 1+8*w)
	for range h {
		_, _ = zw.Write(row)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	b := append([]byte("\x89PNG\r\n\x1a\n"), chunk("IHDR", append(ihdr, 16, 6, 0, 0, 0))...)
	b = append(b, chunk("IDAT", z.Bytes())...)
	return append(b, chunk("IEND", nil)...)
}

// An image whose processing passes ImageTimeout, or whose context ends
// (the client gone), stops and gives its slot and memory back at once: a
// small image behind it in the one slot gets it right away.
func TestImageWorkStopsAndGivesBackItsSlot(t *testing.T) {
	slow := zeroPNG16(t, 3000, 3000) // a real image that takes a while to decode
	small := png16(t, 8, 8)
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		cancel  bool
		want    error
	}{
		{"deadline", 50 * time.Millisecond, false, ErrImageTimeout},
		{"client gone", 0, true, ErrClientGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewService(nil, nil, nil, Config{ImageConcurrency: 1, ImageWait: 30 * time.Second, ImageTimeout: tc.timeout,
				Image: imaging.Options{MaxPixels: 40_000_000, MaxSide: 256, JPEGQuality: 80}})
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			start := time.Now()
			done := make(chan error, 1)
			go func() { _, err := s.processImage(ctx, slow); done <- err }()
			for s.ImageMemoryHeld() == 0 { // the slow one takes the slot first
				if time.Since(start) > 5*time.Second {
					t.Fatal("the slow image never took its slot")
				}
				time.Sleep(time.Millisecond)
			}
			start = time.Now()
			if tc.cancel {
				time.AfterFunc(50*time.Millisecond, func() { cancel(ErrClientGone) })
			}
			if _, err := s.processImage(context.Background(), small); err != nil {
				t.Fatalf("small image: %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("small image waited %v", d)
			}
			if err := <-done; !errors.Is(err, tc.want) {
				t.Fatalf("slow image: %v, want %v", err, tc.want)
			}
			if h := s.ImageMemoryHeld(); h != 0 {
				t.Fatalf("%d bytes still held", h)
			}
		})
	}
}
