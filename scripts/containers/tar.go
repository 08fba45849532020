package containers

import (
	"archive/tar"
	"io"
	"time"
)

// tarWriter writes a root filesystem for `docker import`, remembering the
// first error.
type tarWriter struct {
	tw  *tar.Writer
	err error
}

func newTar(w io.Writer) *tarWriter { return &tarWriter{tw: tar.NewWriter(w)} }

func (t *tarWriter) header(h *tar.Header) {
	if t.err == nil {
		h.ModTime = time.Unix(0, 0)
		h.Gid = h.Uid
		t.err = t.tw.WriteHeader(h)
	}
}

func (t *tarWriter) dir(name string, uid int, mode int64) {
	t.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Uid: uid, Mode: mode})
}

func (t *tarWriter) file(name string, b []byte, uid int, mode int64) {
	t.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Uid: uid, Mode: mode, Size: int64(len(b))})
	if t.err == nil {
		_, t.err = t.tw.Write(b)
	}
}

func (t *tarWriter) close() error {
	if t.err != nil {
		return t.err
	}
	return t.tw.Close()
}
