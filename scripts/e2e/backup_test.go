package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/natsconn"
	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/authenticator"
	"github.com/acme/platform/scripts/devstack/devenv"
	"github.com/acme/platform/scripts/stack"
	"github.com/nats-io/nats.go"
)

// devRun is one `make run` (scripts/devstack) running as its own process
// on a DATA_DIR, as a developer runs it.
type devRun struct {
	dir  string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	st   devenv.State
	sec  devenv.Secrets
	done chan struct{}
}

// backupTools builds `make run`, `make backup`/`make restore` and
// acme-backup once into dir.
func backupTools(t *testing.T, root, dir string) {
	t.Helper()
	c := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./scripts/devstack", "./scripts/devbackup", "./services/backup")
	c.Dir = root
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

func startDevRun(t *testing.T, root, bin, dataDir string) *devRun {
	t.Helper()
	r := &devRun{dir: dataDir, out: &bytes.Buffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(filepath.Join(bin, "devstack"))
	r.cmd.Dir = root
	r.cmd.Env = append(os.Environ(), "DATA_DIR="+dataDir, "GATEWAY_ADDR=127.0.0.1:0", "MAILPIT_ADDR=127.0.0.1:0")
	var mu sync.Mutex
	w := writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return r.out.Write(b) })
	r.cmd.Stdout, r.cmd.Stderr = w, w
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			mu.Lock()
			t.Logf("make run on %s:\n%s", dataDir, tail(r.out.String(), 150))
			mu.Unlock()
		}
	})
	deadline := time.Now().Add(10 * time.Minute)
	for {
		st, err := devenv.ReadState(dataDir)
		if err == nil {
			r.st = st
			break
		}
		select {
		case <-r.done:
			t.Fatalf("make run exited: %s", tail(r.out.String(), 60))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("make run did not come up within 10 minutes")
		}
	}
	r.readSecrets(t)
	return r
}

func (r *devRun) readSecrets(t *testing.T) {
	t.Helper()
	sec, err := devenv.ReadSecrets(filepath.Join(r.dir, "dev-secrets.json"))
	if err != nil {
		t.Fatal(err)
	}
	r.sec = sec
}

// stop is Ctrl-C.
func (r *devRun) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.done
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// tool runs one of the built commands; it returns the combined output.
func tool(t *testing.T, root, bin, name string, env []string, args ...string) (string, error) {
	t.Helper()
	c := exec.Command(filepath.Join(bin, name), args...)
	c.Dir = root
	c.Env = append(append(os.Environ(), "ACME_BACKUP_BIN="+filepath.Join(bin, "backup")), env...)
	out, err := c.CombinedOutput()
	return string(out), err
}

// logPages are the numbered pages of an app's records of type log, as
// JSON, 500 records a page.
func logPages(t *testing.T, c *client, app string) []string {
	t.Helper()
	var pages []string
	for n := 1; ; n++ {
		ls := logsOf(t, c.mustStatus(201, "GET", fmt.Sprintf("/log/log/%d/%s?limit=500", n, app), nil))
		if len(ls) == 0 {
			return pages
		}
		b, _ := json.Marshal(ls)
		pages = append(pages, string(b))
	}
}

// bodies are the logBody values of every record of app.
func logBodies(t *testing.T, c *client, app string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, p := range logPages(t, c, app) {
		var ls []map[string]any
		json.Unmarshal([]byte(p), &ls)
		for _, r := range ls {
			out[r["logBody"].(string)] = true
		}
	}
	return out
}

func noise(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// TestBackupRestoreUnderLoad is issue 47 on `make run`: a platform with
// users (TOTP, passkey, API key), files (plain, gzip-stored, an image, a
// tus upload, a share link, a quota) and 10,000 log records is backed up
// with `make backup` while a load keeps uploading and logging; the platform
// is wiped, a new one started, the backup refused with the new one's
// AUTH_MFA_KEY and restored with `make restore DEV_SECRETS=1`. Then every
// user signs in as before, every file is byte-identical, the link opens,
// the usage is the sum of the records, the log pages are equal, nothing
// written after the cut is there, and `verify` passes; a damaged copy of
// the backup is named by `verify` and refused by `restore`.
func TestBackupRestoreUnderLoad(t *testing.T) {
	testkit.SkipShort(t)
	root, err := stack.Root()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "tools")
	backupTools(t, root, bin)
	ctx := context.Background()

	a := startDevRun(t, root, bin, filepath.Join(tmp, "a"))
	gw := a.st.GatewayURL
	admin := signIn(t, gw, a.sec.AdminEmail, a.sec.AdminPassword)
	const pw = "correct horse battery"
	ids := map[string]string{}
	for _, who := range []string{"totp", "passkey", "apikey", "files", "load"} {
		m := admin.mustStatus(201, "POST", "/users", map[string]any{"email": who + "@example.com", "password": pw, "fullName": who, "edv": "E-" + who})
		ids[who] = m["user"].(map[string]any)["id"].(string)
	}
	totpSecret, _ := enrol(t, signIn(t, gw, "totp@example.com", pw))
	passkey := authenticator.New("http://localhost:8080") // AUTH_WEBAUTHN_ORIGINS' default
	registerPasskey(t, signIn(t, gw, "passkey@example.com", pw), passkey, "laptop")
	kc := signIn(t, gw, "apikey@example.com", pw)
	apiKey := "Bearer " + kc.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "b", "scopes": []string{"files:read"}})["secret"].(string)
	kc.upload("/upload/file", part{field: "file", filename: "k.bin", data: bytes.NewReader(noise(1000))})

	fc := signIn(t, gw, "files@example.com", pw)
	admin.mustStatus(200, "PUT", "/usage/"+ids["files"], map[string]any{"quota": 64 << 20})
	contents := map[string][]byte{} // file id → bytes
	upload := func(c *client, path, name, ctype string, data []byte) string {
		t.Helper()
		r := c.upload(path, part{field: "file", filename: name, contentType: ctype, data: bytes.NewReader(data)})
		if r.status != 201 {
			t.Fatalf("upload %s: %d %s", name, r.status, r.body)
		}
		rec, _ := r.json(t)["file"].(map[string]any)
		if rec == nil {
			rec = r.json(t)["image"].(map[string]any)
		}
		id := rec["id"].(string)
		contents[id] = data
		return id
	}
	plain := upload(fc, "/upload/file", "plain.bin", "application/octet-stream", noise(300<<10))
	text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog; ", 200))
	gz := upload(fc, "/upload/file", "notes.txt", "text/plain", text)
	img := upload(fc, "/upload/image", "a.png", "image/png", testPNG(t, 40, 30))
	tusData := noise(1 << 20)
	tusPath := fc.tusCreate(int64(len(tusData)), "filename "+b64("resumable.bin"))
	r := fc.mustTus(204, "PATCH", tusPath, patchHeaders(0), bytes.NewReader(tusData), int64(len(tusData)))
	contents[r.header.Get("Upload-File-Id")] = tusData
	// What each file downloads as (an image as the service serves it).
	paths := map[string]string{}
	for id := range contents {
		paths[id] = "/download/file/" + id
		if id == img {
			paths[id] = "/images/" + id
		}
		d := fc.raw("GET", paths[id], nil, nil, "")
		if d.status != 200 {
			t.Fatalf("GET %s: %d", paths[id], d.status)
		}
		contents[id] = d.body
	}
	link := fc.mustStatus(201, "POST", "/files/"+plain+"/links", map[string]any{"maxDownloads": 5})
	sharedPath := sharePath(t, gw, link)
	if g := fc.raw("GET", "/download/file/"+gz, map[string]string{"Accept-Encoding": "gzip"}, nil, ""); g.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("the text file is not stored gzip-compressed (Content-Encoding %q)", g.header.Get("Content-Encoding"))
	}

	// 10,000 log records over NATS, as an application sends them.
	nc, err := nats.Connect(a.st.NATSURL, nats.UserInfo("publisher", a.sec.NATSPasswords["publisher"]),
		nats.CustomInboxPrefix(natsconn.InboxPrefix("publisher")), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lc, err := logclient.New(nc, logclient.Options{Prefix: devenv.SubjectPrefix})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10000 {
		lc.Log("SERVER-APP-B", "log", fmt.Sprintf("seed %05d", i), "")
	}
	if err := lc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Minute); listAll(t, admin, "/log/log/1/SERVER-APP-B?limit=500") < 10000; {
		if time.Now().After(deadline) {
			t.Fatal("the 10,000 records were not stored within 3 minutes")
		}
		time.Sleep(time.Second)
	}
	pagesBefore := logPages(t, admin, "SERVER-APP-B")
	usageBefore := fc.mustStatus(200, "GET", "/me/usage", nil)

	// The load: uploads and log records, each with when it began and
	// ended, until stopped.
	type write struct {
		what       string
		start, end time.Time
	}
	var mu sync.Mutex
	var writes []write
	stopLoad := make(chan struct{})
	var loadDone sync.WaitGroup
	lcl := signIn(t, gw, "load@example.com", pw)
	loadDone.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			start := time.Now()
			r := lcl.upload("/upload/file", part{field: "file", filename: fmt.Sprintf("load-%d.bin", i), data: bytes.NewReader(noise(20 << 10))})
			if r.status != 201 {
				t.Errorf("load upload: %d %s", r.status, r.body)
				return
			}
			mu.Lock()
			writes = append(writes, write{what: "file " + r.json(t)["file"].(map[string]any)["id"].(string), start: start, end: time.Now()})
			mu.Unlock()
		}
	})
	loadDone.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			body := fmt.Sprintf("load %06d", i)
			start := time.Now()
			lc.Log("SERVER-APP-A", "log", body, "")
			lc.Flush(ctx)
			mu.Lock()
			writes = append(writes, write{what: "log " + body, start: start, end: time.Now()})
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	})
	time.Sleep(3 * time.Second)
	backupDir := filepath.Join(tmp, "backup")
	out, err := tool(t, root, bin, "devbackup", []string{"DATA_DIR=" + a.dir}, "backup", backupDir)
	if err != nil {
		t.Fatalf("make backup: %v\n%s", err, out)
	}
	t.Logf("make backup:\n%s", out)
	time.Sleep(2 * time.Second)
	close(stopLoad)
	loadDone.Wait()
	// The records the logs service had not stored at the cut are not in
	// the backup; the load's last ones are given time to arrive so that
	// "not in the restore" means "after the cut", not "never stored".
	time.Sleep(2 * time.Second)

	var man struct{ Cut, CutEnd time.Time }
	if b, err := os.ReadFile(filepath.Join(backupDir, "manifest.json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	var before, after []string // writes finished before the cut, begun after its end
	for _, w := range writes {
		switch {
		case w.end.Before(man.Cut) && strings.HasPrefix(w.what, "file "):
			before = append(before, w.what)
		case w.start.After(man.CutEnd):
			after = append(after, w.what)
		}
	}
	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("the load wrote %d things before the cut and %d after its end; want some of each", len(before), len(after))
	}
	t.Logf("load: %d writes, %d uploads finished before the cut, %d writes begun after it (%s .. %s)", len(writes), len(before), len(after), man.Cut.Format(time.RFC3339Nano), man.CutEnd.Format(time.RFC3339Nano))

	// The platform wiped; a new one on a new DATA_DIR, with its own
	// secrets.
	a.stop()
	if err := os.RemoveAll(a.dir); err != nil {
		t.Fatal(err)
	}
	b := startDevRun(t, root, bin, filepath.Join(tmp, "b"))
	gw = b.st.GatewayURL
	if b.sec.MFAKey == a.sec.MFAKey {
		t.Fatal("the new platform has the same AUTH_MFA_KEY")
	}
	out, err = tool(t, root, bin, "devbackup", []string{"DATA_DIR=" + b.dir}, "restore", backupDir)
	if err == nil || !strings.Contains(out, "another AUTH_MFA_KEY") {
		t.Fatalf("make restore with the new platform's AUTH_MFA_KEY: %v\n%s", err, out)
	}
	signIn(t, gw, b.sec.AdminEmail, b.sec.AdminPassword) // untouched
	out, err = tool(t, root, bin, "devbackup", []string{"DATA_DIR=" + b.dir, "DEV_SECRETS=1"}, "restore", backupDir)
	if err != nil {
		t.Fatalf("make restore DEV_SECRETS=1: %v\n%s", err, out)
	}
	t.Logf("make restore:\n%s", out)
	b.readSecrets(t)
	env := devbackupEnv(b)
	// The restore checked the platform against the manifest before the
	// services started again (they then store the new platform's own
	// records still in its stream, so its counts move on); the backup
	// still verifies.
	if !strings.Contains(out, "restored and verified") {
		t.Fatalf("make restore did not check the platform:\n%s", out)
	}
	if out, err := tool(t, root, bin, "backup", env, "verify", backupDir); err != nil || !strings.Contains(out, "agrees with the manifest") {
		t.Fatalf("verify after the restore: %v\n%s", err, out)
	}

	// Every user signs in with the same password; the TOTP user with a
	// fresh code, the passkey user with the passkey; the API key works.
	admin = signIn(t, gw, a.sec.AdminEmail, a.sec.AdminPassword)
	for _, who := range []string{"passkey", "apikey", "files", "load"} {
		signIn(t, gw, who+"@example.com", pw)
	}
	tc, ch := challenge(t, gw, "totp@example.com", pw)
	// The next step's code (the server accepts one step ahead): the restored
	// factor keeps the step of the enrolment's code, which this run may
	// still be in, and a step is never accepted twice.
	tc.mustStatus(200, "POST", "/signin/mfa", map[string]string{"challenge": ch, "code": totpAt(t, totpSecret, stepNow()+1)})
	if _, _, st, m := passkeySignIn(t, gw, passkey); st != 200 {
		t.Fatalf("passkey sign-in after the restore: %d %v", st, m)
	}
	if got := wantKey(t, gw, apiKey, "GET", "/files", nil, 200, ""); len(got["files"].([]any)) != 1 {
		t.Fatalf("GET /files with the API key: %v", got)
	}

	// Every file byte-identical; the share link opens; usage is the sum.
	fc = signIn(t, gw, "files@example.com", pw)
	for id, want := range contents {
		d := fc.raw("GET", paths[id], nil, nil, "")
		if d.status != 200 || !bytes.Equal(d.body, want) {
			t.Errorf("file %s after the restore: %d, %d bytes, want %d identical", id, d.status, len(d.body), len(want))
		}
	}
	if g := fc.raw("GET", "/download/file/"+gz, map[string]string{"Accept-Encoding": "gzip"}, nil, ""); g.header.Get("Content-Encoding") != "gzip" {
		t.Errorf("the gzip-stored file: Content-Encoding %q after the restore", g.header.Get("Content-Encoding"))
	} else if zr, err := gzip.NewReader(bytes.NewReader(g.body)); err != nil {
		t.Error(err)
	} else if got, _ := io.ReadAll(zr); !bytes.Equal(got, text) {
		t.Error("the gzip-stored file does not inflate to its text after the restore")
	}
	if d := newClient(t, gw).raw("GET", sharedPath, nil, nil, ""); d.status != 200 || !bytes.Equal(d.body, contents[plain]) {
		t.Errorf("the share link after the restore: %d", d.status)
	}
	if u := fc.mustStatus(200, "GET", "/me/usage", nil); fmt.Sprint(u) != fmt.Sprint(usageBefore) {
		t.Errorf("usage after the restore %v, before %v", u, usageBefore)
	}
	lu := signIn(t, gw, "load@example.com", pw)
	var sum float64
	listed := map[string]bool{}
	loadFiles := lu.mustStatus(200, "GET", "/files?limit=100", nil)["files"].([]any)
	if len(loadFiles) == 100 {
		t.Fatal("the load user has 100 files or more; the sum below would miss some")
	}
	for _, f := range loadFiles {
		m := f.(map[string]any)
		sum += m["size"].(float64)
		listed["file "+m["id"].(string)] = true
	}
	if u := lu.mustStatus(200, "GET", "/me/usage", nil); u["used"] != sum || u["files"] != float64(len(listed)) {
		t.Errorf("the load user's usage %v, the sum of the restored records %v bytes in %d", u, sum, len(listed))
	}

	// The log pages are equal; nothing written after the cut is there,
	// everything written before it is.
	if got := logPages(t, admin, "SERVER-APP-B"); strings.Join(got, "\n") != strings.Join(pagesBefore, "\n") {
		t.Errorf("the log pages of SERVER-APP-B differ after the restore (%d pages, %d before)", len(got), len(pagesBefore))
	}
	bodies := logBodies(t, admin, "SERVER-APP-A")
	for _, w := range before {
		if !listed[w] {
			t.Errorf("%s, finished before the cut, is not restored", w)
		}
	}
	for _, w := range after {
		if listed[w] || bodies[strings.TrimPrefix(w, "log ")] {
			t.Errorf("%s, begun after the cut, was restored", w)
		}
	}

	// A damaged copy: one object's bytes changed, one collection cut
	// short. verify names both; restore refuses it and changes nothing.
	damaged := filepath.Join(tmp, "damaged")
	if out, err := exec.Command("cp", "-a", backupDir, damaged).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	var obj string
	filepath.WalkDir(filepath.Join(damaged, "objects"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && obj == "" {
			obj = p
		}
		return nil
	})
	objBytes, _ := os.ReadFile(obj)
	objBytes[len(objBytes)/2] ^= 0x40
	os.WriteFile(obj, objBytes, 0o600)
	usersBSON := filepath.Join(damaged, "mongo", "acme", "users.bson")
	ub, _ := os.ReadFile(usersBSON)
	os.WriteFile(usersBSON, ub[:len(ub)/2], 0o600)
	out, err = tool(t, root, bin, "backup", env, "verify", damaged)
	key := strings.TrimPrefix(filepath.ToSlash(obj), filepath.ToSlash(filepath.Join(damaged, "objects", "acme-files"))+"/")
	if err == nil || !strings.Contains(out, "object "+key) || !strings.Contains(out, "collection users") {
		t.Fatalf("verify of the damaged backup (object %s, users cut short): %v\n%s", key, err, out)
	}
	t.Logf("verify of the damaged backup:\n%s", out)
	out, err = tool(t, root, bin, "devbackup", []string{"DATA_DIR=" + b.dir, "REPLACE=1"}, "restore", damaged)
	if err == nil || !strings.Contains(out, "differs from its manifest") {
		t.Fatalf("make restore of the damaged backup: %v\n%s", err, out)
	}
	signIn(t, gw, "files@example.com", pw) // still the restored platform
}

// devbackupEnv is acme-backup's environment for the platform r.
func devbackupEnv(r *devRun) []string {
	return []string{
		"MONGO_URL=" + r.st.MongoURL, "MONGO_DB=" + r.st.MongoDB, "MONGO_USER=" + r.sec.MongoUser, "MONGO_PASSWORD=" + r.sec.MongoPassword,
		"S3_ENDPOINT=" + r.st.S3Endpoint, "S3_BUCKET=" + r.st.S3Bucket, "S3_ACCESS_KEY=" + r.sec.MinIOAccess, "S3_SECRET_KEY=" + r.sec.MinIOSecret,
		"AUTH_MFA_KEY=" + r.sec.MFAKey,
	}
}
