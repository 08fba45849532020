package app

import (
	"bufio"
	"bytes"
	"fmt"
	"image"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
)

// TestTruncatedBodyNeverStored (issue 34 row 7, the files side): a body
// that does not arrive whole is never answered 2xx and leaves no object and
// no record, even when the multipart form inside it is complete: the body
// is cut or stalls after the form's closing delimiter but before its
// Content-Length, or a chunked body ends without its last chunk. Bodies
// larger than fasthttp's 8 KiB prefetch reach the handler while they are
// still arriving, so the handler must check the end itself.
func TestTruncatedBodyNeverStored(t *testing.T) {
	h := start(t, map[string]string{"FILES_READ_IDLE_TIMEOUT": "1s"}, hooks{})
	img := image.NewNRGBA(image.Rect(0, 0, 200, 200))
	x := uint32(2463534242)
	for i := range img.Pix { // noise: the PNG stays larger than 8 KiB
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		img.Pix[i] = byte(x)
	}
	uploads := map[string][]byte{
		"/upload/file":  bytes.Repeat([]byte("0123456789abcdef"), 4096), // 64 KiB
		"/upload/image": pngBytes(t, img),
	}
	for path, content := range uploads {
		ct, body := form(t, fileField("whole.bin", content))
		if len(body) <= 8<<10 {
			t.Fatalf("%s: form of %d bytes is within fasthttp's prefetch", path, len(body))
		}
		for _, tc := range []struct {
			name    string
			chunked bool
			stall   bool // keep the connection open instead of cutting it
		}{
			{name: "lengthCut"},
			{name: "lengthStalled", stall: true},
			{name: "chunkedCut", chunked: true},
			{name: "chunkedStalled", chunked: true, stall: true},
		} {
			t.Run(strings.TrimPrefix(path, "/upload/")+"/"+tc.name, func(t *testing.T) {
				conn, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				framing := fmt.Sprintf("Content-Length: %d", len(body)+100) // 100 bytes never come
				if tc.chunked {
					framing = "Transfer-Encoding: chunked"
				}
				fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\n%s: %s\r\nContent-Type: %s\r\n%s\r\n\r\n",
					path, identity.Header, h.user("u"), ct, framing)
				if tc.chunked {
					fmt.Fprintf(conn, "%x\r\n%s\r\n", len(body), body) // the last chunk never comes
				} else {
					_, _ = conn.Write(body)
				}
				if !tc.stall {
					_ = conn.(*net.TCPConn).CloseWrite()
				}
				_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode < 300 {
						t.Fatalf("incomplete body answered %d: %s", resp.StatusCode, b)
					}
					// An image whose file part has arrived is watched for the
					// client hanging up (hangup.go): a client that shuts its
					// sending side is taken as gone, 499 client_closed_request,
					// before the missing end of the body is read.
					gone := path == "/upload/image" && !tc.stall && resp.StatusCode == 499 && bytes.Contains(b, []byte(`"client_closed_request"`))
					if !gone && (resp.StatusCode != http.StatusBadRequest || !bytes.Contains(b, []byte(`"invalid_multipart"`))) {
						t.Fatalf("incomplete body answered %d %s, want 400 invalid_multipart", resp.StatusCode, b)
					}
				} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("no answer to a stalled body within 15 s")
				} // else: closed without an answer, as good
				h.assertNothingStored(t)
			})
		}
		// The same form, whole, is stored: the refusals above are about
		// the body's end, not its content.
		r := h.do(http.MethodPost, path, h.user("u"), bytes.NewReader(body), map[string]string{"Content-Type": ct})
		wantStatus(t, r, http.StatusCreated)
		del := r.json(t)
		var id string
		if f, ok := del["file"].(map[string]any); ok {
			id, _ = f["id"].(string)
		} else if f, ok := del["image"].(map[string]any); ok {
			id, _ = f["id"].(string)
		}
		wantStatus(t, h.do(http.MethodDelete, "/files/"+id, h.user("u"), nil, nil), http.StatusNoContent)
		h.assertNothingStored(t)
	}
}

// TestTusCutPatchNotFinished (row 7, tus): the only PATCH of a 1,000-byte
// upload sends 10 bytes and the connection is cut. tusd keeps the 10 bytes
// for a resume; the upload is not finished: no file record, no object
// under files/, and the offset says 10 at most.
func TestTusCutPatchNotFinished(t *testing.T) {
	h := start(t, nil, hooks{})
	tok := h.user("u")
	path := h.tusCreate(t, tok, 1000, "filename "+b64("cut.bin"))
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.tus, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: x\r\n%s: %s\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nContent-Length: 1000\r\n\r\n0123456789",
		path, identity.Header, tok)
	_ = conn.(*net.TCPConn).CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 300 {
			t.Fatalf("cut PATCH answered %d", resp.StatusCode)
		}
	}
	conn.Close()
	var off int64
	for i := 0; ; i++ {
		r := h.doURL(http.MethodHead, h.tus+path, tok, nil, map[string]string{"Tus-Resumable": "1.0.0"})
		if r.StatusCode == http.StatusOK {
			off, _ = strconv.ParseInt(r.Header.Get("Upload-Offset"), 10, 64)
			break
		}
		if r.StatusCode != http.StatusLocked || i > 100 {
			t.Fatalf("HEAD after the cut: %d %s", r.StatusCode, r.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if off > 10 {
		t.Fatalf("offset %d after 10 bytes", off)
	}
	if n := h.records(); n != 0 {
		t.Fatalf("%d records after a cut upload", n)
	}
	for _, o := range h.objects() {
		if !strings.HasPrefix(o, "uploads/") {
			t.Fatalf("object %s stored from a cut upload", o)
		}
	}
}
