package app

import (
	"bytes"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/golang-jwt/jwt/v5"
)

func TestUploadBadInput(t *testing.T) {
	h := start(t, nil, hooks{})
	tok := h.user("u")
	big := bytes.Repeat([]byte("x"), 50_000)

	for _, tc := range []struct {
		name   string
		parts  []part
		status int
		code   string
	}{
		{"upload400NoFileField", []part{{field: "meta", content: []byte("m")}}, http.StatusBadRequest, "missing_file"},
		{"upload400NoFields", nil, http.StatusBadRequest, "missing_file"},
		{"upload400TwoFileFields", []part{fileField("a.txt", text), fileField("b.txt", text)}, http.StatusBadRequest, "duplicate_file"},
		{"upload400EmptyFile", []part{fileField("empty.txt", nil)}, http.StatusBadRequest, "empty_file"},
		{"upload400MetaOverLimitAfterFile", []part{fileField("a.txt", text), {field: "meta", content: bytes.Repeat([]byte("m"), 4097)}}, http.StatusBadRequest, "meta_too_long"},
		{"upload400MetaOverLimitBeforeFile", []part{{field: "meta", content: bytes.Repeat([]byte("m"), 4097)}, fileField("a.txt", text)}, http.StatusBadRequest, "meta_too_long"},
		{"upload400TwoMeta", []part{{field: "meta", content: []byte("1")}, {field: "meta", content: []byte("2")}, fileField("a.txt", text)}, http.StatusBadRequest, "duplicate_meta"},
		{"upload400MetaNotUTF8", []part{fileField("a.txt", text), {field: "meta", content: []byte{0xff, 0xfe}}}, http.StatusBadRequest, "invalid_meta"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, h.upload("/upload/file", tok, tc.parts...), tc.status, tc.code)
			h.assertNothingStored(t)
		})
	}

	t.Run("upload400TruncatedMultipart", func(t *testing.T) {
		ct, body := form(t, fileField("big.bin", big))
		cut := body[:len(body)-200] // the closing boundary and the file's tail are missing
		wantError(t, h.do(http.MethodPost, "/upload/file", tok, bytes.NewReader(cut), map[string]string{"Content-Type": ct}), http.StatusBadRequest, "invalid_multipart")
		h.assertNothingStored(t)
	})

	t.Run("upload400GarbageBody", func(t *testing.T) {
		wantError(t, h.do(http.MethodPost, "/upload/file", tok, strings.NewReader("not a form at all"),
			map[string]string{"Content-Type": "multipart/form-data; boundary=xyz"}), http.StatusBadRequest, "invalid_multipart")
	})

	for _, ct := range []string{"application/json", "text/plain", "multipart/form-data", "multipart/mixed; boundary=x", ""} {
		t.Run("upload415ContentType"+ct, func(t *testing.T) {
			wantError(t, h.do(http.MethodPost, "/upload/file", tok, strings.NewReader(`{"file":"x"}`), map[string]string{"Content-Type": ct}),
				http.StatusUnsupportedMediaType, "unsupported_media_type")
		})
	}

	t.Run("upload415ContentEncoding", func(t *testing.T) {
		ct, body := form(t, fileField("a.txt", text))
		wantError(t, h.do(http.MethodPost, "/upload/file", tok, bytes.NewReader(body), map[string]string{"Content-Type": ct, "Content-Encoding": "gzip"}),
			http.StatusUnsupportedMediaType, "unsupported_encoding")
	})

	t.Run("upload201UnknownFieldsIgnoredMetaAbsent", func(t *testing.T) {
		r := h.upload("/upload/file", tok, part{field: "other", content: []byte("x")}, fileField("a.txt", text))
		wantStatus(t, r, http.StatusCreated)
		if f := r.json(t)["file"].(map[string]any); f["meta"] != nil {
			t.Fatalf("meta %v, want null", f["meta"])
		}
	})
}

func TestUploadNeedsSession(t *testing.T) {
	h := start(t, nil, hooks{})
	other := testkit.NewIdentity(t)
	for _, tc := range []struct {
		name, token, code string
	}{
		{"upload401NoToken", "", "identity_required"},
		{"upload401ForgedToken", other.Token(t, identity.Claims{Role: "admin", RegisteredClaims: jwt.RegisteredClaims{Subject: "u"}}, "files"), "identity_required"},
		{"upload401WrongAudience", h.id.Token(t, identity.Claims{Role: "user", RegisteredClaims: jwt.RegisteredClaims{Subject: "u"}}, "logs"), "identity_required"},
		{"upload401Garbage", "not.a.token", "identity_required"},
		{"upload401Anonymous", h.anonymous(), "unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/upload/file", "/upload/image"} {
				wantError(t, h.upload(path, tc.token, fileField("a.txt", text)), http.StatusUnauthorized, tc.code)
			}
		})
	}
	h.assertNothingStored(t)
	// The connection survives refusals: later requests on it still work.
	wantStatus(t, h.upload("/upload/file", h.user("u"), fileField("a.txt", text)), http.StatusCreated)
}

func TestUploadFileNames(t *testing.T) {
	h := start(t, nil, hooks{})
	tok := h.user("u")
	long := strings.Repeat("n", 10_000) + ".txt"
	for _, tc := range []struct {
		name, filename, want string
		header               textproto.MIMEHeader
	}{
		{"upload201DotDot", "../../etc/passwd", "passwd", nil},
		{"upload201Backslashes", `..\..\windows\win.ini`, "win.ini", nil},
		{"upload201RTLOverride", "report\u202Etxt.exe", "reporttxt.exe", nil},
		{"upload201RTLScript", "تقرير سنوي.txt", "تقرير سنوي.txt", nil},
		{"upload201EncodedNUL", "", "ab.txt", textproto.MIMEHeader{"Content-Disposition": {`form-data; name="file"; filename*=UTF-8''a%00b.txt`}}},
		{"upload201EncodedNewline", "", "a b.txt", textproto.MIMEHeader{"Content-Disposition": {`form-data; name="file"; filename*=UTF-8''a%0D%0A%20b.txt`}}},
		{"upload201NoFilename", "", "file", textproto.MIMEHeader{"Content-Disposition": {`form-data; name="file"`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fileField(tc.filename, text)
			p.header = tc.header
			r := h.upload("/upload/file", tok, p)
			wantStatus(t, r, http.StatusCreated)
			f := r.json(t)["file"].(map[string]any)
			if f["name"] != tc.want {
				t.Fatalf("name %q, want %q", f["name"], tc.want)
			}
			if strings.Contains(f["path"].(string), "..") || strings.Contains(f["path"].(string), "etc") {
				t.Fatalf("path %q", f["path"])
			}
			checkDisposition(t, h.get("/download/file/"+f["id"].(string), tok, nil), tc.want)
		})
	}

	t.Run("upload201LongName", func(t *testing.T) {
		r := h.upload("/upload/file", tok, fileField(long, text))
		wantStatus(t, r, http.StatusCreated)
		name := r.json(t)["file"].(map[string]any)["name"].(string)
		if len(name) > 255 || !strings.HasSuffix(name, ".txt") {
			t.Fatalf("name of %d bytes", len(name))
		}
	})

	// A raw NUL (or CR/LF) inside a part header is not a valid MIME header:
	// the form is refused as malformed before anything is stored.
	t.Run("upload400RawNULInHeader", func(t *testing.T) {
		body := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\x00b.txt\"\r\n\r\nhello\r\n--b--\r\n"
		r := h.do(http.MethodPost, "/upload/file", tok, strings.NewReader(body), map[string]string{"Content-Type": "multipart/form-data; boundary=b"})
		wantError(t, r, http.StatusBadRequest, "invalid_multipart")
	})
}

// checkDisposition: the header is ASCII and a standard parser gets the
// stored name back.
func checkDisposition(t *testing.T, r *response, want string) {
	t.Helper()
	wantStatus(t, r, http.StatusOK)
	cd := r.Header.Get("Content-Disposition")
	for i := 0; i < len(cd); i++ {
		if cd[i] < 0x20 || cd[i] >= 0x7f {
			t.Fatalf("non-ASCII in Content-Disposition %q", cd)
		}
	}
	_, params, err := mime.ParseMediaType(cd)
	if err != nil || params["filename"] != want {
		t.Fatalf("Content-Disposition %q gives %q (%v), want %q", cd, params["filename"], err, want)
	}
}

func TestUploadLimits(t *testing.T) {
	h := start(t, map[string]string{"FILES_MAX_UPLOAD": "64KiB", "FILES_MAX_META": "100"}, hooks{})
	tok := h.user("u")

	t.Run("upload413Streamed", func(t *testing.T) {
		r := h.streamForm("/upload/file", tok, "big.bin", &pattern{n: 64<<10 + 100<<10})
		m := wantError(t, r, http.StatusRequestEntityTooLarge, "file_too_large")
		if m["err"] == nil {
			t.Fatalf("no err: %v", m)
		}
		h.assertNothingStored(t)
	})

	t.Run("upload413StreamedText", func(t *testing.T) { // the gzip path
		r := h.streamForm("/upload/file", tok, "big.txt", bytes.NewReader(bytes.Repeat([]byte("abc\n"), 40<<10)))
		wantError(t, r, http.StatusRequestEntityTooLarge, "file_too_large")
		h.assertNothingStored(t)
	})

	t.Run("upload413Declared", func(t *testing.T) {
		ct, body := form(t, fileField("big.bin", make([]byte, 1<<20)))
		// Raw: the service answers from the declared length and closes
		// without reading the body, which net/http's client reports as a
		// broken write instead of the answer.
		raw := testkit.RawRequest(t, h.base, http.MethodPost, "/upload/file",
			map[string]string{"Content-Type": ct, identity.Header: tok}, string(body))
		r := &response{StatusCode: raw.Status, Header: raw.Header, body: raw.Body}
		wantError(t, r, http.StatusRequestEntityTooLarge, "file_too_large")
		h.assertNothingStored(t)
	})

	t.Run("upload201AtLimit", func(t *testing.T) {
		r := h.streamForm("/upload/file", tok, "exact.bin", &pattern{n: 64 << 10})
		wantStatus(t, r, http.StatusCreated)
		if size := r.json(t)["file"].(map[string]any)["size"]; size != float64(64<<10) {
			t.Fatalf("size %v", size)
		}
	})

	t.Run("upload400MetaOverConfiguredLimit", func(t *testing.T) {
		wantError(t, h.upload("/upload/file", tok, fileField("a.txt", text), part{field: "meta", content: bytes.Repeat([]byte("m"), 101)}),
			http.StatusBadRequest, "meta_too_long")
		r := h.upload("/upload/file", tok, fileField("a.txt", text), part{field: "meta", content: bytes.Repeat([]byte("m"), 100)})
		wantStatus(t, r, http.StatusCreated)
	})
}

// A client that goes away mid-upload leaves nothing behind.
func TestClientAbortLeavesNothing(t *testing.T) {
	h := start(t, nil, hooks{})
	ct, body := form(t, fileField("big.bin", make([]byte, 8<<20)))
	for _, tc := range []struct {
		name string
		sent int
	}{
		{"abortInFirstPart", 1 << 20},
		{"abortAfterAPart", 7 << 20}, // past one 5 MiB part: a multipart upload is under way
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "POST /upload/file HTTP/1.1\r\nHost: x\r\n%s: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
				identity.Header, h.user("u"), ct, len(body))
			if _, err := conn.Write(body[:tc.sent]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			conn.Close()
			h.assertNothingStored(t)
		})
	}
}
