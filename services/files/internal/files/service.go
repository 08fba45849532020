package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acme/platform/services/files/internal/imaging"
	"github.com/klauspost/compress/gzip"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"
)

// Config holds the service's rules and limits.
type Config struct {
	MaxUpload        int64         // bytes of one uploaded file
	ReadAll          bool          // every signed-in user may read every file
	ImageMaxBytes    int64         // bytes of one uploaded image, before re-encoding
	ImageConcurrency int           // images decoded and re-encoded at once
	ImageWait        time.Duration // how long an image waits for a re-encode slot and its memory
	// ImageMemory is the process-wide budget, in bytes, of the images being
	// decoded and re-encoded at once (each weighs its header's estimate and
	// its upload); 0: Image.MaxMemory, the per-image budget.
	ImageMemory int64
	// ImageTimeout bounds one image's decode, resize and re-encode once it
	// has its slot: past it the work stops and the slot is given back
	// (ErrImageTimeout); 0: no deadline.
	ImageTimeout time.Duration
	DefaultQuota int64 // bytes one user may store unless given their own quota; 0: no quota
	Image        imaging.Options
	Variants     VariantConfig
}

// ErrIsImage is returned when a file download names an image: images are
// served at their own public URL.
var ErrIsImage = errors.New("the id refers to an image, served at its own URL")

// Service runs uploads, reads, listings and the orphan sweep.
type Service struct {
	store   Store
	objects ObjectStore
	log     LogPublisher
	cfg     Config
	sem     chan struct{}
	mem     *semaphore.Weighted
	held    atomic.Int64 // bytes of mem taken, for tests and metrics
	now     func() time.Time
	// afterImage runs after an image of an estimate of freeAbove bytes or
	// more was processed, its budget still held: it returns the heap's
	// freed pages to the OS.
	afterImage func()
	freeAbove  int64

	variants *variants          // variants described, by key
	flights  singleflight.Group // renders in progress, by key
	renders  atomic.Int64       // variants rendered and stored
}

// imageFreeAbove is the estimate above which the heap is returned to the
// OS after an image, so a burst of large images leaves no large resident
// set behind.
const imageFreeAbove = 32 << 20

// NewService wires the service. pub may be nil.
func NewService(store Store, objects ObjectStore, pub LogPublisher, cfg Config) *Service {
	if cfg.ImageConcurrency <= 0 {
		cfg.ImageConcurrency = 1
	}
	if pub == nil {
		pub = nopPublisher{}
	}
	if cfg.ImageMemory <= 0 {
		cfg.ImageMemory = cfg.Image.MaxMemory
	}
	if cfg.ImageMemory <= 0 {
		cfg.ImageMemory = math.MaxInt64
	}
	if cfg.Image.MaxMemory <= 0 || cfg.Image.MaxMemory > cfg.ImageMemory {
		cfg.Image.MaxMemory = cfg.ImageMemory // one image never waits for more than exists
	}
	return &Service{
		store:      store,
		objects:    objects,
		log:        pub,
		cfg:        cfg,
		sem:        make(chan struct{}, cfg.ImageConcurrency),
		mem:        semaphore.NewWeighted(cfg.ImageMemory),
		now:        time.Now,
		afterImage: debug.FreeOSMemory,
		freeAbove:  imageFreeAbove,
		variants:   &variants{max: max(cfg.Variants.MetaCache, 1), m: map[string]File{}},
	}
}

type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, LogEntry) {}

// Pending is an object fully stored but not yet recorded. Exactly one of
// Commit or Discard must follow; Discard after Commit does nothing, so
// callers defer Discard.
type Pending struct {
	File File
	svc  *Service
	// known is the owner's account the upload was bounded by; nil: read
	// it at Commit.
	known *Account
	done  bool
}

// sourceReader remembers the first failure of the client's stream, so a
// failed put can be blamed on the client or on storage.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// limitedReader fails with its err (ErrTooLarge or ErrQuotaExceeded) once
// more than n bytes come.
type limitedReader struct {
	r   io.Reader
	n   int64 // bytes still allowed
	err error
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, l.err
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, l.err
	}
	return n, err
}

// limit bounds src by max bytes and by what is left of owner's quota,
// failing with ErrQuotaExceeded when nothing is.
func (s *Service) limit(ctx context.Context, owner string, src io.Reader, max int64) (io.Reader, error) {
	r, _, err := s.limitAccount(ctx, owner, src, max)
	return r, err
}

// limitAccount is limit, returning the account the bound came from. The
// account is read as known (usually from the owner cache, fenced): the
// bound only stops a stream that cannot fit early; the reservation of the
// stored size (Commit) is what keeps the quota.
func (s *Service) limitAccount(ctx context.Context, owner string, src io.Reader, max int64) (io.Reader, Account, error) {
	a, err := s.store.Account(ctx, owner)
	if err != nil {
		return nil, a, err
	}
	left := s.left(a)
	if left == 0 {
		return nil, a, ErrQuotaExceeded
	}
	r := &limitedReader{r: src, n: max, err: ErrTooLarge}
	if left > 0 && left < max {
		r = &limitedReader{r: src, n: left, err: ErrQuotaExceeded}
	}
	return r, a, nil
}

// hashingReader hashes and counts what passes through.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 {
		h.h.Write(p[:n])
		h.n += int64(n)
	}
	return n, err
}

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// StoreFile streams src into object storage: content type sniffed from the
// first bytes, size and SHA-256 computed on the way, compressible content
// gzip-compressed. Nothing is buffered beyond the object store's part
// buffer. On error no object remains.
//
// The upload is bounded by MaxUpload and by what is left of owner's quota
// as known (ErrQuotaExceeded as soon as it is crossed); Commit reserves the
// stored size, atomically against concurrent uploads.
func (s *Service) StoreFile(ctx context.Context, owner string, src io.Reader) (*Pending, error) {
	return s.StoreFileAs(ctx, owner, NewID(), src)
}

// StoreFileAs is StoreFile with the record's id chosen by the caller (a
// resumable upload keeps its id); id must be a fresh NewID.
func (s *Service) StoreFileAs(ctx context.Context, owner, id string, src io.Reader) (*Pending, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("files: invalid record id %q", id)
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	key := ObjectKey(KindFile, id, now)

	lr, acct, err := s.limitAccount(ctx, owner, src, s.cfg.MaxUpload)
	if err != nil {
		return nil, err
	}
	sr := &sourceReader{r: lr}
	hr := &hashingReader{r: sr, h: sha256.New()}

	head := make([]byte, 512)
	n, err := io.ReadFull(hr, head)
	switch {
	case err == io.EOF:
		return nil, ErrEmpty
	case err != nil && err != io.ErrUnexpectedEOF:
		return nil, s.blame(sr, err)
	}
	head = head[:n]
	ctype := http.DetectContentType(head)
	body := io.MultiReader(bytes.NewReader(head), hr)

	var res PutResult
	encoding := ""
	if Compressible(ctype) {
		encoding = EncodingGzip
		res, err = s.putGzip(ctx, key, body)
	} else {
		res, err = s.objects.Put(ctx, key, body, -1, ctype)
	}
	if err != nil {
		return nil, s.blame(sr, err)
	}
	if sr.err != nil { // cannot happen: Put read to EOF; kept as a guard
		s.remove(key)
		return nil, s.blame(sr, sr.err)
	}
	return &Pending{svc: s, known: &acct, File: File{
		ID:        id,
		Kind:      KindFile,
		Type:      ctype,
		Key:       key,
		Size:      hr.n,
		SHA256:    hex.EncodeToString(hr.h.Sum(nil)),
		Encoding:  encoding,
		Stored:    res.Size,
		CreatedAt: now,
	}}, nil
}

// putGzip compresses body on the fly into the object store.
func (s *Service) putGzip(ctx context.Context, key string, body io.Reader) (PutResult, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		zw := gzipWriters.Get().(*gzip.Writer)
		zw.Reset(pw)
		_, err := io.Copy(zw, body)
		if err == nil {
			err = zw.Close()
		}
		zw.Reset(nil)
		gzipWriters.Put(zw)
		pw.CloseWithError(err) // nil: the reader sees EOF
	}()
	res, err := s.objects.Put(ctx, key, pr, -1, "application/gzip")
	pr.CloseWithError(errors.New("upload ended")) // unblock the compressor if Put stopped early
	<-done
	return res, err
}

// blame returns the client's error when the source failed, else err.
func (s *Service) blame(sr *sourceReader, err error) error {
	if sr.err != nil {
		if errors.Is(sr.err, ErrTooLarge) || errors.Is(sr.err, ErrQuotaExceeded) {
			return sr.err
		}
		return &SourceError{Err: sr.err}
	}
	return err
}

// Commit reserves the stored size in owner's account, then records the
// stored object. A reservation refused (the quota would be passed) removes
// the object and returns ErrQuotaExceeded. If the record cannot be written
// the reservation is given back and the object removed, unless the record
// turns out to exist after all (an ambiguous write: it keeps its
// reservation) or the store cannot tell: then the reservation stays (the
// owner's usage may count the upload, never miss it) and the sweeper
// decides about the object later, with the store reachable.
func (p *Pending) Commit(ctx context.Context, owner, name string, meta *string) (*File, error) {
	if p.done {
		return nil, errors.New("pending upload already settled")
	}
	s := p.svc
	f := p.File
	f.Owner = owner
	f.Name = CleanName(name)
	f.Meta = meta
	var known Account
	if p.known != nil {
		known = *p.known
	} else {
		a, err := s.store.Account(ctx, owner)
		if err != nil {
			p.Discard()
			return nil, err
		}
		known = a
	}
	if err := s.reserve(ctx, owner, f.Size, known); err != nil {
		// A reservation whose answer was lost may have been taken: it stays
		// (the usage may count this upload, never miss one).
		p.Discard()
		return nil, err
	}
	if err := s.store.Insert(ctx, &f); err != nil {
		p.done = true
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		got, gerr := s.store.Get(cctx, f.ID)
		switch {
		case gerr == nil && got.Key == f.Key:
			if errors.Is(err, ErrConflict) {
				s.release(ctx, owner, f.Size) // written by an earlier commit, counted then
			} // else written after all, counted by this reservation
			return got, nil
		case gerr == nil || errors.Is(gerr, ErrNotFound): // not written
			s.release(ctx, owner, f.Size)
			s.remove(f.Key)
		default:
			s.log.Publish(ctx, LogEntry{Type: "error", Body: "record of " + f.Key + " unknown after a failed insert; its reservation kept, its object left to the sweeper"})
		}
		return nil, err
	}
	p.done = true
	s.log.Publish(ctx, LogEntry{Type: "log", Body: fmt.Sprintf("stored %s %s (%d bytes, %s) for %s", f.Kind, f.ID, f.Size, f.Type, owner)})
	return &f, nil
}

// Discard removes the stored object unless the upload was committed.
func (p *Pending) Discard() {
	if p == nil || p.done {
		return
	}
	p.done = true
	p.svc.remove(p.File.Key)
}

// remove deletes an object on a fresh context: the request's may be done.
func (s *Service) remove(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.objects.Remove(ctx, key); err != nil {
		s.log.Publish(ctx, LogEntry{Type: "error", Body: "removing " + key + " failed (the sweeper will retry): " + err.Error()})
	}
}

// Get returns a record the reader may see; ErrNotFound for malformed ids,
// unknown ids and other people's files alike.
func (s *Service) Get(ctx context.Context, id string, r Reader) (*File, error) {
	if !ValidID(id) {
		return nil, ErrNotFound
	}
	f, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !f.CanRead(r, s.cfg.ReadAll) {
		return nil, ErrNotFound
	}
	return f, nil
}

// Download returns a file the reader may download. Image ids give
// ErrIsImage whoever asks: images are public at their own URL anyway.
func (s *Service) Download(ctx context.Context, id string, r Reader) (*File, error) {
	if !ValidID(id) {
		return nil, ErrNotFound
	}
	f, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if f.Kind == KindImage {
		return nil, ErrIsImage
	}
	if !f.CanRead(r, s.cfg.ReadAll) {
		return nil, ErrNotFound
	}
	return f, nil
}

// Image returns a public image record; ErrNotFound for anything else.
func (s *Service) Image(ctx context.Context, id string) (*File, error) {
	if !ValidID(id) {
		return nil, ErrNotFound
	}
	f, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if f.Kind != KindImage {
		return nil, ErrNotFound
	}
	return f, nil
}

// Open opens the stored bytes of f, or the byte range [start, end] of them
// when end >= 0.
func (s *Service) Open(ctx context.Context, f *File, start, end int64) (*Object, error) {
	return s.objects.Get(ctx, f.Key, start, end)
}

// ErrNoPresign: the object store cannot presign reads.
var ErrNoPresign = errors.New("the object store does not presign reads")

// Presign returns a GET of f's stored bytes valid for expiry, and the
// servers that may answer it, for the gateway to send them itself (package
// handoff). Call it only for a record Download, Image or Shared returned.
func (s *Service) Presign(ctx context.Context, f *File, expiry time.Duration) (string, []string, error) {
	p, ok := s.objects.(Presigner)
	if !ok {
		return "", nil, ErrNoPresign
	}
	return p.Presign(ctx, f.Key, expiry)
}

// List returns one page (from 1) of owner's records, newest first, and
// whether more follow.
func (s *Service) List(ctx context.Context, owner string, page, limit int) ([]*File, bool, error) {
	out, err := s.store.ListByOwner(ctx, owner, (page-1)*limit, limit+1)
	if err != nil {
		return nil, false, err
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// Sweep removes objects this service wrote that are older than age and have
// no record: leftovers of uploads whose clean-up failed. Several replicas may
// sweep at once: the test is the same everywhere and removal is idempotent.
// An object whose record cannot be checked is kept.
func (s *Service) Sweep(ctx context.Context, age time.Duration) (int, error) {
	cutoff := s.now().Add(-age)
	removed := 0
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		ids := make([]string, len(batch))
		for i, k := range batch {
			ids[i], _ = IDFromKey(k)
		}
		have, err := s.store.Existing(ctx, ids)
		if err != nil {
			return err
		}
		for i, k := range batch {
			if have[ids[i]] {
				continue
			}
			if err := s.objects.Remove(ctx, k); err != nil {
				return err
			}
			removed++
			s.log.Publish(ctx, LogEntry{Type: "log", Body: "swept orphan object " + k})
		}
		batch = batch[:0]
		return nil
	}
	for _, prefix := range []string{filesPrefix, imagesPrefix, variantsPrefix} {
		for info, err := range s.objects.List(ctx, prefix) {
			if err != nil {
				return removed, err
			}
			if info.LastModified.After(cutoff) {
				continue
			}
			if _, ok := IDFromKey(info.Key); !ok {
				continue
			}
			batch = append(batch, info.Key)
			if len(batch) >= 200 {
				if err := flush(); err != nil {
					return removed, err
				}
			}
		}
	}
	return removed, flush()
}

// MaxPixels is the image pixel limit in force.
func (s *Service) MaxPixels() int64 { return s.cfg.Image.MaxPixels }
