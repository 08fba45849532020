package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// shareToken is the path of a share link's URL on the gateway.
func sharePath(t *testing.T, gw string, link map[string]any) string {
	t.Helper()
	u, _ := link["url"].(string)
	if !strings.HasPrefix(u, gw+"/s/") {
		t.Fatalf("link url %q", u)
	}
	return strings.TrimPrefix(u, gw)
}

// Delete, share links and quotas through the gateway: what the owner, another
// user, an administrator and somebody without an account each get.
func TestFileLifecycleThroughGateway(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"FILES_QUOTA": "200KiB"})
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	var adaID string
	for _, u := range []string{"ada@example.com", "bob@example.com"} {
		m := admin.mustStatus(201, "POST", "/users", map[string]any{"email": u, "password": "correct horse battery", "fullName": u, "edv": "E-" + u[:3]})
		if u == "ada@example.com" {
			adaID = m["user"].(map[string]any)["id"].(string)
		}
	}
	ada := signIn(t, gw, "ada@example.com", "correct horse battery")
	bob := signIn(t, gw, "bob@example.com", "correct horse battery")
	anon := newClient(t, gw)

	content := append([]byte("%PDF-1.4\n"), bytes.Repeat([]byte{0x00, 0xff, 0x10, 0x80}, 4096)...)
	up := func(c *client, name string, data []byte) map[string]any {
		t.Helper()
		r := c.upload("/upload/file", part{field: "file", filename: name, data: bytes.NewReader(data)})
		if r.status != 201 {
			t.Fatalf("upload %s: %d %s", name, r.status, r.body)
		}
		return r.json(t)["file"].(map[string]any)
	}
	rec := up(ada, "report.pdf", content)
	id := rec["id"].(string)

	t.Run("usage", func(t *testing.T) {
		u := ada.mustStatus(200, "GET", "/me/usage", nil)
		if u["used"] != float64(len(content)) || u["quota"] != float64(200<<10) || u["files"] != float64(1) {
			t.Fatalf("usage %v", u)
		}
		if st, _, _ := anon.do("GET", "/me/usage", nil); st != 401 {
			t.Fatalf("anonymous usage: %d", st)
		}
	})

	var link map[string]any
	t.Run("shareLink", func(t *testing.T) {
		link = ada.mustStatus(201, "POST", "/files/"+id+"/links", map[string]any{"maxDownloads": 3})
		path := sharePath(t, gw, link)
		// Without any session, as the recipient of the link.
		d := anon.raw("GET", path, nil, nil, "")
		if d.status != 200 || !bytes.Equal(d.body, content) {
			t.Fatalf("shared download: %d, %d bytes", d.status, len(d.body))
		}
		disp, params, err := mime.ParseMediaType(d.header.Get("Content-Disposition"))
		if err != nil || disp != "attachment" || params["filename"] != "report.pdf" || d.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("headers %v", d.header)
		}
		rg := anon.raw("GET", path, map[string]string{"Range": "bytes=10-19"}, nil, "")
		if rg.status != 206 || !bytes.Equal(rg.body, content[10:20]) {
			t.Fatalf("range: %d %q", rg.status, rg.body)
		}
		if hd := anon.raw("HEAD", path, nil, nil, ""); hd.status != 200 || hd.header.Get("Content-Length") != fmt.Sprint(len(content)) {
			t.Fatalf("HEAD: %d %v", hd.status, hd.header)
		}
		ls := ada.mustStatus(200, "GET", "/files/"+id+"/links", nil)["links"].([]any)
		if len(ls) != 1 || ls[0].(map[string]any)["downloads"] != float64(2) || ls[0].(map[string]any)["url"] != nil {
			t.Fatalf("links %v", ls)
		}
		// The third download is the last; then 410.
		if d := anon.raw("GET", path, nil, nil, ""); d.status != 200 {
			t.Fatalf("third download: %d", d.status)
		}
		if g := anon.raw("GET", path, nil, nil, ""); g.status != 410 || g.json(t)["code"] != "link_exhausted" {
			t.Fatalf("exhausted: %d %s", g.status, g.body)
		}
		if hd := anon.raw("HEAD", path, nil, nil, ""); hd.status != 410 {
			t.Fatalf("HEAD exhausted: %d", hd.status)
		}
	})
	t.Run("shareLinkBadInput", func(t *testing.T) {
		for body, code := range map[string]string{
			`{"expiresAt":"2001-01-01T00:00:00Z"}`: "invalid_expires_at",
			`{"maxDownloads":0}`:                   "invalid_max_downloads",
			`{"maxDownloads":"3"}`:                 "invalid_type",
			`{"nope":1}`:                           "unknown_field",
			`{"maxDownloads":`:                     "invalid_json",
		} {
			r := ada.raw("POST", "/files/"+id+"/links", nil, strings.NewReader(body), "application/json")
			if r.status != 400 || r.json(t)["code"] != code || r.json(t)["err"] == nil {
				t.Errorf("%s: %d %s, want 400 %s", body, r.status, r.body, code)
			}
		}
		if r := ada.raw("POST", "/files/"+id+"/links", nil, strings.NewReader(`{}`), "text/plain"); r.status != 415 {
			t.Errorf("text/plain: %d %s", r.status, r.body)
		}
		if r := ada.raw("POST", "/files/"+id+"/links", nil, strings.NewReader(`{"x":"`+strings.Repeat("y", 8<<10)+`"}`), "application/json"); r.status != 413 {
			t.Errorf("large body: %d %s", r.status, r.body)
		}
		if r := anon.raw("GET", "/s/not-a-token", nil, nil, ""); r.status != 404 || r.json(t)["code"] != "link_not_found" {
			t.Errorf("unknown token: %d %s", r.status, r.body)
		}
		// Another user sees no file at all.
		for _, m := range []string{"GET", "POST"} {
			if r := bob.raw(m, "/files/"+id+"/links", nil, nil, ""); r.status != 404 || r.json(t)["code"] != "file_not_found" {
				t.Errorf("bob %s links: %d %s", m, r.status, r.body)
			}
		}
		if r := bob.raw("DELETE", "/files/"+id+"/links/"+link["id"].(string), nil, nil, ""); r.status != 404 {
			t.Errorf("bob revokes: %d %s", r.status, r.body)
		}
		if r := anon.raw("POST", "/files/"+id+"/links", nil, nil, ""); r.status != 401 {
			t.Errorf("anonymous create: %d %s", r.status, r.body)
		}
	})
	t.Run("expiredAndRevoked", func(t *testing.T) {
		exp := admin.mustStatus(201, "POST", "/files/"+id+"/links", map[string]any{"expiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
		kept := ada.mustStatus(201, "POST", "/files/"+id+"/links", nil)
		// Age the first link in the database rather than wait an hour.
		servers := servicesOf(t, p)
		mc, err := mongo.Connect(options.Client().ApplyURI(servers.MongoURL))
		if err != nil {
			t.Fatal(err)
		}
		defer mc.Disconnect(context.Background())
		if _, err := mc.Database(servers.MongoDB).Collection("file_links").UpdateOne(context.Background(),
			bson.D{{Key: "_id", Value: exp["id"]}}, bson.D{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: time.Now().Add(-time.Minute)}}}}); err != nil {
			t.Fatal(err)
		}
		if r := anon.raw("GET", sharePath(t, gw, exp), nil, nil, ""); r.status != 410 || r.json(t)["code"] != "link_expired" {
			t.Fatalf("expired: %d %s", r.status, r.body)
		}
		if r := ada.raw("DELETE", "/files/"+id+"/links/"+strings.Repeat("0", 32), nil, nil, ""); r.status != 404 || r.json(t)["code"] != "link_not_found" {
			t.Fatalf("unknown link: %d %s", r.status, r.body)
		}
		if st, _, _ := ada.do("DELETE", "/files/"+id+"/links/"+exp["id"].(string), nil); st != 204 {
			t.Fatalf("revoke: %d", st)
		}
		if r := anon.raw("GET", sharePath(t, gw, exp), nil, nil, ""); r.status != 404 {
			t.Fatalf("revoked: %d %s", r.status, r.body)
		}
		link = kept
	})
	t.Run("quota", func(t *testing.T) {
		u := admin.mustStatus(200, "GET", "/usage/"+adaID, nil)
		if u["userId"] != adaID || u["used"] != float64(len(content)) || u["files"] != float64(1) || u["quota"] != float64(200<<10) {
			t.Fatalf("admin reads ada's usage: %v", u)
		}
		if st, m, _ := ada.do("GET", "/usage/"+adaID, nil); st != 403 || m["code"] != "forbidden" {
			t.Fatalf("user reads /usage: %d %v", st, m)
		}
		if st, m, _ := admin.do("GET", "/usage/ada", nil); st != 400 || m["code"] != "invalid_user_id" {
			t.Fatalf("bad user id: %d %v", st, m)
		}
		for body, code := range map[string]string{`{}`: "missing_quota", `{"quota":-5}`: "invalid_quota", `{"quota":"5"}`: "invalid_quota", `{"quota":1,"x":2}`: "unknown_field"} {
			if r := admin.raw("PUT", "/usage/"+adaID, nil, strings.NewReader(body), "application/json"); r.status != 400 || r.json(t)["code"] != code {
				t.Errorf("%s: %d %s, want 400 %s", body, r.status, r.body, code)
			}
		}
		if r := admin.raw("PUT", "/usage/"+adaID, nil, strings.NewReader(`{"quota":1}`), "text/plain"); r.status != 415 {
			t.Errorf("text/plain: %d %s", r.status, r.body)
		}
		if r := admin.raw("PUT", "/usage/"+adaID, nil, strings.NewReader(`{"quota":"`+strings.Repeat("9", 8<<10)+`"}`), "application/json"); r.status != 413 {
			t.Errorf("large body: %d %s", r.status, r.body)
		}
		u = admin.mustStatus(200, "PUT", "/usage/"+adaID, map[string]any{"quota": len(content) + 1000})
		if u["quota"] != float64(len(content)+1000) {
			t.Fatalf("set quota: %v", u)
		}
		r := ada.upload("/upload/file", part{field: "file", filename: "more.pdf", data: bytes.NewReader(content)})
		if r.status != 413 || r.json(t)["code"] != "quota_exceeded" {
			t.Fatalf("over quota: %d %s", r.status, r.body)
		}
		// Streamed without a length: stopped once past the quota.
		r = ada.upload("/upload/file", part{field: "file", filename: "stream.bin", data: io.LimitReader(rand.NewChaCha8([32]byte{3}), 64<<20)})
		if r.status != 413 || r.json(t)["code"] != "quota_exceeded" {
			t.Fatalf("streamed over quota: %d %.200s", r.status, r.body)
		}
		if u := ada.mustStatus(200, "GET", "/me/usage", nil); u["files"] != float64(1) {
			t.Fatalf("usage after refusals: %v", u)
		}
		u = admin.mustStatus(200, "PUT", "/usage/"+adaID, map[string]any{"quota": nil})
		if u["quota"] != float64(200<<10) {
			t.Fatalf("back to the default: %v", u)
		}
		// Several uploads at once never pass the quota together.
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				ada.upload("/upload/file", part{field: "file", filename: fmt.Sprintf("c%d.bin", i), data: bytes.NewReader(bytes.Repeat([]byte{byte(i), 0xfe, 0x01}, 20<<10))})
			})
		}
		wg.Wait()
		if u := ada.mustStatus(200, "GET", "/me/usage", nil); u["used"].(float64) > 200<<10 {
			t.Fatalf("concurrent uploads passed the quota: %v", u)
		}
		for _, f := range ada.mustStatus(200, "GET", "/files?limit=100", nil)["files"].([]any) {
			if fid := f.(map[string]any)["id"].(string); fid != id {
				if st, _, _ := ada.do("DELETE", "/files/"+fid, nil); st != 204 {
					t.Fatalf("delete %s: %d", fid, st)
				}
			}
		}
	})
	t.Run("delete", func(t *testing.T) {
		if r := bob.raw("DELETE", "/files/"+id, nil, nil, ""); r.status != 404 || r.json(t)["code"] != "file_not_found" {
			t.Fatalf("bob deletes: %d %s", r.status, r.body)
		}
		if st, _, _ := ada.do("DELETE", "/files/"+id, nil); st != 204 {
			t.Fatalf("delete: %d", st)
		}
		for _, path := range []string{"/retrieve/file/" + id, "/download/file/" + id} {
			if r := ada.raw("GET", path, nil, nil, ""); r.status != 404 {
				t.Fatalf("%s after delete: %d", path, r.status)
			}
		}
		if r := ada.raw("DELETE", "/files/"+id, nil, nil, ""); r.status != 404 {
			t.Fatalf("delete again: %d", r.status)
		}
		if r := anon.raw("GET", sharePath(t, gw, link), nil, nil, ""); r.status != 404 {
			t.Fatalf("link after delete: %d %s", r.status, r.body)
		}
		// An administrator deletes anybody's image; its public URL is gone.
		r := ada.upload("/upload/image", part{field: "file", filename: "a.png", contentType: "image/png", data: bytes.NewReader(testPNG(t, 20, 20))})
		if r.status != 201 {
			t.Fatalf("image: %d %s", r.status, r.body)
		}
		iid := r.json(t)["image"].(map[string]any)["id"].(string)
		if st, _, _ := admin.do("DELETE", "/files/"+iid, nil); st != 204 {
			t.Fatalf("admin deletes image: %d", st)
		}
		if r := anon.raw("GET", "/images/"+iid, nil, nil, ""); r.status != 404 {
			t.Fatalf("image after delete: %d", r.status)
		}
		if u := ada.mustStatus(200, "GET", "/me/usage", nil); u["used"] != float64(0) || u["files"] != float64(0) {
			t.Fatalf("usage after deletes: %v", u)
		}
	})
}
