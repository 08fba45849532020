package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

// part is one multipart form part.
type part struct {
	field, filename, contentType string
	data                         io.Reader
}

// multipartBody writes parts as a form, streaming through a pipe, so a large
// file never sits in memory.
func multipartBody(parts ...part) (io.Reader, string) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		for _, p := range parts {
			h := textproto.MIMEHeader{}
			if p.filename != "" {
				// As a browser sends it: the raw UTF-8 name, quotes escaped.
				name := strings.NewReplacer(`"`, `%22`, "\r", "%0D", "\n", "%0A").Replace(p.filename)
				h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename="%s"`, p.field, name))
				ct := p.contentType
				if ct == "" {
					ct = "application/octet-stream"
				}
				h.Set("Content-Type", ct)
			} else {
				h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, p.field))
			}
			w, err := mw.CreatePart(h)
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := io.Copy(w, p.data); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(mw.Close())
	}()
	return pr, mw.FormDataContentType()
}

// rawResp is an answer read whole, without transparent decompression.
type rawResp struct {
	status int
	header http.Header
	body   []byte
}

func (r rawResp) json(t *testing.T) map[string]any {
	t.Helper()
	if !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d: not JSON (%q): %.200q", r.status, r.header.Get("Content-Type"), r.body)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("bad JSON %q", r.body)
	}
	return m
}

// raw does a request with the client's cookies (if c has a session) but no
// automatic Accept-Encoding or decompression: what is on the wire.
func (c *client) raw(method, path string, hdr map[string]string, body io.Reader, contentType string) rawResp {
	c.t.Helper()
	wire := *c.api
	wire.HTTP = &http.Client{Jar: c.http.Jar, Timeout: 2 * time.Minute, Transport: checked(c.t, c.base, &http.Transport{DisableCompression: true})}
	r := wire.Do(method, path, body, map[string]string{"Content-Type": contentType}, hdr)
	return rawResp{r.Status, r.Header, r.Body}
}

func (c *client) upload(path string, parts ...part) rawResp {
	c.t.Helper()
	body, ct := multipartBody(parts...)
	return c.raw("POST", path, nil, body, ct)
}

func signIn(t *testing.T, base, email, password string) *client {
	t.Helper()
	c := newClient(t, base)
	c.mustStatus(200, "POST", "/signin", map[string]string{"email": email, "password": password})
	return c
}

// checkErr asserts a {err, sentId} body for id.
func checkErrSentID(t *testing.T, what string, r rawResp, status int, id string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.body)
	}
	m := r.json(t)
	if e, _ := m["err"].(string); e == "" || m["sentId"] != id {
		t.Fatalf("%s: body %v, want {err, sentId:%q}", what, m, id)
	}
}

func testPNG(t *testing.T, w, h int) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.NRGBA{uint8(x * 255 / w), uint8(y * 255 / h), 128, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Files through the gateway, as a browser or curl uses them: upload, record,
// download with its headers, gzip, conditional and range requests, access,
// images, bad input and the size limit.
func TestFilesThroughGateway(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"FILES_MAX_UPLOAD": "1MiB"})
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	for _, u := range []string{"ada@example.com", "bob@example.com"} {
		admin.mustStatus(201, "POST", "/users", map[string]any{"email": u, "password": "correct horse battery", "fullName": u, "edv": "E-" + u[:3]})
	}
	ada := signIn(t, gw, "ada@example.com", "correct horse battery")
	bob := signIn(t, gw, "bob@example.com", "correct horse battery")
	anon := newClient(t, gw)

	// A binary file (PDF by content, claimed as text) with a Unicode name.
	pdf := append([]byte("%PDF-1.4\n"), bytes.Repeat([]byte{0x00, 0xff, 0x10, 0x80}, 4096)...)
	name := "Résumé «ünïcødé» 日本語.pdf"
	meta := `{"project":"alpha","tags":["a","b"]}`
	r := ada.upload("/upload/file",
		part{field: "meta", data: strings.NewReader(meta)},
		part{field: "file", filename: name, contentType: "text/plain", data: bytes.NewReader(pdf)})
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	rec, _ := r.json(t)["file"].(map[string]any)
	id, _ := rec["id"].(string)
	if id == "" || rec["type"] != "application/pdf" || rec["meta"] != meta || rec["name"] != name {
		t.Fatalf("upload record: %v", rec)
	}
	if path, _ := rec["path"].(string); path == "" || strings.Contains(path, "sum") || strings.Contains(path, ".pdf") || strings.Contains(path, "..") {
		t.Fatalf("path %q derived from the client's name", path)
	}
	if ts, _ := rec["createdAt"].(string); ts == "" {
		t.Fatalf("createdAt missing: %v", rec)
	} else if at, err := time.Parse(time.RFC3339Nano, ts); err != nil || time.Since(at) > time.Minute || time.Since(at) < -time.Minute {
		t.Fatalf("createdAt %q: %v", ts, err)
	}
	sum := sha256.Sum256(pdf)
	if rec["sha256"] != hex.EncodeToString(sum[:]) || rec["size"] != float64(len(pdf)) {
		t.Fatalf("sha256/size: %v", rec)
	}

	// Retrieve: the record and an absolute downloadUrl that works through the gateway.
	got := ada.mustStatus(200, "GET", "/retrieve/file/"+id, nil)
	dl, _ := got["downloadUrl"].(string)
	if !strings.HasPrefix(dl, gw+"/") || got["file"].(map[string]any)["id"] != id {
		t.Fatalf("retrieve: %v", got)
	}
	d := ada.raw("GET", strings.TrimPrefix(dl, gw), nil, nil, "")
	if d.status != 200 || !bytes.Equal(d.body, pdf) {
		t.Fatalf("download via downloadUrl: %d, %d bytes", d.status, len(d.body))
	}
	disp, params, err := mime.ParseMediaType(d.header.Get("Content-Disposition"))
	if err != nil || disp != "attachment" || params["filename"] != name {
		t.Fatalf("Content-Disposition %q: %v %v", d.header.Get("Content-Disposition"), params, err)
	}
	for _, c := range d.header.Get("Content-Disposition") {
		if c > 0x7e {
			t.Fatalf("Content-Disposition not ASCII: %q", d.header.Get("Content-Disposition"))
		}
	}
	if d.header.Get("X-Content-Type-Options") != "nosniff" || d.header.Get("Content-Length") != fmt.Sprint(len(pdf)) ||
		d.header.Get("ETag") == "" || d.header.Get("Last-Modified") == "" {
		t.Fatalf("download headers: %v", d.header)
	}
	etag := d.header.Get("ETag")
	if nm := ada.raw("GET", "/download/file/"+id, map[string]string{"If-None-Match": etag}, nil, ""); nm.status != 304 || len(nm.body) != 0 {
		t.Fatalf("If-None-Match: %d", nm.status)
	}
	rg := ada.raw("GET", "/download/file/"+id, map[string]string{"Range": "bytes=100-199"}, nil, "")
	if rg.status != 206 || !bytes.Equal(rg.body, pdf[100:200]) || rg.header.Get("Content-Range") != fmt.Sprintf("bytes 100-199/%d", len(pdf)) {
		t.Fatalf("range: %d %q %d bytes", rg.status, rg.header.Get("Content-Range"), len(rg.body))
	}
	if hd := ada.raw("HEAD", "/download/file/"+id, nil, nil, ""); hd.status != 200 || len(hd.body) != 0 ||
		hd.header.Get("Content-Length") != fmt.Sprint(len(pdf)) || hd.header.Get("ETag") != etag {
		t.Fatalf("HEAD download: %d %v", hd.status, hd.header)
	}
	if r := ada.raw("GET", "/download/file/"+id, map[string]string{"Range": fmt.Sprintf("bytes=%d-", len(pdf)+10)}, nil, ""); r.status != 416 {
		t.Fatalf("range outside the file: %d %s", r.status, r.body)
	}

	// A compressible text file: gzip on the wire when accepted, plain otherwise.
	text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2000))
	r = ada.upload("/upload/file", part{field: "file", filename: "../../etc/notes.txt", data: bytes.NewReader(text)})
	if r.status != 201 {
		t.Fatalf("upload text: %d %s", r.status, r.body)
	}
	trec := r.json(t)["file"].(map[string]any)
	tid := trec["id"].(string)
	if tp, _ := trec["path"].(string); tp == "" || strings.Contains(tp, "notes") || strings.Contains(tp, "etc") || strings.Contains(tp, "..") {
		t.Fatalf("path %q derived from the client's name", tp)
	}
	if !strings.HasPrefix(trec["type"].(string), "text/plain") || trec["name"] != "notes.txt" || trec["meta"] != nil {
		t.Fatalf("text record: %v", trec)
	}
	gz := ada.raw("GET", "/download/file/"+tid, map[string]string{"Accept-Encoding": "gzip"}, nil, "")
	if gz.status != 200 || gz.header.Get("Content-Encoding") != "gzip" || len(gz.body) >= len(text) {
		t.Fatalf("gzip download: %d %q %d bytes", gz.status, gz.header.Get("Content-Encoding"), len(gz.body))
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz.body))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := io.ReadAll(zr); err != nil || !bytes.Equal(plain, text) {
		t.Fatalf("gzip body does not decode to the original: %v", err)
	}
	pl := ada.raw("GET", "/download/file/"+tid, nil, nil, "")
	if pl.status != 200 || pl.header.Get("Content-Encoding") != "" || !bytes.Equal(pl.body, text) {
		t.Fatalf("plain download: %d %q %d bytes", pl.status, pl.header.Get("Content-Encoding"), len(pl.body))
	}

	// Access: another user, an unknown id, no cookie.
	checkErrSentID(t, "other user's retrieve", bob.raw("GET", "/retrieve/file/"+id, nil, nil, ""), 404, id)
	checkErrSentID(t, "other user's download", bob.raw("GET", "/download/file/"+id, nil, nil, ""), 404, id)
	unknown := strings.Repeat("ab", 16)
	checkErrSentID(t, "unknown retrieve", ada.raw("GET", "/retrieve/file/"+unknown, nil, nil, ""), 404, unknown)
	checkErrSentID(t, "unknown download", ada.raw("GET", "/download/file/"+unknown, nil, nil, ""), 404, unknown)
	admin.mustStatus(200, "GET", "/retrieve/file/"+id, nil) // admins read every file
	for _, path := range []string{"/retrieve/file/" + id, "/download/file/" + id, "/files"} {
		a := anon.raw("GET", path, nil, nil, "")
		if a.status != 401 || a.json(t)["code"] == nil {
			t.Fatalf("anonymous %s: %d %s", path, a.status, a.body)
		}
	}
	if a := anon.upload("/upload/file", part{field: "file", filename: "x.txt", data: strings.NewReader("hello")}); a.status != 401 || a.json(t)["code"] == nil {
		t.Fatalf("anonymous upload: %d %s", a.status, a.body)
	}

	// An image: public URL without a cookie, long immutable caching; not downloadable as a file.
	r = ada.upload("/upload/image", part{field: "file", filename: "avatar.png", contentType: "image/png", data: bytes.NewReader(testPNG(t, 120, 80))})
	if r.status != 201 {
		t.Fatalf("upload image: %d %s", r.status, r.body)
	}
	img := r.json(t)["image"].(map[string]any)
	iid, _ := img["id"].(string)
	url, _ := img["url"].(string)
	if iid == "" || !strings.HasPrefix(url, gw+"/") || img["type"] != "image/png" || img["width"] != float64(120) || img["height"] != float64(80) {
		t.Fatalf("image: %v", img)
	}
	pub := anon.raw("GET", strings.TrimPrefix(url, gw), nil, nil, "")
	if pub.status != 200 || pub.header.Get("Content-Type") != "image/png" || !strings.Contains(pub.header.Get("Cache-Control"), "immutable") ||
		!strings.Contains(pub.header.Get("Cache-Control"), "max-age=31536000") || pub.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("public image: %d %v", pub.status, pub.header)
	}
	if hd := anon.raw("HEAD", strings.TrimPrefix(url, gw), nil, nil, ""); hd.status != 200 || len(hd.body) != 0 || hd.header.Get("Content-Length") != fmt.Sprint(len(pub.body)) {
		t.Fatalf("HEAD image: %d %v", hd.status, hd.header)
	}
	checkErrSentID(t, "a file id as an image", anon.raw("GET", "/images/"+id, nil, nil, ""), 404, id)
	if cfg, format, err := image.DecodeConfig(bytes.NewReader(pub.body)); err != nil || format != "png" || cfg.Width != 120 {
		t.Fatalf("public image does not decode: %v %s %v", cfg, format, err)
	}
	checkErrSentID(t, "download an image", ada.raw("GET", "/download/file/"+iid, nil, nil, ""), 400, iid)
	if tx := ada.upload("/upload/image", part{field: "file", filename: "not-an-image.png", contentType: "image/png", data: bytes.NewReader(text)}); tx.status != 415 {
		t.Fatalf("text to /upload/image: %d %s", tx.status, tx.body)
	}

	// Over the configured maximum (1 MiB): 413 JSON and no record.
	big := make([]byte, 1<<20+4096)
	rnd := rand.NewChaCha8([32]byte{1})
	_, _ = rnd.Read(big)
	// Sent with a Content-Length, as browsers and curl -F do.
	var form bytes.Buffer
	fr, ct := multipartBody(part{field: "file", filename: "too-big.bin", data: bytes.NewReader(big)})
	if _, err := io.Copy(&form, fr); err != nil {
		t.Fatal(err)
	}
	tl := ada.raw("POST", "/upload/file", nil, bytes.NewReader(form.Bytes()), ct)
	if tl.status != 413 {
		t.Fatalf("too large: %d %s", tl.status, tl.body)
	}
	if m := tl.json(t); m["err"] == nil {
		t.Fatalf("413 body: %v", m)
	}
	list := ada.mustStatus(200, "GET", "/files?limit=100", nil)
	files, _ := list["files"].([]any)
	if len(files) != 3 {
		t.Fatalf("GET /files: %d records, want 3 (pdf, text, image): %v", len(files), list)
	}
	for _, f := range files {
		if f.(map[string]any)["name"] == "too-big.bin" {
			t.Fatalf("a record exists for the refused upload: %v", f)
		}
	}
	if bl := bob.mustStatus(200, "GET", "/files", nil); len(bl["files"].([]any)) != 0 {
		t.Fatalf("bob sees files: %v", bl)
	}
}

// A 32 MiB upload streamed through the gateway (chunked, never in memory on
// the client) arrives intact.
func TestFilesStreamedUpload(t *testing.T) {
	p, sec, _ := platform(t, nil)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	const size = 32 << 20
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{7}), size), h)
	r := admin.upload("/upload/file", part{field: "file", filename: "big.bin", data: src})
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	rec := r.json(t)["file"].(map[string]any)
	if want := hex.EncodeToString(h.Sum(nil)); rec["sha256"] != want || rec["size"] != float64(size) {
		t.Fatalf("stored sha256/size %v/%v, sent %s/%d", rec["sha256"], rec["size"], want, size)
	}
	// And back: the same bytes.
	req, _ := http.NewRequest("GET", p.GatewayURL+"/download/file/"+rec["id"].(string), nil)
	resp, err := admin.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dh := sha256.New()
	n, err := io.Copy(dh, resp.Body)
	if err != nil || resp.StatusCode != 200 || n != size || hex.EncodeToString(dh.Sum(nil)) != rec["sha256"] {
		t.Fatalf("download: %d, %d bytes, %v", resp.StatusCode, n, err)
	}
}
