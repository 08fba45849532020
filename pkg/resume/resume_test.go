package resume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
)

// server is an object of the given version whose bodies fail after the
// byte counts in cuts, one per opening (none past the list).
type server struct {
	data  []byte
	etag  string
	cuts  []int
	opens []string // "off-end etag" per opening
}

type cutBody struct {
	r    io.Reader
	left int
}

var errCut = errors.New("connection reset")

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, errCut
	}
	if b.left > 0 && len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.left > 0 {
		b.left -= n
	}
	return n, err
}
func (b *cutBody) Close() error { return nil }

func (s *server) open(_ context.Context, off, end int64, etag string) (io.ReadCloser, error) {
	s.opens = append(s.opens, fmt.Sprintf("%d-%d %s", off, end, etag))
	if etag != "" && etag != s.etag {
		return nil, errors.New("412 precondition failed")
	}
	left := -1
	if i := len(s.opens) - 1; i < len(s.cuts) {
		left = s.cuts[i]
	}
	return &cutBody{r: bytes.NewReader(s.data[off : end+1]), left: left}, nil
}

func data(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

func TestResumesWhereTheBodyFailed(t *testing.T) {
	d := data(100_000)
	for _, c := range []struct {
		name       string
		start, end int64
		cuts       []int
	}{
		{"whole, cut twice", 0, 99_999, []int{12_345, 777}},
		{"range, cut thrice", 1000, 50_999, []int{10, 20, 30}},
		{"no cut", 5, 10, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &server{data: d, etag: `"v1"`, cuts: c.cuts}
			first, _ := s.open(context.Background(), c.start, c.end, "")
			r := New(context.Background(), s.open, first, s.etag, c.start, c.end)
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("read: %v (opens %v)", err, s.opens)
			}
			if !bytes.Equal(got, d[c.start:c.end+1]) {
				t.Fatalf("read %d bytes, want the %d of the range", len(got), c.end-c.start+1)
			}
			if len(s.opens) != len(c.cuts)+1 {
				t.Fatalf("opened %d times (%v), want %d", len(s.opens), s.opens, len(c.cuts)+1)
			}
			for _, o := range s.opens[1:] {
				if want := ` "v1"`; o[len(o)-len(want):] != want {
					t.Fatalf("reopened without the version: %v", s.opens)
				}
			}
		})
	}
}

func TestGivesUpAfterTries(t *testing.T) {
	d := data(1000)
	s := &server{data: d, etag: `"v1"`, cuts: []int{10, 10, 10, 10, 10}}
	first, _ := s.open(context.Background(), 0, 999, "")
	r := New(context.Background(), s.open, first, s.etag, 0, 999)
	got, err := io.ReadAll(r)
	if !errors.Is(err, errCut) {
		t.Fatalf("err %v, want the cut", err)
	}
	if len(got) != 10*(Tries+1) || len(s.opens) != Tries+1 {
		t.Fatalf("read %d bytes in %d opens, want %d in %d", len(got), len(s.opens), 10*(Tries+1), Tries+1)
	}
}

func TestAnotherVersionIsAnError(t *testing.T) {
	d := data(1000)
	s := &server{data: d, etag: `"v1"`, cuts: []int{100}}
	first, _ := s.open(context.Background(), 0, 999, "")
	s.etag = `"v2"` // replaced meanwhile
	r := New(context.Background(), s.open, first, `"v1"`, 0, 999)
	if _, err := io.ReadAll(r); err == nil {
		t.Fatal("a read resumed on another version of the object")
	}
}

func TestFailureAfterTheLastByteIsTheEnd(t *testing.T) {
	d := data(100)
	s := &server{data: d, etag: `"v1"`, cuts: []int{100}} // every byte, then the reset
	first, _ := s.open(context.Background(), 0, 99, "")
	got, err := io.ReadAll(New(context.Background(), s.open, first, s.etag, 0, 99))
	if err != nil || len(got) != 100 || len(s.opens) != 1 {
		t.Fatalf("%d bytes, %v, %d opens: want 100, no error, no reopening", len(got), err, len(s.opens))
	}
}
