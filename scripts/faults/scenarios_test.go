//go:build faults

package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// maxAnswer bounds every answer during an outage: the services' dependency
// timeouts (server selection 5-10 s) plus slack for two loaded cores.
const maxAnswer = 20 * time.Second

// newUser creates a user as the admin and returns a signed-in client.
func (e *env) newUser(email string) *client {
	e.t.Helper()
	e.admin.mustStatus(201, "POST", "/users", map[string]string{"email": email, "password": "correct horse battery", "fullName": "Test User", "edv": "E-1"})
	c := newClient(e.t, e.p.GatewayURL)
	c.mustStatus(200, "POST", "/signin", map[string]string{"email": email, "password": "correct horse battery"})
	return c
}

// uploadBody is a multipart form with one file part read from data.
func uploadBody(name string, data io.Reader) (io.Reader, string) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err == nil {
			_, err = io.Copy(w, data)
		}
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		pw.CloseWithError(mw.Close())
	}()
	return pr, mw.FormDataContentType()
}

func (c *client) upload(name string, data []byte) result {
	body, ct := uploadBody(name, bytes.NewReader(data))
	return c.send("POST", "/upload/file", body, ct)
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// checkFiles asserts that every file record of the scenario's database has
// its object, of the recorded size, and returns how many records there are.
func (e *env) checkFiles(ctx context.Context) int {
	e.t.Helper()
	cur, err := srv.mongo.Database(e.servers.MongoDB).Collection("files").Find(ctx, bson.M{})
	if err != nil {
		e.t.Fatal(err)
	}
	var docs []struct {
		ID   string `bson:"_id"`
		Key  string `bson:"key"`
		Size int64  `bson:"size"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		e.t.Fatal(err)
	}
	for _, d := range docs {
		st, err := srv.s3.StatObject(ctx, e.servers.S3Bucket, d.Key, minio.StatObjectOptions{})
		if err != nil {
			e.t.Errorf("file record %s: object %s: %v (half-written)", d.ID, d.Key, err)
			continue
		}
		if d.Size > 0 && st.Size <= 0 {
			e.t.Errorf("file record %s: object %s is empty", d.ID, d.Key)
		}
	}
	return len(docs)
}

// The MongoDB-wire server stops for 10 s during mixed traffic: every answer
// comes within maxAnswer, failures are 503 JSON (never 500), the services
// recover by themselves, and no record is half-written.
func TestMongoDownDuringMixedTraffic(t *testing.T) {
	e := launch(t, nil)
	ada := e.newUser("ada@example.com")
	ctx := context.Background()
	tl := newTally()
	var phase atomic.Int32 // 0 before, 1 during the outage, 2 after
	var logOK, logUnavail atomic.Int64
	ops := []struct {
		name string
		do   func(i int) result
	}{
		{"GET /me", func(int) result { return ada.do("GET", "/me", nil) }},
		{"POST /signin", func(int) result {
			return newClient(t, e.p.GatewayURL).do("POST", "/signin", map[string]string{"email": "ada@example.com", "password": "correct horse battery"})
		}},
		{"POST /upload/file", func(i int) result { return ada.upload(fmt.Sprintf("f%d.bin", i), randBytes(16<<10)) }},
		{"POST /log", func(i int) result {
			r := e.admin.do("POST", "/log", map[string]string{"app": "SERVER-APP-A", "type": "log", "logBody": fmt.Sprintf("mixed %d", i), "metricsId": "mongo-run"})
			switch r.status {
			case 201:
				logOK.Add(1)
			case 503:
				logUnavail.Add(1)
			}
			return r
		}},
		{"GET /log/log/1", func(int) result { return e.admin.do("GET", "/log/log/1", nil) }},
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; ; i += workers {
				select {
				case <-stop:
					return
				default:
				}
				op := ops[i%len(ops)]
				r := op.do(i)
				prefix := []string{"before ", "during ", "after  "}[phase.Load()]
				tl.add(prefix+op.name, r)
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	time.Sleep(3 * time.Second)
	phase.Store(1)
	// A hard stop (SIGKILL): a SIGTERMed FerretDB keeps serving open
	// connections while it shuts down, which would hide the outage.
	srv.ferret.Kill()
	time.Sleep(10 * time.Second)
	if err := srv.ferret.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	phase.Store(2)
	// Recovery by themselves: each kind of request succeeds again.
	rec := eventually(t, 60*time.Second, "recovery after the MongoDB-wire server returned", func() bool {
		return ada.do("GET", "/me", nil).status == 200 &&
			ada.upload("after.bin", randBytes(1024)).status == 201 &&
			e.admin.do("POST", "/log", map[string]string{"app": "SERVER-APP-A", "type": "log", "logBody": "after"}).status == 201
	})
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	tl.table(t, fmt.Sprintf("MongoDB-wire server killed and kept down 10 s; recovered %s after its restart", rec.Round(time.Millisecond)))

	for op, m := range tl.counts {
		for k, n := range m {
			if k != "200" && k != "201" && k != "503" {
				t.Errorf("%s: %d answers %q (want only success or 503 JSON)", op, n, k)
			}
		}
		if tl.slowest[op] > maxAnswer {
			t.Errorf("%s: slowest answer %s, over %s", op, tl.slowest[op], maxAnswer)
		}
	}
	var during503 int
	for op := range tl.counts {
		if strings.HasPrefix(op, "during") {
			during503 += tl.counts[op]["503"]
		}
	}
	if during503 == 0 {
		t.Error("no 503 during the outage: the fault did not take effect")
	}
	// No half-written record: every file record has its object; log records
	// listed are between those acknowledged and those possibly written.
	n := e.checkFiles(ctx)
	listed := 0
	cursor := ""
	for {
		u := "/log/log/1/SERVER-APP-A?limit=500&metricsId=mongo-run"
		if cursor != "" {
			u += "&before=" + cursor
		}
		m := e.admin.mustStatus(201, "GET", u, nil)
		ls, _ := m["logs"].([]any)
		for _, r := range ls {
			rec := r.(map[string]any)
			if rec["logBody"] == "" || rec["createdAt"] == nil || rec["id"] == nil {
				t.Errorf("incomplete log record %v", rec)
			}
			cursor, _ = rec["id"].(string)
		}
		listed += len(ls)
		if len(ls) < 500 {
			break
		}
	}
	t.Logf("file records %d (all with their object); log records acknowledged %d, 503 %d, listed %d", n, logOK.Load(), logUnavail.Load(), listed)
	if int64(listed) < logOK.Load() || int64(listed) > logOK.Load()+logUnavail.Load() {
		t.Errorf("listed %d log records, want between %d acknowledged and %d", listed, logOK.Load(), logOK.Load()+logUnavail.Load())
	}
}

// countingReader counts bytes read and calls at once when n have passed.
type countingReader struct {
	r    io.Reader
	n    atomic.Int64
	at   int64
	once sync.Once
	f    func()
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	if c.n.Add(int64(k)) >= c.at {
		c.once.Do(func() { go c.f() })
	}
	return k, err
}

// zeroes is an endless reader of pseudo-random bytes (incompressible).
type noise struct{}

func (noise) Read(p []byte) (int, error) { return rand.Read(p) }

// MinIO stops during a large upload: 503 JSON, no file record and no
// orphaned object (nor an incomplete multipart upload) remain, and uploads
// work again once it is back, without restarting anything.
func TestMinIODownDuringLargeUpload(t *testing.T) {
	e := launch(t, nil)
	ada := e.newUser("ada@example.com")
	ctx := context.Background()
	const size = 512 << 20
	stopped := make(chan struct{})
	cr := &countingReader{r: io.LimitReader(noise{}, size), at: 48 << 20, f: func() {
		srv.stopMinIO()
		close(stopped)
	}}
	body, ct := uploadBody("large.bin", cr)
	start := time.Now()
	r := ada.send("POST", "/upload/file", body, ct)
	<-stopped
	t.Logf("upload of %d MiB: MinIO stopped after %d MiB sent; answer %d in %s: %.200s", size>>20, (48<<20)>>20, r.status, r.elapsed.Round(time.Millisecond), r.body)
	if r.status != 503 || !r.json {
		t.Errorf("upload during the outage: status %d (json %v, err %v), want 503 JSON", r.status, r.json, r.err)
	}
	if r.elapsed > time.Since(start)+time.Second || r.elapsed > 2*time.Minute {
		t.Errorf("upload answer took %s", r.elapsed)
	}
	// While MinIO is down a small upload fails fast with 503 too.
	r2 := ada.upload("small.bin", randBytes(1024))
	if r2.status != 503 || !r2.json || r2.elapsed > maxAnswer {
		t.Errorf("small upload while MinIO is down: %d (json %v) in %s, want 503 JSON within %s", r2.status, r2.json, r2.elapsed, maxAnswer)
	}
	if err := srv.startMinIO(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.checkFiles(ctx); n != 0 {
		t.Errorf("%d file records after the failed uploads, want 0", n)
	}
	var objects, incomplete int
	count := func() {
		objects, incomplete = 0, 0
		for o := range srv.s3.ListObjects(ctx, e.servers.S3Bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err == nil {
				objects++
			}
		}
		for u := range srv.s3.ListIncompleteUploads(ctx, e.servers.S3Bucket, "", true) {
			if u.Err == nil {
				incomplete++
			}
		}
	}
	// The orphan clean-up may need a moment once MinIO is back.
	deadline := time.Now().Add(30 * time.Second)
	for count(); (objects > 0 || incomplete > 0) && time.Now().Before(deadline); count() {
		time.Sleep(time.Second)
	}
	t.Logf("after MinIO returned: %d objects, %d incomplete multipart uploads in the bucket", objects, incomplete)
	if objects != 0 || incomplete != 0 {
		t.Errorf("orphans: %d objects and %d incomplete uploads remain", objects, incomplete)
	}
	rec := eventually(t, 60*time.Second, "upload after MinIO returned", func() bool {
		return ada.upload("again.bin", randBytes(64<<10)).status == 201
	})
	t.Logf("uploads work again %s after MinIO's restart", rec.Round(time.Millisecond))
	if n := e.checkFiles(ctx); n != 1 {
		t.Errorf("%d file records, want 1", n)
	}
}

// auth is stopped: the gateway answers 503 (never 401) for signed-in users
// and sign-ins, and recovers when auth returns.
func TestAuthDown(t *testing.T) {
	e := launch(t, nil)
	ada := e.newUser("ada@example.com")
	tl := newTally()
	e.p.Procs["auth"].Stop(10 * time.Second)
	for i := range 20 {
		tl.add("GET /me", ada.do("GET", "/me", nil))
		tl.add("GET /retrieve/file/x", ada.do("GET", "/retrieve/file/0123456789abcdef01234567", nil))
		tl.add("POST /signin", newClient(t, e.p.GatewayURL).do("POST", "/signin", map[string]string{"email": "ada@example.com", "password": "correct horse battery"}))
		if i == 0 {
			time.Sleep(time.Second)
		}
	}
	e.restart("auth")
	rec := eventually(t, 30*time.Second, "GET /me after auth returned", func() bool { return ada.do("GET", "/me", nil).status == 200 })
	tl.add("GET /me after", ada.do("GET", "/me", nil))
	tl.table(t, fmt.Sprintf("auth stopped; GET /me 200 again %s after its restart", rec.Round(time.Millisecond)))
	for op, m := range tl.counts {
		for k, n := range m {
			if k == "401" || k == "500" || k == "transport-error" || strings.HasSuffix(k, "notjson") {
				t.Errorf("%s: %d answers %s while auth was down", op, n, k)
			}
		}
	}
	if tl.count("GET /me", "503") == 0 || tl.count("POST /signin", "503") == 0 {
		t.Error("no 503 while auth was down")
	}
}

// slowReader hands out data at about rate bytes per second.
type slowReader struct {
	r    io.Reader
	rate int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if len(p) > s.rate/20 {
		p = p[:s.rate/20]
	}
	time.Sleep(50 * time.Millisecond)
	return s.r.Read(p)
}

// SIGTERM to files while uploads are mid-stream, then to auth while
// sign-ins are in flight: each request completes or fails cleanly (JSON
// error, never a 500 or a hang) within the shutdown deadline, the process
// exits within it, and no upload is half-written.
func TestSIGTERMDuringInFlight(t *testing.T) {
	const deadline = 10 * time.Second // AUTH_SHUTDOWN_TIMEOUT and FILES_SHUTDOWN_GRACE
	e := launch(t, map[string]string{"AUTH_SHUTDOWN_TIMEOUT": "10s", "FILES_SHUTDOWN_GRACE": "10s"})
	ctx := context.Background()
	users := make([]*client, 4)
	for i := range users {
		users[i] = e.newUser(fmt.Sprintf("u%d@example.com", i))
	}
	tl := newTally()
	exited := map[string]time.Duration{}
	term := func(name string) {
		p := e.p.Procs[name]
		at := time.Now()
		_ = p.Signal(syscall.SIGTERM)
		select {
		case <-p.Exited():
			exited[name] = time.Since(at).Round(time.Millisecond)
		case <-time.After(deadline + 5*time.Second):
			t.Errorf("%s still running %s after SIGTERM", name, deadline+5*time.Second)
		}
	}

	// Uploads of 4 MiB at 2 MiB/s: mid-stream when files gets SIGTERM.
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Go(func() {
			body, ct := uploadBody(fmt.Sprintf("up%d.bin", i), &slowReader{r: bytes.NewReader(randBytes(4 << 20)), rate: 2 << 20})
			tl.add("POST /upload/file", u.send("POST", "/upload/file", body, ct))
		})
	}
	time.Sleep(700 * time.Millisecond)
	term("files")
	wg.Wait()
	e.restart("files")

	// Sign-ins (argon2id: a few hundred ms each) when auth gets SIGTERM.
	for i := range 8 {
		wg.Go(func() {
			tl.add("POST /signin", newClient(t, e.p.GatewayURL).do("POST", "/signin", map[string]string{"email": fmt.Sprintf("u%d@example.com", i%4), "password": "correct horse battery"}))
		})
	}
	time.Sleep(100 * time.Millisecond)
	term("auth")
	wg.Wait()
	e.restart("auth")

	tl.table(t, fmt.Sprintf("SIGTERM with requests in flight; exited after %v", exited))
	for op, m := range tl.counts {
		for k, n := range m {
			if k != "200" && k != "201" && k != "503" {
				t.Errorf("%s: %d answers %s", op, n, k)
			}
		}
		if tl.slowest[op] > deadline+5*time.Second {
			t.Errorf("%s: slowest %s, past the shutdown deadline", op, tl.slowest[op])
		}
	}
	n := e.checkFiles(ctx)
	t.Logf("file records after the restart: %d (uploads answered 201: %d)", n, tl.count("POST /upload/file", "201"))
	if n != tl.count("POST /upload/file", "201") {
		t.Errorf("%d file records but %d uploads acknowledged", n, tl.count("POST /upload/file", "201"))
	}
	users[0].mustStatus(200, "GET", "/me", nil)
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
