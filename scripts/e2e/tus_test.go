package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/scripts/stack"
)

// tusSize is the resumable upload of TestTusThroughGateway (the issue's
// 256 MiB).
const tusSize = 256 << 20

// tusReq sends one tus request through the gateway with c's session.
func (c *client) tusReq(method, path string, hdr map[string]string, body io.Reader, n int64) (rawResp, error) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.ContentLength = n
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	hc := &http.Client{Jar: c.http.Jar, Timeout: 10 * time.Minute, Transport: checked(c.t, c.base, &http.Transport{DisableCompression: true})}
	resp, err := hc.Do(req)
	if err != nil {
		return rawResp{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return rawResp{resp.StatusCode, resp.Header, b}, err
}

func (c *client) mustTus(want int, method, path string, hdr map[string]string, body io.Reader, n int64) rawResp {
	c.t.Helper()
	r, err := c.tusReq(method, path, hdr, body, n)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	if r.status != want {
		c.t.Fatalf("%s %s: %d, want %d: %s", method, path, r.status, want, r.body)
	}
	return r
}

// tusCreate opens an upload and returns its path (from Location).
func (c *client) tusCreate(size int64, meta string) string {
	c.t.Helper()
	r := c.mustTus(201, "POST", "/uploads/", map[string]string{"Upload-Length": strconv.FormatInt(size, 10), "Upload-Metadata": meta}, nil, 0)
	loc, err := url.Parse(r.header.Get("Location"))
	if err != nil || !strings.HasPrefix(r.header.Get("Location"), c.base+"/uploads/") {
		c.t.Fatalf("Location %q", r.header.Get("Location"))
	}
	if _, err := http.ParseTime(r.header.Get("Upload-Expires")); err != nil {
		c.t.Fatalf("Upload-Expires %q", r.header.Get("Upload-Expires"))
	}
	return loc.Path
}

func (c *client) tusOffset(path string) int64 {
	c.t.Helper()
	for i := 0; ; i++ {
		r, err := c.tusReq("HEAD", path, nil, nil, 0)
		if err != nil {
			c.t.Fatal(err)
		}
		if r.status == 200 {
			n, err := strconv.ParseInt(r.header.Get("Upload-Offset"), 10, 64)
			if err != nil {
				c.t.Fatalf("Upload-Offset %q", r.header.Get("Upload-Offset"))
			}
			return n
		}
		// 423: the server is still saving what the broken PATCH brought.
		if r.status != 423 || i > 100 {
			c.t.Fatalf("HEAD %s: %d", path, r.status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var chunkHeaders = map[string]string{"Content-Type": "application/offset+octet-stream"}

func patchHeaders(off int64) map[string]string {
	return map[string]string{"Content-Type": "application/offset+octet-stream", "Upload-Offset": strconv.FormatInt(off, 10)}
}

func tusSource() io.Reader { return io.LimitReader(rand.NewChaCha8([32]byte{18}), tusSize) }

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// A 256 MiB upload through the gateway is cut at half, resumed from the
// offset the server reports and downloaded byte-identical; the gateway's
// and the files service's peak RSS stay within 96 MiB (each process's own
// code and caches take 15-65 MiB here; holding the resumed half alone would
// take 128 MiB). Then: the quota is
// checked at creation, bad tus input gets precise 4xx, termination, no
// session 401.
func TestTusThroughGateway(t *testing.T) {
	p, sec, _ := platform(t, nil)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)

	path := admin.tusCreate(tusSize, "filename "+b64("big.bin")+",meta "+b64("resumed"))
	if _, err := admin.tusReq("PATCH", path, patchHeaders(0), testkit.CutReader(tusSource(), tusSize/2), tusSize); err == nil {
		t.Fatal("the cut PATCH succeeded")
	}
	off := admin.tusOffset(path)
	if off <= 0 || off > tusSize/2 {
		t.Fatalf("offset after the cut %d, want (0, %d]", off, tusSize/2)
	}
	t.Logf("resuming at %d of %d bytes", off, tusSize)
	rest := tusSource()
	if _, err := io.CopyN(io.Discard, rest, off); err != nil {
		t.Fatal(err)
	}
	r := admin.mustTus(204, "PATCH", path, patchHeaders(off), rest, tusSize-off)
	if r.header.Get("Upload-Offset") != strconv.Itoa(tusSize) {
		t.Fatalf("final offset %q", r.header.Get("Upload-Offset"))
	}
	for name, proc := range map[string]*stack.Proc{"gateway": p.Procs["gateway"], "files": p.Procs["files"]} {
		peak, err := stack.PeakRSS(proc.Pid())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s peak RSS %d MiB", name, peak>>20)
		if peak > 96<<20 {
			t.Errorf("%s peak RSS %d MiB during a %d MiB resumable upload, want <= 96", name, peak>>20, tusSize>>20)
		}
	}
	id := r.header.Get("Upload-File-Id")
	if !strings.HasPrefix(strings.TrimPrefix(path, "/uploads/"), id+"+") {
		t.Fatalf("file id %q, upload %q", id, path)
	}

	// An ordinary file now: its record, and the same bytes back.
	want := sha256.New()
	if _, err := io.Copy(want, tusSource()); err != nil {
		t.Fatal(err)
	}
	_, body, _ := admin.do("GET", "/retrieve/file/"+id, nil)
	f, _ := body["file"].(map[string]any)
	if f == nil || f["sha256"] != hex.EncodeToString(want.Sum(nil)) || f["size"] != float64(tusSize) || f["name"] != "big.bin" || f["meta"] != "resumed" {
		t.Fatalf("record %v", body)
	}
	req, _ := http.NewRequest("GET", p.GatewayURL+"/download/file/"+id, nil)
	resp, err := admin.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || n != tusSize || hex.EncodeToString(got.Sum(nil)) != f["sha256"] {
		t.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, n, err)
	}
	// The upload itself is gone.
	r = admin.mustTus(404, "PATCH", path, patchHeaders(tusSize), strings.NewReader("x"), 1)
	checkCode(t, r, "not_found")

	// Bad input.
	r = admin.mustTus(412, "POST", "/uploads/", map[string]string{"Tus-Resumable": "0.2.2", "Upload-Length": "10"}, nil, 0)
	checkCode(t, r, "unsupported_tus_version")
	r = admin.mustTus(400, "POST", "/uploads/", nil, nil, 0)
	checkCode(t, r, "invalid_upload_length")
	small := admin.tusCreate(10, "")
	r = admin.mustTus(409, "PATCH", small, patchHeaders(3), strings.NewReader("abc"), 3)
	checkCode(t, r, "mismatched_offset")
	r = admin.mustTus(400, "PATCH", small, chunkHeaders, strings.NewReader("abc"), 3)
	checkCode(t, r, "invalid_offset")
	admin.mustTus(204, "PATCH", small, patchHeaders(0), strings.NewReader("abcd"), 4)
	if off := admin.tusOffset(small); off != 4 {
		t.Fatalf("offset %d, want 4", off)
	}
	admin.mustTus(204, "DELETE", small, nil, nil, 0)
	r = admin.mustTus(404, "DELETE", small, nil, nil, 0)
	checkCode(t, r, "not_found")

	// Quota: what is left of it bounds the declared length.
	adminID := admin.mustStatus(200, "GET", "/me", nil)["user"].(map[string]any)["id"].(string)
	used := int64(admin.mustStatus(200, "GET", "/me/usage", nil)["used"].(float64))
	admin.mustStatus(200, "PUT", "/usage/"+adminID, map[string]any{"quota": used + 10})
	r = admin.mustTus(413, "POST", "/uploads/", map[string]string{"Upload-Length": "11"}, nil, 0)
	checkCode(t, r, "quota_exceeded")
	admin.tusCreate(10, "")

	// No session.
	anon := newClient(t, p.GatewayURL)
	r = anon.mustTus(401, "POST", "/uploads/", map[string]string{"Upload-Length": "10"}, nil, 0)
	checkCode(t, r, "unauthenticated")
}

func checkCode(t *testing.T, r rawResp, code string) {
	t.Helper()
	if got := r.json(t)["code"]; got != code {
		t.Fatalf("code %v, want %s: %s", got, code, r.body)
	}
}

// tuspyScript uploads argv[3] to argv[1] (the gateway's /uploads/) with the
// session cookie argv[2], through tuspy (Debian's python3-tuspy, a tus
// client library): with argv[4] "half" it sends the first half in chunks and
// stops, printing the upload's URL; with "resume URL" it resumes that upload
// from the offset the server reports and sends the rest.
const tuspyScript = `
import os, sys
from tusclient import client
c = client.TusClient(sys.argv[1], headers={"Cookie": "sessionId=" + sys.argv[2]})
size = os.path.getsize(sys.argv[3])
chunk = 4 << 20
if sys.argv[4] == "half":
    u = c.uploader(sys.argv[3], chunk_size=chunk, metadata={"filename": "tuspy.bin"})
    while u.offset < size // 2:
        u.upload_chunk()
    print(u.url)
else:
    u = c.uploader(sys.argv[3], url=sys.argv[5], chunk_size=chunk)
    print("resumed at", u.offset, file=sys.stderr)
    u.upload()
    print(u.offset)
`

// A real tus client library (tuspy) uploads through the gateway, stops at
// half, and a second run resumes the same upload: the file is then an
// ordinary one, byte-identical.
func TestTusWithTuspy(t *testing.T) {
	const python = "/usr/bin/python3" // Debian's, which imports python3-tuspy
	if err := exec.Command(python, "-c", "import tusclient").Run(); err != nil {
		t.Fatalf("Debian's python3-tuspy is required: run scripts/ensure-packages.sh (make test does) (%v)", err)
	}
	p, sec, _ := platform(t, nil)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	const size = 24 << 20
	file := filepath.Join(t.TempDir(), "upload.bin")
	data := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{'t', 'u', 's'}).Read(data)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(python, append([]string{"-c", tuspyScript, p.GatewayURL + "/uploads/", admin.cookie(), file}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tuspy %v: %v\n%s", args, err, stderr.String())
		}
		t.Logf("tuspy %v: %s %s", args, strings.TrimSpace(string(out)), strings.TrimSpace(stderr.String()))
		return strings.TrimSpace(string(out))
	}
	uploadURL := run("half")
	u, err := url.Parse(uploadURL)
	if err != nil || !strings.HasPrefix(u.Path, "/uploads/") {
		t.Fatalf("upload URL %q", uploadURL)
	}
	if off := admin.tusOffset(u.Path); off < size/2 || off >= size {
		t.Fatalf("offset after the first run %d, want [%d, %d)", off, size/2, size)
	}
	if got := run("resume", uploadURL); got != strconv.Itoa(size) {
		t.Fatalf("tuspy ended at %s, want %d", got, size)
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(u.Path, "/uploads/"), "+")
	want := sha256.Sum256(data)
	_, body, _ := admin.do("GET", "/retrieve/file/"+id, nil)
	f, _ := body["file"].(map[string]any)
	if f == nil || f["sha256"] != hex.EncodeToString(want[:]) || f["size"] != float64(size) || f["name"] != "tuspy.bin" {
		t.Fatalf("record %v", body)
	}
	req, _ := http.NewRequest("GET", p.GatewayURL+"/download/file/"+id, nil)
	resp, err := admin.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || sha256.Sum256(got) != want {
		t.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, len(got), err)
	}
}
