package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/minio/minio-go/v7"
)

// Deleting a user erases their 1,000 files, although the files service is
// killed (SIGKILL) halfway through: the durable user-deleted event is
// delivered again to the restarted service, which finishes the job. The
// administrator follows it at GET /usage/{userId}; another user's file
// stays.
func TestUserErasureSurvivesFilesKill(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"FILES_ERASE_ACK_WAIT": "2s"})
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	ids := map[string]string{}
	for _, u := range []string{"ada@example.com", "bob@example.com"} {
		m := admin.mustStatus(201, "POST", "/users", map[string]any{"email": u, "password": "correct horse battery", "fullName": u, "edv": "E-" + u[:3]})
		ids[u] = m["user"].(map[string]any)["id"].(string)
	}
	adaID := ids["ada@example.com"]
	ada := signIn(t, gw, "ada@example.com", "correct horse battery")
	bob := signIn(t, gw, "bob@example.com", "correct horse battery")

	const n = 1000
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1); i <= n; i = next.Add(1) {
				r := ada.upload("/upload/file", part{field: "file", filename: fmt.Sprintf("f%04d.bin", i), data: bytes.NewReader(bytes.Repeat([]byte{byte(i), 0xff, 0}, 100))})
				if r.status != 201 {
					t.Errorf("upload %d: %d %s", i, r.status, r.body)
					return
				}
			}
		})
	}
	if r := ada.upload("/upload/image", part{field: "file", filename: "a.png", contentType: "image/png", data: bytes.NewReader(testPNG(t, 16, 16))}); r.status != 201 {
		t.Fatalf("image: %d %s", r.status, r.body)
	}
	r := bob.upload("/upload/file", part{field: "file", filename: "bob.txt", data: bytes.NewReader([]byte("bob's own file"))})
	if r.status != 201 {
		t.Fatalf("bob's upload: %d %s", r.status, r.body)
	}
	bobFile := r.json(t)["file"].(map[string]any)["id"].(string)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if u := admin.mustStatus(200, "GET", "/usage/"+adaID, nil); u["files"] != float64(n+1) {
		t.Fatalf("before: %v", u)
	}
	objects := func() int {
		t.Helper()
		k := testkit.Get(t)
		c := 0
		for o := range k.S3.ListObjects(context.Background(), servicesOf(t, p).S3Bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			c++
		}
		return c
	}
	if got := objects(); got != n+2 {
		t.Fatalf("%d objects before, want %d", got, n+2)
	}

	// files counts ada's records; -1 while the files service is away.
	files := func() int {
		st, m, _ := admin.do("GET", "/usage/"+adaID, nil)
		if st != 200 {
			return -1
		}
		return int(m["files"].(float64))
	}
	admin.mustStatus(200, "DELETE", "/users/"+ids["ada@example.com"], nil)
	deadline := time.Now().Add(2 * time.Minute)
	for left := files(); left > n/2; left = files() {
		if time.Now().After(deadline) {
			t.Fatalf("erasure did not get halfway in 2 min: %d left", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.Procs["files"].Kill()
	<-p.Procs["files"].Exited()
	if left := objects(); left <= 1 {
		t.Fatalf("the kill came after the erasure finished (%d objects left); the test proves nothing", left)
	}
	t.Logf("files service killed with %d objects left", objects())
	if _, err := p.Restart(p.Procs["files"]); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(3 * time.Minute)
	for files() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("erasure not complete 3 min after the restart: %d files left", files())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := objects(); got != 1 {
		t.Fatalf("%d objects after the erasure, want bob's only", got)
	}
	if u := admin.mustStatus(200, "GET", "/usage/"+adaID, nil); u["used"] != float64(0) {
		t.Fatalf("after: %v", u)
	}
	if r := bob.raw("GET", "/download/file/"+bobFile, nil, nil, ""); r.status != 200 || string(r.body) != "bob's own file" {
		t.Fatalf("bob's file: %d %q", r.status, r.body)
	}
}
