package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"github.com/golang-jwt/jwt/v5"
	"github.com/minio/minio-go/v7"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// harness is one running files service on the kit's servers.
type harness struct {
	t    testing.TB
	base string
	tus  string // base URL of the tus listener
	env  testkit.Env
	id   testkit.Identity
	kit  *testkit.Servers
	svc  *apptest.Service
}

// start runs the service with the test's own database and bucket; extra
// settings override the defaults.
func start(t testing.TB, extra map[string]string, hk hooks) *harness {
	t.Helper()
	kit := testkit.Get(t)
	env, id := kit.ServiceEnv(t, []string{"FILES_ADDR", "FILES_TUS_ADDR"}, map[string]string{
		"FILES_PUBLIC_BASE_URL": "https://files.example.test/",
		"FILES_SWEEP_INTERVAL":  "0",
	}, extra)
	tusc := make(chan string, 1)
	hk.tusReady = func(a string) { tusc <- a }
	svc := apptest.Start(t, func(ctx context.Context, getenv func(string) string, stdout io.Writer, ready func(string)) error {
		return run(ctx, getenv, stdout, ready, hk)
	}, env.Getenv, apptest.Options{})
	return &harness{t: t, base: svc.URL, tus: "http://" + <-tusc, env: env, id: id, kit: kit, svc: svc}
}

func (h *harness) token(sub, role string) string {
	h.t.Helper()
	return h.id.Token(h.t, identity.Claims{Role: role, RegisteredClaims: jwt.RegisteredClaims{Subject: sub}}, "files")
}

func (h *harness) user(sub string) string  { return h.token(sub, identity.RoleUser) }
func (h *harness) admin(sub string) string { return h.token(sub, identity.RoleAdmin) }
func (h *harness) anonymous() string       { return h.token("", "") }

// response is a finished exchange.
type response struct {
	StatusCode    int
	Header        http.Header
	ContentLength int64
	body          []byte
}

func (r *response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %q", err, r.body)
	}
	return m
}

// client sends what the test says, compressed or not, as it is.
var client = &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 120 * time.Second}

func (h *harness) do(method, path, token string, body io.Reader, hdr map[string]string) *response {
	h.t.Helper()
	return h.doURL(method, h.base+path, token, body, hdr)
}

func (h *harness) doURL(method, url, token string, body io.Reader, hdr map[string]string) *response {
	h.t.Helper()
	c := apptest.NewClient(h.t, "")
	c.HTTP = client
	if token != "" {
		c = c.With(identity.Header, token)
	}
	r := c.Do(method, url, body, hdr)
	return &response{StatusCode: r.Status, Header: r.Header, ContentLength: r.ContentLength, body: r.Body}
}

func (h *harness) get(path, token string, hdr map[string]string) *response {
	h.t.Helper()
	return h.do(http.MethodGet, path, token, nil, hdr)
}

// part is one field of a multipart form.
type part struct {
	field    string
	filename string // "" for a plain field
	content  []byte
	header   textproto.MIMEHeader // replaces the generated headers when set
}

func fileField(name string, content []byte) part {
	return part{field: "file", filename: name, content: content}
}

var quoteEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// form encodes parts as multipart/form-data.
func form(t testing.TB, parts ...part) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, p := range parts {
		hdr := p.header
		if hdr == nil {
			hdr = textproto.MIMEHeader{}
			if p.filename != "" {
				hdr.Set("Content-Disposition", fmt.Sprintf(`form-data; name="%s"; filename="%s"`, p.field, quoteEscaper.Replace(p.filename)))
				hdr.Set("Content-Type", "application/octet-stream")
			} else {
				hdr.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, p.field))
			}
		}
		pw, err := w.CreatePart(hdr)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write(p.content)
	}
	w.Close()
	return w.FormDataContentType(), b.Bytes()
}

func (h *harness) upload(path, token string, parts ...part) *response {
	h.t.Helper()
	ct, body := form(h.t, parts...)
	return h.do(http.MethodPost, path, token, bytes.NewReader(body), map[string]string{"Content-Type": ct})
}

// uploadFile posts one file and returns its record, failing unless 201.
func (h *harness) uploadFile(token, name string, content []byte) map[string]any {
	h.t.Helper()
	r := h.upload("/upload/file", token, fileField(name, content))
	if r.StatusCode != http.StatusCreated {
		h.t.Fatalf("upload: %d %s", r.StatusCode, r.body)
	}
	return r.json(h.t)["file"].(map[string]any)
}

// objects lists the keys in the test's bucket.
func (h *harness) objects() []string {
	h.t.Helper()
	var keys []string
	for o := range h.kit.S3.ListObjects(context.Background(), h.env["S3_BUCKET"], minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			h.t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// records counts the file records in the test's database.
func (h *harness) records() int64 {
	h.t.Helper()
	n, err := h.kit.Mongo.Database(h.env["MONGO_DB"]).Collection("files").CountDocuments(context.Background(), bson.D{})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// assertNothingStored waits briefly for clean-ups to land, then requires an
// empty bucket and no records.
func (h *harness) assertNothingStored(t testing.TB) {
	t.Helper()
	apptest.Eventually(t, 10*time.Second, func() error {
		if objs, recs := h.objects(), h.records(); len(objs) != 0 || recs != 0 {
			return fmt.Errorf("left behind: objects %v, records %d", objs, recs)
		}
		return nil
	})
}

func wantStatus(t testing.TB, r *response, status int) {
	t.Helper()
	if r.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", r.StatusCode, status, r.body)
	}
}

// wantError checks status, JSON body and its code.
func wantError(t *testing.T, r *response, status int, code string) map[string]any {
	t.Helper()
	wantStatus(t, r, status)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error content type %q", ct)
	}
	m := r.json(t)
	if m["code"] != code {
		t.Fatalf("code %v, want %s: %s", m["code"], code, r.body)
	}
	return m
}

// pattern yields n deterministic bytes without holding them.
type pattern struct{ n, off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n-p.off {
		b = b[:p.n-p.off]
	}
	for i := range b {
		x := uint64(p.off + int64(i))
		b[i] = byte(x*2654435761>>13) ^ byte(x>>7)
	}
	p.off += int64(len(b))
	return len(b), nil
}

// streamForm sends a multipart form whose file content comes from src,
// chunked (no Content-Length), as a browser through the gateway would.
func (h *harness) streamForm(path, token, name string, src io.Reader) *response {
	h.t.Helper()
	pr, pw := io.Pipe()
	w := multipart.NewWriter(pw)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fw, err := w.CreateFormFile("file", name)
		if err == nil {
			_, err = io.Copy(fw, src)
		}
		if err == nil {
			err = w.Close()
		}
		pw.CloseWithError(err)
	}()
	r := h.do(http.MethodPost, path, token, pr, map[string]string{"Content-Type": w.FormDataContentType()})
	pr.CloseWithError(io.ErrClosedPipe)
	wg.Wait()
	return r
}

// heapPeak samples HeapInuse every interval until stopped and returns the
// peak growth over the starting point in MiB.
func heapPeak(every time.Duration) (stop func() float64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(every):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	return func() float64 {
		close(done)
		wg.Wait()
		return float64(int64(peak.Load())-int64(base)) / (1 << 20)
	}
}
