package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/acme/platform/services/files/internal/imaging"
)

// StoreImage reads an image (at most ImageMaxBytes), checks it is a JPEG,
// PNG, GIF or WebP whose header dimensions are within the pixel limit and
// whose memory estimate is within the per-image budget, re-encodes it
// (orientation applied, metadata dropped, resized) under the concurrency
// cap and the process-wide memory budget, and stores the result. The
// upload counts against owner's quota as StoreFile's does (the re-encoded
// size is recorded).
func (s *Service) StoreImage(ctx context.Context, owner string, src io.Reader) (*Pending, error) {
	lr, err := s.limit(ctx, owner, src, s.cfg.ImageMaxBytes)
	if err != nil {
		return nil, err
	}
	sr := &sourceReader{r: lr}
	data, err := io.ReadAll(sr)
	if err != nil {
		return nil, s.blame(sr, err)
	}
	if len(data) == 0 {
		return nil, ErrEmpty
	}
	if _, ok := imaging.Sniff(data); !ok {
		return nil, ErrNotImage
	}
	out, err := s.processImage(ctx, data)
	data = nil
	if err != nil {
		return nil, err
	}

	id := NewID()
	now := s.now().UTC().Truncate(time.Millisecond)
	key := ObjectKey(KindImage, id, now)
	sum := sha256.Sum256(out.Data)
	res, err := s.objects.Put(ctx, key, bytes.NewReader(out.Data), int64(len(out.Data)), out.Type)
	if err != nil {
		return nil, err
	}
	return &Pending{svc: s, File: File{
		ID:        id,
		Kind:      KindImage,
		Type:      out.Type,
		Key:       key,
		Size:      int64(len(out.Data)),
		SHA256:    hex.EncodeToString(sum[:]),
		Stored:    res.Size,
		Width:     out.Width,
		Height:    out.Height,
		CreatedAt: now,
	}}, nil
}

// processImage re-encodes data under the limits of image work: a slot of
// ImageConcurrency (CPU) and the image's share of ImageMemory (bytes: the
// header's estimate plus the upload itself), both waited for at most
// ImageWait (then ErrBusy), and ImageTimeout once they are held. An image
// whose estimate is over the per-image budget, or whose scans are over the
// per-image work, is refused before anything is decoded. When ctx ends
// (the handler cancels it with ErrClientGone when the client hangs up)
// or the deadline passes, the work stops at its next read, band or write
// and the slot and memory are given back.
func (s *Service) processImage(ctx context.Context, data []byte) (imaging.Result, error) {
	cost, err := imaging.Check(data, s.cfg.Image)
	if err != nil {
		return imaging.Result{}, imageError(err)
	}
	var out imaging.Result
	err = s.withImageBudget(ctx, cost.Bytes()+int64(cap(data)), func(ctx context.Context) error {
		var err error
		out, err = imaging.Process(ctx, data, s.cfg.Image)
		return err
	})
	if err != nil {
		return imaging.Result{}, imageError(err)
	}
	return out, nil
}

// withImageBudget runs work with the budgets of image work: weight bytes
// of ImageMemory (at most all of it) and a slot of ImageConcurrency, both
// waited for at most ImageWait (then ErrBusy), and ImageTimeout once they
// are held (work's context then ends with ErrImageTimeout). After work of
// freeAbove bytes or more the heap is returned to the OS.
func (s *Service) withImageBudget(ctx context.Context, weight int64, work func(context.Context) error) error {
	if weight > s.cfg.ImageMemory {
		weight = s.cfg.ImageMemory
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.ImageWait)
	defer cancel()
	busy := func() error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return ErrBusy
	}
	// TryAcquire first: a wait of 0 means "only if free now".
	if !s.mem.TryAcquire(weight) {
		if err := s.mem.Acquire(wctx, weight); err != nil {
			return busy()
		}
	}
	defer s.mem.Release(weight)
	s.held.Add(weight)
	defer s.held.Add(-weight)
	select {
	case s.sem <- struct{}{}:
	default:
		select {
		case s.sem <- struct{}{}:
		case <-wctx.Done():
			return busy()
		}
	}
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if s.cfg.ImageTimeout > 0 {
		pctx, cancel = context.WithTimeoutCause(ctx, s.cfg.ImageTimeout,
			fmt.Errorf("%w (%s)", ErrImageTimeout, s.cfg.ImageTimeout))
	}
	err := work(pctx)
	cancel()
	<-s.sem
	if weight >= s.freeAbove {
		s.afterImage() // the decoded image is garbage now
	}
	return err
}

// ImageMemoryHeld is the image memory budget taken at this moment.
func (s *Service) ImageMemoryHeld() int64 { return s.held.Load() }

// ImageMemory is the process-wide image memory budget in force.
func (s *Service) ImageMemory() int64 { return s.cfg.ImageMemory }

// ImageMaxScans is the per-image bound of a JPEG's scans in force.
func (s *Service) ImageMaxScans() int { return s.cfg.Image.MaxScans }

// ImageMaxMemory is the per-image memory budget in force.
func (s *Service) ImageMaxMemory() int64 { return s.cfg.Image.MaxMemory }

func imageError(err error) error {
	switch {
	case errors.Is(err, imaging.ErrNotImage):
		return ErrNotImage
	case errors.Is(err, imaging.ErrTooMuchMemory):
		return fmt.Errorf("%w: %v", ErrImageTooMuchMemory, err)
	case errors.Is(err, imaging.ErrTooComplex):
		return fmt.Errorf("%w: %v", ErrImageTooComplex, err)
	case errors.Is(err, imaging.ErrTooManyPixels):
		return fmt.Errorf("%w: %v", ErrImageTooLarge, err)
	case errors.Is(err, imaging.ErrCorrupt), errors.Is(err, imaging.ErrBadVariant):
		return fmt.Errorf("%w: %v", ErrBadImage, err)
	}
	return err
}
