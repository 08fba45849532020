package app

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/minio/minio-go/v7"
)

// tusTestSize is the resumable upload of TestTusResume: large enough to
// span several S3 parts (8 MiB) on both sides of the cut.
const tusTestSize = 48 << 20

// tusCreate opens an upload of size bytes and returns its path.
func (h *harness) tusCreate(t *testing.T, token string, size int64, meta string) string {
	t.Helper()
	r := h.doURL(http.MethodPost, h.tus+"/uploads/", token, nil, map[string]string{
		"Tus-Resumable": "1.0.0", "Upload-Length": strconv.FormatInt(size, 10), "Upload-Metadata": meta,
	})
	wantStatus(t, r, http.StatusCreated)
	if r.Header.Get("Upload-Expires") == "" {
		t.Fatal("creation answered without Upload-Expires")
	}
	loc, err := url.Parse(r.Header.Get("Location"))
	if err != nil || !strings.HasPrefix(loc.Path, "/uploads/") || !strings.HasPrefix(r.Header.Get("Location"), "https://files.example.test/uploads/") {
		t.Fatalf("Location %q", r.Header.Get("Location"))
	}
	return loc.Path
}

// tusOffset asks the server how much of an upload it has.
func (h *harness) tusOffset(t *testing.T, token, path string) int64 {
	t.Helper()
	r := h.doURL(http.MethodHead, h.tus+path, token, nil, map[string]string{"Tus-Resumable": "1.0.0"})
	wantStatus(t, r, http.StatusOK)
	n, err := strconv.ParseInt(r.Header.Get("Upload-Offset"), 10, 64)
	if err != nil {
		t.Fatalf("Upload-Offset %q", r.Header.Get("Upload-Offset"))
	}
	return n
}

func (h *harness) tusPatch(t *testing.T, token, path string, offset int64, body io.Reader, n int64) *response {
	t.Helper()
	c := apptest.NewClient(t, h.tus)
	c.HTTP = client
	r, err := c.Send(http.MethodPatch, path, body, map[string]string{
		identity.Header:  token,
		"Tus-Resumable":  "1.0.0",
		"Content-Type":   "application/offset+octet-stream",
		"Upload-Offset":  strconv.FormatInt(offset, 10),
		"Content-Length": strconv.FormatInt(n, 10),
	})
	if r == nil { // no answer: status 0, the error as the body
		return &response{body: []byte(err.Error())}
	}
	return &response{StatusCode: r.Status, Header: r.Header, ContentLength: r.ContentLength, body: r.Body}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// A large upload is cut at about half, resumed from the offset the server
// reports, and becomes an ordinary file record: downloaded byte-identical,
// with the sniffed type, size and SHA-256; the tus objects are gone and
// the heap stayed flat.
func TestTusResume(t *testing.T) {
	h := start(t, nil, hooks{})
	tok := h.user("alice")
	path := h.tusCreate(t, tok, tusTestSize, "filename "+b64("big.bin")+",meta "+b64("resumed"))

	stop := heapPeak(50 * time.Millisecond)
	r := h.tusPatch(t, tok, path, 0, testkit.CutReader(&pattern{n: tusTestSize}, tusTestSize/2), tusTestSize)
	if r.StatusCode == http.StatusNoContent {
		t.Fatal("the cut PATCH succeeded")
	}
	// The server may still be saving what arrived when HEAD comes: the
	// upload's lock is released once it has.
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
	if off <= 0 || off > tusTestSize/2 {
		t.Fatalf("offset after the cut %d, want (0, %d]", off, tusTestSize/2)
	}
	rest := &pattern{n: tusTestSize}
	if _, err := io.CopyN(io.Discard, rest, off); err != nil {
		t.Fatal(err)
	}
	r = h.tusPatch(t, tok, path, off, rest, tusTestSize-off)
	wantStatus(t, r, http.StatusNoContent)
	if got := r.Header.Get("Upload-Offset"); got != strconv.Itoa(tusTestSize) {
		t.Fatalf("final offset %s", got)
	}
	peak := stop()
	if peak > 64 {
		t.Fatalf("heap grew by %.1f MiB during a %d MiB upload", peak, tusTestSize>>20)
	}

	id := r.Header.Get("Upload-File-Id")
	if !strings.HasPrefix(strings.TrimPrefix(path, "/uploads/"), id+"+") {
		t.Fatalf("file id %q is not the upload's %q", id, path)
	}
	info := h.get("/retrieve/file/"+id, tok, nil)
	wantStatus(t, info, http.StatusOK)
	f := info.json(t)["file"].(map[string]any)
	want := sha256.New()
	_, _ = io.Copy(want, &pattern{n: tusTestSize})
	if f["size"] != float64(tusTestSize) || f["name"] != "big.bin" || f["meta"] != "resumed" {
		t.Fatalf("record %v", f)
	}

	req, _ := http.NewRequest(http.MethodGet, h.base+"/download/file/"+id, nil)
	req.Header.Set(identity.Header, tok)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || n != tusTestSize {
		t.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, n, err)
	}
	if string(got.Sum(nil)) != string(want.Sum(nil)) {
		t.Fatal("downloaded bytes differ from the uploaded ones")
	}
	// Only the file's object is left: the upload's parts and info are gone.
	for _, k := range h.objects() {
		if strings.HasPrefix(k, "uploads/") {
			t.Fatalf("tus object left behind: %s", k)
		}
	}
	h.noIncompleteUploads(t)
}

// noIncompleteUploads waits briefly for clean-ups to land (the sweeper
// aborts an expired upload's multipart upload after removing its objects),
// then requires that no multipart upload is left in the bucket.
func (h *harness) noIncompleteUploads(t *testing.T) {
	t.Helper()
	core := minio.Core{Client: h.kit.S3}
	apptest.Eventually(t, 10*time.Second, func() error {
		res, err := core.ListMultipartUploads(context.Background(), h.env["S3_BUCKET"], "", "", "", "", 100)
		if err != nil {
			return err
		}
		if len(res.Uploads) != 0 {
			return fmt.Errorf("multipart uploads left: %v", res.Uploads)
		}
		return nil
	})
}

// Bad requests get precise 4xx with the service's JSON errors, and
// nothing is stored.
func TestTusRefusals(t *testing.T) {
	h := start(t, map[string]string{"FILES_QUOTA": "1000", "FILES_MAX_UPLOAD": "100000"}, hooks{})
	tok := h.user("bob")
	post := func(hdr map[string]string, token string) *response {
		return h.doURL(http.MethodPost, h.tus+"/uploads/", token, nil, hdr)
	}
	wantError(t, post(map[string]string{"Tus-Resumable": "1.0.0", "Upload-Length": "10"}, ""), http.StatusUnauthorized, "identity_required")
	wantError(t, post(map[string]string{"Tus-Resumable": "1.0.0", "Upload-Length": "10"}, h.anonymous()), http.StatusUnauthorized, "unauthenticated")
	wantError(t, post(map[string]string{"Tus-Resumable": "0.2.2", "Upload-Length": "10"}, tok), http.StatusPreconditionFailed, "unsupported_tus_version")
	wantError(t, post(map[string]string{"Tus-Resumable": "1.0.0"}, tok), http.StatusBadRequest, "invalid_upload_length")
	wantError(t, post(map[string]string{"Tus-Resumable": "1.0.0", "Upload-Length": "-3"}, tok), http.StatusBadRequest, "invalid_upload_length")
	wantError(t, post(map[string]string{"Tus-Resumable": "1.0.0", "Upload-Defer-Length": "1"}, tok), http.StatusBadRequest, "invalid_upload_length")
	wantError(t, post(map[string]string{"Tus-Resumable": "1.0.0", "Upload-Length": "0"}, tok), http.StatusBadRequest, "empty_file")
	wantError(t, post(map[string]string{"Tus-Resumable": "1.0.0", "Upload-Length": "200000"}, tok), http.StatusRequestEntityTooLarge, "file_too_large")
	wantError(t, post(map[string]string{"Tus-Resumable": "1.0.0", "Upload-Length": "1001"}, tok), http.StatusRequestEntityTooLarge, "quota_exceeded")
	h.assertNothingStored(t)

	// Discovery: the extensions served.
	opt := h.doURL(http.MethodOptions, h.tus+"/uploads/", tok, nil, nil)
	if opt.StatusCode >= 300 || opt.Header.Get("Tus-Extension") != "creation,creation-with-upload,termination,expiration" || opt.Header.Get("Tus-Max-Size") != "100000" {
		t.Fatalf("OPTIONS: %d %v", opt.StatusCode, opt.Header)
	}

	path := h.tusCreate(t, tok, 600, "")
	// Someone else's upload is not found; an unknown one neither.
	wantStatus(t, h.doURL(http.MethodHead, h.tus+path, h.user("mallory"), nil, map[string]string{"Tus-Resumable": "1.0.0"}), http.StatusNotFound)
	wantError(t, h.doURL(http.MethodDelete, h.tus+path, h.user("mallory"), nil, map[string]string{"Tus-Resumable": "1.0.0"}), http.StatusNotFound, "not_found")
	wantStatus(t, h.doURL(http.MethodHead, h.tus+"/uploads/0123456789abcdef0123456789abcdef+x", tok, nil, map[string]string{"Tus-Resumable": "1.0.0"}), http.StatusNotFound)
	for _, bad := range []string{"/uploads/nothex+x", "/uploads/" + strings.TrimPrefix(path, "/uploads/") + "/x", "/uploads/a/b"} {
		wantError(t, h.doURL(http.MethodDelete, h.tus+bad, tok, nil, map[string]string{"Tus-Resumable": "1.0.0"}), http.StatusNotFound, "not_found")
	}
	// Wrong offset, missing offset, wrong content type.
	wantError(t, h.tusPatch(t, tok, path, 5, strings.NewReader("abc"), 3), http.StatusConflict, "mismatched_offset")
	wantError(t, h.doURL(http.MethodPatch, h.tus+path, tok, strings.NewReader("abc"), map[string]string{
		"Tus-Resumable": "1.0.0", "Content-Type": "application/offset+octet-stream"}), http.StatusBadRequest, "invalid_offset")
	wantError(t, h.doURL(http.MethodPatch, h.tus+path, tok, strings.NewReader("abc"), map[string]string{
		"Tus-Resumable": "1.0.0", "Content-Type": "text/plain", "Upload-Offset": "0"}), http.StatusBadRequest, "invalid_content_type")
	// More than declared.
	wantError(t, h.tusPatch(t, tok, path, 0, strings.NewReader(strings.Repeat("x", 700)), 700), http.StatusRequestEntityTooLarge, "upload_size_exceeded")
	if off := h.tusOffset(t, tok, path); off != 0 {
		t.Fatalf("offset %d after refused PATCHes", off)
	}
	// Two uploads that fit the quota each but not together: the second
	// to complete is refused and nothing of it is kept.
	other := h.tusCreate(t, tok, 500, "")
	r := h.tusPatch(t, tok, path, 0, strings.NewReader(strings.Repeat("x", 600)), 600)
	wantStatus(t, r, http.StatusNoContent)
	wantError(t, h.tusPatch(t, tok, other, 0, strings.NewReader(strings.Repeat("y", 500)), 500), http.StatusRequestEntityTooLarge, "quota_exceeded")
	for _, k := range h.objects() {
		if strings.HasPrefix(k, "uploads/") {
			t.Fatalf("tus object left behind: %s", k)
		}
	}
	h.noIncompleteUploads(t)
	// A new upload that would pass the quota with the first finished.
	wantError(t, post(map[string]string{"Tus-Resumable": "1.0.0", "Upload-Length": "401"}, tok), http.StatusRequestEntityTooLarge, "quota_exceeded")
	if n := h.records(); n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
}

// Termination removes an upload and its parts; an abandoned upload expires
// (410) and the sweeper removes its parts and multipart upload.
func TestTusTerminateAndExpire(t *testing.T) {
	h := start(t, map[string]string{"FILES_TUS_EXPIRY": "3s", "FILES_SWEEP_INTERVAL": "500ms"}, hooks{})
	tok := h.user("carol")
	const size = 20 << 20
	// 9 MiB: one 8 MiB part in the multipart upload, the rest as .part.
	send := func(path string) {
		t.Helper()
		r := h.tusPatch(t, tok, path, 0, &pattern{n: 9 << 20}, 9<<20)
		wantStatus(t, r, http.StatusNoContent)
	}
	del := h.tusCreate(t, tok, size, "")
	send(del)
	r := h.doURL(http.MethodDelete, h.tus+del, tok, nil, map[string]string{"Tus-Resumable": "1.0.0"})
	wantStatus(t, r, http.StatusNoContent)
	wantStatus(t, h.doURL(http.MethodHead, h.tus+del, tok, nil, map[string]string{"Tus-Resumable": "1.0.0"}), http.StatusNotFound)
	h.assertNothingStored(t)
	h.noIncompleteUploads(t)

	abandoned := h.tusCreate(t, tok, size, "")
	send(abandoned)
	if len(h.objects()) == 0 {
		t.Fatal("no tus objects while the upload is open")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := h.doURL(http.MethodHead, h.tus+abandoned, tok, nil, map[string]string{"Tus-Resumable": "1.0.0"})
		if r.StatusCode == http.StatusGone || r.StatusCode == http.StatusNotFound {
			break
		}
		wantStatus(t, r, http.StatusOK)
		if time.Now().After(deadline) {
			t.Fatal("the upload did not expire")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := h.tusPatch(t, tok, abandoned, 9<<20, strings.NewReader("x"), 1); r.StatusCode != http.StatusGone && r.StatusCode != http.StatusNotFound {
		t.Fatalf("PATCH of an expired upload: %d %s", r.StatusCode, r.body)
	}
	h.assertNothingStored(t)
	h.noIncompleteUploads(t)
}
