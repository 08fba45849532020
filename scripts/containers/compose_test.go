//go:build containers

package containers

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// TestCompose is `docker compose up` as a user runs it: images built from
// the repository's Dockerfiles, the stack started and waited for healthy,
// then used through the gateway's published port only; the containers,
// networks and credentials checked; then down and up again, and everything
// written before is still there.
func TestCompose(t *testing.T) {
	s := newStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	took := s.Up(ctx)
	t.Logf("up -d --wait: %s", took.Round(time.Second))
	report("docker compose up -d --wait, first start", took.Round(time.Second).String())

	w := walkThrough(t, s)
	checkContainers(t, ctx, s)
	checkNetworks(t, ctx, s)
	checkNATSPermissions(t, ctx, s)
	checkMongoLogin(t, ctx, s)
	checkS3User(t, ctx, s)

	// down (volumes kept) and up again: what was written is still there.
	t0 := time.Now()
	s.MustCompose(ctx, "down", "--timeout", "20")
	if cs, err := s.Containers(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("after down: %d containers (%v)", len(cs), err)
	}
	took = s.Up(ctx)
	report("docker compose down, then up -d --wait", time.Since(t0).Round(time.Second).String())
	w.checkKept(t, s)
}

// written is what the walk-through stored, to find again after a restart.
type written struct {
	email, password string
	fileID          string
	fileData        []byte
	imagePath       string
	postBody        string
	natsBody        string
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// walkThrough is the README's curl walk-through, files, images and logs,
// through the gateway's published port.
func walkThrough(t *testing.T, s *Stack) written {
	t.Helper()
	gw := s.GatewayURL
	w := written{email: "ada@example.com", password: "new secret phrase"}

	admin := NewClient(gw)
	must(t, admin.SignIn(s.Env["ADMIN_EMAIL"], s.Env["ADMIN_PASSWORD"]))
	_, err := admin.Expect(201, "POST", "/users", map[string]string{
		"email": w.email, "password": "correct horse battery", "fullName": "Ada Lovelace", "edv": "E-1",
	})
	must(t, err)

	ada := NewClient(gw)
	must(t, ada.SignIn(w.email, "correct horse battery"))
	me, err := ada.Expect(200, "GET", "/me", nil)
	must(t, err)
	if m := me.JSON(); m == nil || !strings.Contains(string(me.Body), w.email) {
		t.Fatalf("GET /me: %s", me)
	}
	// A second session of the same user, which the password change ends.
	other := NewClient(gw)
	must(t, other.SignIn(w.email, "correct horse battery"))
	_, err = ada.Expect(200, "PATCH", "/me", map[string]any{
		"fullName": "Augusta Ada King",
		"password": map[string]string{"old": "correct horse battery", "new": w.password},
	})
	must(t, err)
	me, err = ada.Expect(200, "GET", "/me", nil)
	must(t, err)
	if !strings.Contains(string(me.Body), "Augusta Ada King") {
		t.Fatalf("GET /me after PATCH: %s", me)
	}
	if r, err := other.Do("GET", "/me", nil, nil); err != nil || r.Status != 401 {
		t.Fatalf("the other session after a password change: %v %v, want 401", r, err)
	}
	// Sign out; the old cookie is refused from then on.
	cookie := sessionCookie(ada)
	_, err = ada.Expect(200, "DELETE", "/signout", nil)
	must(t, err)
	r, err := NewClient(gw).Do("GET", "/me", nil, map[string]string{"Cookie": "sessionId=" + cookie})
	must(t, err)
	if r.Status != 401 || r.JSON()["code"] != "invalid_session" {
		t.Fatalf("old cookie after sign-out: %s, want 401 invalid_session", r)
	}
	must(t, ada.SignIn(w.email, w.password))

	// A file: upload, record, download, and gzip on the wire.
	w.fileData = bytes.Repeat([]byte("ACME compose test line\n"), 4000)
	up, err := ada.Upload("/upload/file", "notes.txt", "text/plain", w.fileData, `{"source":"compose test"}`)
	must(t, err)
	if up.Status != 201 {
		t.Fatalf("upload: %s", up)
	}
	var uploaded struct{ File struct{ ID string } }
	must(t, json.Unmarshal(up.Body, &uploaded))
	w.fileID = uploaded.File.ID
	_, err = ada.Expect(200, "GET", "/retrieve/file/"+w.fileID, nil)
	must(t, err)
	dl, err := ada.Expect(200, "GET", "/download/file/"+w.fileID, nil)
	must(t, err)
	if !bytes.Equal(dl.Body, w.fileData) {
		t.Fatalf("download: %d bytes, want the %d uploaded", len(dl.Body), len(w.fileData))
	}
	gz, err := ada.Do("GET", "/download/file/"+w.fileID, nil, map[string]string{"Accept-Encoding": "gzip"})
	must(t, err)
	if gz.Status != 200 || gz.Header.Get("Content-Encoding") != "gzip" || len(gz.Body) >= len(w.fileData) {
		t.Fatalf("gzip download: %d, Content-Encoding %q, %d bytes", gz.Status, gz.Header.Get("Content-Encoding"), len(gz.Body))
	}
	checkHandoff(t, context.Background(), s)
	zr, err := gzip.NewReader(bytes.NewReader(gz.Body))
	must(t, err)
	plain, err := io.ReadAll(zr)
	must(t, err)
	if !bytes.Equal(plain, w.fileData) {
		t.Fatal("gzip download does not decompress to the upload")
	}
	report("gzip download of a 92 KB text file", fmt.Sprintf("%d bytes on the wire", len(gz.Body)))

	// An image, fetched by its public URL without a cookie.
	img, err := ada.Upload("/upload/image", "avatar.png", "image/png", testPNG(64, 48), "")
	must(t, err)
	if img.Status != 201 {
		t.Fatalf("image upload: %s", img)
	}
	var imgResp struct{ Image struct{ URL string } }
	must(t, json.Unmarshal(img.Body, &imgResp))
	w.imagePath = strings.TrimPrefix(imgResp.Image.URL, gw)
	if !strings.HasPrefix(w.imagePath, "/images/") {
		t.Fatalf("image URL %q is not under the gateway's /images/", imgResp.Image.URL)
	}
	pub, err := NewClient(gw).Expect(200, "GET", w.imagePath, nil)
	must(t, err)
	if pub.Header.Get("Content-Type") != "image/png" || pub.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("public image: %v", pub.Header)
	}

	// Logs: POST /log, and a record published over NATS by a client
	// container on the bus network with the publisher's login.
	w.postBody = "compose test POST " + randomID(4)
	_, err = admin.Expect(201, "POST", "/log", map[string]string{"app": "SERVER-APP-A", "logBody": w.postBody, "type": "log"})
	must(t, err)
	waitLog(t, admin, "/log/log/1/SERVER-APP-A", w.postBody)
	w.natsBody = "compose test NATS " + randomID(4)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := s.RunProbe(ctx, "bus", map[string]string{"NATS_URL": "nats://publisher:" + s.Env["NATS_PUBLISHER_PASSWORD"] + "@nats:4222"},
		"publish", "-app", "SERVER-APP-B", "-type", "error", w.natsBody)
	if err != nil {
		t.Fatalf("publisher container: %v\n%s", err, out)
	}
	waitLog(t, admin, "/log/error/1/SERVER-APP-B", w.natsBody)
	return w
}

// checkKept: after down and up, the user, the file, the image and both
// log records are still there (named volumes).
func (w written) checkKept(t *testing.T, s *Stack) {
	t.Helper()
	ada := NewClient(s.GatewayURL)
	must(t, ada.SignIn(w.email, w.password))
	dl, err := ada.Expect(200, "GET", "/download/file/"+w.fileID, nil)
	must(t, err)
	if !bytes.Equal(dl.Body, w.fileData) {
		t.Fatal("the file changed across down/up")
	}
	_, err = NewClient(s.GatewayURL).Expect(200, "GET", w.imagePath, nil)
	must(t, err)
	admin := NewClient(s.GatewayURL)
	must(t, admin.SignIn(s.Env["ADMIN_EMAIL"], s.Env["ADMIN_PASSWORD"]))
	waitLog(t, admin, "/log/log/1/SERVER-APP-A", w.postBody)
	waitLog(t, admin, "/log/error/1/SERVER-APP-B", w.natsBody)
}

func sessionCookie(c *Client) string {
	u, _ := url.Parse(c.Base + "/")
	for _, ck := range c.HTTP.Jar.Cookies(u) {
		if ck.Name == "sessionId" {
			return ck.Value
		}
	}
	return ""
}

// waitLog polls a log listing until a record with body shows (ingestion
// over NATS is asynchronous), for at most 30 s.
func waitLog(t *testing.T, c *Client, path, body string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := c.Do("GET", path, nil, nil)
		if err == nil && r.Status == 201 && strings.Contains(string(r.Body), body) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s never listed %q: %v %v", path, body, r, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// checkContainers: every container runs as a user other than root (the
// configured user and the process's real uid, read from /proc on the
// host), and every one with a healthcheck is healthy.
func checkContainers(t *testing.T, ctx context.Context, s *Stack) {
	t.Helper()
	cs, err := s.Containers(ctx)
	must(t, err)
	running := 0
	for _, c := range cs {
		if !c.Running {
			continue
		}
		running++
		if c.User == "" || c.User == "root" || strings.HasPrefix(c.User, "0:") || c.User == "0" {
			t.Errorf("%s: configured user %q", c.Name, c.User)
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Pid))
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		uid := ""
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uid = strings.Join(f[1:], " ")
			}
		}
		if uid == "" || strings.Contains(" "+uid+" ", " 0 ") {
			t.Errorf("%s: process uids %q include root", c.Name, uid)
		}
		if c.Health != "healthy" {
			t.Errorf("%s: health %q", c.Name, c.Health)
		}
		t.Logf("%-32s user %-12s uid %-24s %s", c.Name, c.User, uid, c.Health)
	}
	if running < 7 {
		t.Errorf("%d containers running, want the 7 services", running)
	}
	report("containers running as non-root and healthy", fmt.Sprintf("%d of %d", running, running))
}

// checkNetworks: the gateway is on the services, bus and objects networks
// only (objects: it fetches handed-off downloads from MinIO);
// from the services network (the one with the published port) MongoDB,
// MinIO and NATS are not reachable, while the same probe reaches them from
// their own networks.
func checkNetworks(t *testing.T, ctx context.Context, s *Stack) {
	t.Helper()
	gws, err := s.Containers(ctx, "gateway")
	must(t, err)
	for _, g := range gws {
		if len(g.IPs) != 3 || g.IPs["services"] == "" || g.IPs["bus"] == "" || g.IPs["objects"] == "" {
			t.Errorf("gateway networks %v, want services, bus and objects", g.IPs)
		}
	}
	probe := func(network string, addrs ...string) string {
		out, err := s.RunProbe(ctx, network, nil, append([]string{"dial"}, addrs...)...)
		if err != nil {
			t.Fatalf("dial from %s: %v\n%s", network, err, out)
		}
		return out
	}
	out := probe("services", "mongo:27017", "minio:9000", "nats:4222", "auth:8081", "gateway:8080")
	for _, closed := range []string{"mongo:27017", "minio:9000", "nats:4222"} {
		if !strings.Contains(out, closed+" closed") {
			t.Errorf("from the services network %s is reachable:\n%s", closed, out)
		}
	}
	for _, open := range []string{"auth:8081", "gateway:8080"} {
		if !strings.Contains(out, open+" open") {
			t.Errorf("from the services network %s is not reachable (the probe itself is wrong):\n%s", open, out)
		}
	}
	for net, addr := range map[string]string{"data": "mongo:27017", "objects": "minio:9000", "bus": "nats:4222"} {
		if o := probe(net, addr); !strings.Contains(o, addr+" open") {
			t.Errorf("from %s, %s is not reachable: %s", net, addr, o)
		}
	}
	report("mongo, minio, nats reachable from the gateway's public network", "no (probed from a container)")
}

// checkNATSPermissions runs the permission table against the running NATS
// with every service's real password.
func checkNATSPermissions(t *testing.T, ctx context.Context, s *Stack) {
	t.Helper()
	env := map[string]string{"NATS_ADDR": "nats://nats:4222"}
	for _, u := range []string{"AUTH", "FILES", "LOGS", "GATEWAY", "PUBLISHER"} {
		env["NATS_"+u+"_PASSWORD"] = s.Env["NATS_"+u+"_PASSWORD"]
	}
	out, err := s.RunProbe(ctx, "bus", env, "nats-perms")
	if err != nil {
		t.Fatalf("NATS permissions: %v\n%s", err, out)
	}
	t.Logf("NATS permissions in the running stack:\n%s", out)
	report("NATS permission checks with the real credentials", fmt.Sprintf("%d passed", strings.Count(out, "\n")))
}

// checkMongoLogin: the database accepts the services' login and refuses a
// client without one or with a wrong password.
func checkMongoLogin(t *testing.T, ctx context.Context, s *Stack) {
	t.Helper()
	out, err := s.RunProbe(ctx, "data", map[string]string{
		"MONGO_ADDR": "mongo:27017", "MONGO_USER": "acme", "MONGO_PASSWORD": s.Env["MONGO_APP_PASSWORD"],
	}, "mongo-auth")
	if err != nil {
		t.Fatalf("MongoDB login: %v\n%s", err, out)
	}
	t.Logf("MongoDB login:\n%s", out)
}

// checkS3User: the files service's MinIO user (made by the files-setup
// job) may use its bucket and nothing else.
func checkS3User(t *testing.T, ctx context.Context, s *Stack) {
	t.Helper()
	out, err := s.RunProbe(ctx, "objects", map[string]string{
		"S3_ENDPOINT": "minio:9000", "S3_BUCKET": "acme-files",
		"S3_ACCESS_KEY": s.Env["S3_ACCESS_KEY"], "S3_SECRET_KEY": s.Env["S3_SECRET_KEY"],
	}, "s3-limits")
	if err != nil {
		t.Fatalf("the files service's MinIO user: %v\n%s", err, out)
	}
	t.Logf("the files service's MinIO user:\n%s", out)
	report("files' MinIO user: own bucket only", "yes (put/stat/remove allowed; sees no other bucket; new bucket, other bucket refused)")
}

func testPNG(w, h int) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.NRGBA{uint8(x * 255 / w), uint8(y * 255 / h), 128, 255})
		}
	}
	var buf bytes.Buffer
	_ = png.Encode(&buf, img)
	return buf.Bytes()
}

// checkHandoff: the gateway fetched the stored bytes of the downloads so far
// from MinIO itself (docs/files.md, "Handoff"). Every download sent as
// stored is handed off to it, and a fetch that fails (MinIO unreachable from
// the gateway's networks) is logged before the files service is asked for
// the bytes instead.
func checkHandoff(t *testing.T, ctx context.Context, s *Stack) {
	t.Helper()
	gws, err := s.Containers(ctx, "gateway")
	must(t, err)
	for _, g := range gws {
		lines, err := Logs(ctx, g.ID, time.Time{})
		must(t, err)
		for _, l := range lines {
			if strings.Contains(l.Text, "handoff: object not fetched") {
				t.Errorf("the gateway could not fetch a handed-off object: %s", l.Text)
			}
		}
	}
	report("downloads sent by the gateway from MinIO (handoff)", "no fetch fell back to the files service")
}
