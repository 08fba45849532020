package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/files/internal/files"
	"github.com/acme/platform/services/files/internal/s3store"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// sendJSON sends a JSON body (raw as given) with a JSON content type.
func (h *harness) sendJSON(method, path, token, raw string) *response {
	h.t.Helper()
	return h.do(method, path, token, strings.NewReader(raw), map[string]string{"Content-Type": "application/json"})
}

func TestDelete(t *testing.T) {
	h := start(t, nil, hooks{})
	alice, bob := h.user("alice"), h.user("bob")
	f := h.uploadFile(alice, "a.txt", text)
	id := f["id"].(string)
	img := h.upload("/upload/image", alice, fileField("p.png", pngBytes(t, solid(8, 8, colorBlack{}))))
	wantStatus(t, img, http.StatusCreated)
	imgID := img.json(t)["image"].(map[string]any)["id"].(string)

	t.Run("delete404", func(t *testing.T) {
		wantError(t, h.do("DELETE", "/files/"+id, bob, nil, nil), http.StatusNotFound, "file_not_found")
		wantError(t, h.do("DELETE", "/files/not-an-id", alice, nil, nil), http.StatusNotFound, "file_not_found")
		wantError(t, h.do("DELETE", "/files/"+files.NewID(), alice, nil, nil), http.StatusNotFound, "file_not_found")
		wantError(t, h.do("DELETE", "/files/"+id, h.anonymous(), nil, nil), http.StatusUnauthorized, "unauthenticated")
		wantStatus(t, h.get("/download/file/"+id, alice, nil), http.StatusOK)
	})
	t.Run("readAllIsNotDelete404", func(t *testing.T) {
		h2 := start(t, map[string]string{"FILES_READ_ALL": "true"}, hooks{})
		g := h2.uploadFile(h2.user("alice"), "a.txt", text)
		wantStatus(t, h2.get("/retrieve/file/"+g["id"].(string), h2.user("bob"), nil), http.StatusOK)
		wantError(t, h2.do("DELETE", "/files/"+g["id"].(string), h2.user("bob"), nil, nil), http.StatusNotFound, "file_not_found")
	})
	t.Run("delete204", func(t *testing.T) {
		r := h.do("DELETE", "/files/"+id, alice, nil, nil)
		wantStatus(t, r, http.StatusNoContent)
		wantError(t, h.get("/retrieve/file/"+id, alice, nil), http.StatusNotFound, "file_not_found")
		wantError(t, h.get("/download/file/"+id, alice, nil), http.StatusNotFound, "file_not_found")
		wantError(t, h.do("DELETE", "/files/"+id, alice, nil, nil), http.StatusNotFound, "file_not_found")
	})
	t.Run("adminDeletesImage204", func(t *testing.T) {
		wantStatus(t, h.get("/images/"+imgID, "", nil), http.StatusUnauthorized) // no token at all
		wantStatus(t, h.get("/images/"+imgID, h.anonymous(), nil), http.StatusOK)
		wantStatus(t, h.do("DELETE", "/files/"+imgID, h.admin("root"), nil, nil), http.StatusNoContent)
		wantError(t, h.get("/images/"+imgID, h.anonymous(), nil), http.StatusNotFound, "file_not_found")
	})
	h.assertNothingStored(t)
}

// A delete while MinIO is away still answers 204 (the record is gone);
// the object, now without a record, is removed by the sweeper.
func TestDeleteObjectLeftToSweeper(t *testing.T) {
	dead, err := s3store.New(s3store.Options{Endpoint: deadEndpoint(t), AccessKey: "x", SecretKey: "yyyyyyyy", Bucket: "dead-bucket", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	sw := &switchable{dead: dead}
	h := start(t, map[string]string{"FILES_SWEEP_INTERVAL": "200ms", "FILES_SWEEP_AGE": "1s"},
		hooks{objects: func(o files.ObjectStore) files.ObjectStore { sw.live = o; return sw }})
	tok := h.user("u")
	f := h.uploadFile(tok, "a.txt", text)
	sw.broken.Store(true)
	wantStatus(t, h.do("DELETE", "/files/"+f["id"].(string), tok, nil, nil), http.StatusNoContent)
	if objs := h.objects(); len(objs) != 1 {
		t.Fatalf("objects %v: the removal was meant to fail", objs)
	}
	wantError(t, h.get("/download/file/"+f["id"].(string), tok, nil), http.StatusNotFound, "file_not_found")
	sw.broken.Store(false)
	h.assertNothingStored(t)
}

func TestShareLinks(t *testing.T) {
	h := start(t, nil, hooks{})
	alice, bob := h.user("alice"), h.user("bob")
	f := h.uploadFile(alice, "report <1>.txt", text)
	id := f["id"].(string)

	var link map[string]any
	t.Run("create201", func(t *testing.T) {
		r := h.do("POST", "/files/"+id+"/links", alice, nil, nil)
		wantStatus(t, r, http.StatusCreated)
		link = r.json(t)
		url, _ := link["url"].(string)
		token := strings.TrimPrefix(url, "https://files.example.test/s/")
		if !strings.HasPrefix(url, "https://files.example.test/s/") || !files.ValidToken(token) {
			t.Fatalf("url %q", url)
		}
		exp, err := time.Parse(time.RFC3339, link["expiresAt"].(string))
		if err != nil || exp.Sub(time.Now()) < 7*24*time.Hour-time.Minute || exp.Sub(time.Now()) > 7*24*time.Hour {
			t.Fatalf("expiresAt %v (%v), want 7 days ahead", link["expiresAt"], err)
		}
		// Only the token's hash is stored.
		raw, _ := bson.Marshal(h.linkDoc(t, link["id"].(string)))
		if bytes.Contains(raw, []byte(token)) {
			t.Fatal("the token is stored in clear")
		}
		sum := sha256.Sum256([]byte(token))
		if h.linkDoc(t, link["id"].(string))["tokenHash"] != fmt.Sprintf("%x", sum) {
			t.Fatal("tokenHash is not the token's SHA-256")
		}
	})
	token := strings.TrimPrefix(link["url"].(string), "https://files.example.test/s/")

	t.Run("shared200", func(t *testing.T) {
		for _, tok := range []string{"", h.anonymous(), bob} {
			r := h.get("/s/"+token, tok, nil)
			if tok == "" {
				wantStatus(t, r, http.StatusUnauthorized) // only through the gateway
				continue
			}
			wantStatus(t, r, http.StatusOK)
			if !bytes.Equal(r.body, text) {
				t.Fatalf("body differs (%d bytes)", len(r.body))
			}
			if cd := r.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment;") {
				t.Fatalf("Content-Disposition %q", cd)
			}
			if r.Header.Get("X-Content-Type-Options") != "nosniff" || r.Header.Get("Cache-Control") != "private, no-store" {
				t.Fatalf("headers %v", r.Header)
			}
		}
	})
	t.Run("shared206", func(t *testing.T) {
		bin := bytes.Repeat([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xff}, 100) // stored as is
		g := h.uploadFile(alice, "b.bin", bin)
		r := h.do("POST", "/files/"+g["id"].(string)+"/links", alice, nil, nil)
		wantStatus(t, r, http.StatusCreated)
		u := strings.TrimPrefix(r.json(t)["url"].(string), "https://files.example.test")
		r = h.get(u, h.anonymous(), map[string]string{"Range": "bytes=4-8"})
		wantStatus(t, r, http.StatusPartialContent)
		if !bytes.Equal(r.body, bin[4:9]) || r.Header.Get("Content-Range") != fmt.Sprintf("bytes 4-8/%d", len(bin)) {
			t.Fatalf("%q %v", r.body, r.Header)
		}
		wantStatus(t, h.do("DELETE", "/files/"+g["id"].(string), alice, nil, nil), http.StatusNoContent)
	})
	t.Run("shared404", func(t *testing.T) {
		wantError(t, h.get("/s/nope", h.anonymous(), nil), http.StatusNotFound, "link_not_found")
		wantError(t, h.get("/s/"+strings.Repeat("A", 43), h.anonymous(), nil), http.StatusNotFound, "link_not_found")
	})
	t.Run("list200", func(t *testing.T) {
		for _, tok := range []string{alice, h.admin("root")} {
			r := h.get("/files/"+id+"/links", tok, nil)
			wantStatus(t, r, http.StatusOK)
			ls := r.json(t)["links"].([]any)
			if len(ls) != 1 || ls[0].(map[string]any)["id"] != link["id"] || ls[0].(map[string]any)["url"] != nil {
				t.Fatalf("links %v", ls)
			}
		}
	})
	t.Run("others404", func(t *testing.T) {
		wantError(t, h.get("/files/"+id+"/links", bob, nil), http.StatusNotFound, "file_not_found")
		wantError(t, h.do("POST", "/files/"+id+"/links", bob, nil, nil), http.StatusNotFound, "file_not_found")
		wantError(t, h.do("DELETE", "/files/"+id+"/links/"+link["id"].(string), bob, nil, nil), http.StatusNotFound, "file_not_found")
		wantError(t, h.do("POST", "/files/xyz/links", alice, nil, nil), http.StatusNotFound, "file_not_found")
	})
	t.Run("create400", func(t *testing.T) {
		for name, c := range map[string]struct{ body, code string }{
			"past":        {`{"expiresAt":"2001-01-01T00:00:00Z"}`, "invalid_expires_at"},
			"tooFar":      {fmt.Sprintf(`{"expiresAt":%q}`, time.Now().Add(31*24*time.Hour).Format(time.RFC3339)), "invalid_expires_at"},
			"notDate":     {`{"expiresAt":"tomorrow"}`, "invalid_json"},
			"zeroLimit":   {`{"maxDownloads":0}`, "invalid_max_downloads"},
			"fraction":    {`{"maxDownloads":1.5}`, "invalid_type"},
			"unknownKey":  {`{"expires":"2030-01-01T00:00:00Z"}`, "unknown_field"},
			"notAnObject": {`[]`, "invalid_json"},
		} {
			r := h.sendJSON("POST", "/files/"+id+"/links", alice, c.body)
			if r.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %d %s", name, r.StatusCode, r.body)
				continue
			}
			if m := r.json(t); m["code"] != c.code || m["err"] == nil {
				t.Errorf("%s: %s", name, r.body)
			}
		}
		wantError(t, h.do("POST", "/files/"+id+"/links", alice, strings.NewReader(`{}`), map[string]string{"Content-Type": "text/plain"}), http.StatusUnsupportedMediaType, "unsupported_media_type")
		wantError(t, h.sendJSON("POST", "/files/"+id+"/links", alice, `{"maxDownloads":1,"x":"`+strings.Repeat("y", 5000)+`"}`), http.StatusRequestEntityTooLarge, "body_too_large")
	})
	t.Run("limit410", func(t *testing.T) {
		r := h.sendJSON("POST", "/files/"+id+"/links", alice, `{"maxDownloads":2}`)
		wantStatus(t, r, http.StatusCreated)
		l := r.json(t)
		if l["maxDownloads"] != float64(2) {
			t.Fatalf("link %v", l)
		}
		u := strings.TrimPrefix(l["url"].(string), "https://files.example.test")
		wantStatus(t, h.do("HEAD", u, h.anonymous(), nil, nil), http.StatusOK) // HEAD takes none
		// Concurrent downloads take exactly the two allowed.
		var mu sync.Mutex
		statuses := map[int]int{}
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				r := h.get(u, h.anonymous(), nil)
				mu.Lock()
				statuses[r.StatusCode]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if statuses[200] != 2 || statuses[410] != 4 {
			t.Fatalf("statuses %v, want two 200 and four 410", statuses)
		}
		wantError(t, h.get(u, h.anonymous(), nil), http.StatusGone, "link_exhausted")
	})
	t.Run("expired410", func(t *testing.T) {
		r := h.sendJSON("POST", "/files/"+id+"/links", alice, fmt.Sprintf(`{"expiresAt":%q}`, time.Now().Add(2*time.Second).UTC().Format(time.RFC3339Nano)))
		wantStatus(t, r, http.StatusCreated)
		u := strings.TrimPrefix(r.json(t)["url"].(string), "https://files.example.test")
		wantStatus(t, h.get(u, h.anonymous(), nil), http.StatusOK)
		// Age the link in the database rather than wait.
		h.setLinkExpiry(t, r.json(t)["id"].(string), time.Now().Add(-time.Second))
		wantError(t, h.get(u, h.anonymous(), nil), http.StatusGone, "link_expired")
	})
	t.Run("revoke204", func(t *testing.T) {
		wantError(t, h.do("DELETE", "/files/"+id+"/links/"+files.NewID(), alice, nil, nil), http.StatusNotFound, "link_not_found")
		wantError(t, h.do("DELETE", "/files/"+id+"/links/bad", alice, nil, nil), http.StatusNotFound, "link_not_found")
		wantStatus(t, h.do("DELETE", "/files/"+id+"/links/"+link["id"].(string), alice, nil, nil), http.StatusNoContent)
		wantError(t, h.get("/s/"+token, h.anonymous(), nil), http.StatusNotFound, "link_not_found")
		wantError(t, h.do("DELETE", "/files/"+id+"/links/"+link["id"].(string), alice, nil, nil), http.StatusNotFound, "link_not_found")
	})
	t.Run("fileDeleteKillsLinks", func(t *testing.T) {
		r := h.do("POST", "/files/"+id+"/links", h.admin("root"), nil, nil)
		wantStatus(t, r, http.StatusCreated)
		u := strings.TrimPrefix(r.json(t)["url"].(string), "https://files.example.test")
		wantStatus(t, h.get(u, h.anonymous(), nil), http.StatusOK)
		wantStatus(t, h.do("DELETE", "/files/"+id, alice, nil, nil), http.StatusNoContent)
		wantError(t, h.get(u, h.anonymous(), nil), http.StatusNotFound, "link_not_found")
		n, err := h.kit.Mongo.Database(h.env["MONGO_DB"]).Collection("file_links").CountDocuments(context.Background(), bson.D{})
		if err != nil || n != 0 {
			t.Fatalf("links left: %d %v", n, err)
		}
	})
}

func (h *harness) linkDoc(t *testing.T, id string) bson.M {
	t.Helper()
	var m bson.M
	if err := h.kit.Mongo.Database(h.env["MONGO_DB"]).Collection("file_links").FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (h *harness) setLinkExpiry(t *testing.T, id string, at time.Time) {
	t.Helper()
	if _, err := h.kit.Mongo.Database(h.env["MONGO_DB"]).Collection("file_links").UpdateOne(context.Background(),
		bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: at.UTC()}}}}); err != nil {
		t.Fatal(err)
	}
}

func TestQuota(t *testing.T) {
	const quota = 64 << 10
	h := start(t, map[string]string{"FILES_QUOTA": fmt.Sprint(quota)}, hooks{})
	const uid = "64b000000000000000000001"
	alice := h.user(uid)
	usage := func(tok string) map[string]any {
		t.Helper()
		r := h.get("/me/usage", tok, nil)
		wantStatus(t, r, http.StatusOK)
		return r.json(t)
	}
	if u := usage(alice); u["used"] != float64(0) || u["quota"] != float64(quota) || u["files"] != float64(0) {
		t.Fatalf("usage %v", u)
	}
	h.uploadFile(alice, "a.txt", text) // 18000 bytes
	img := h.upload("/upload/image", alice, fileField("p.png", pngBytes(t, solid(8, 8, colorBlack{}))))
	wantStatus(t, img, http.StatusCreated)
	imgSize := img.json(t)["image"].(map[string]any)["size"].(float64)
	u := usage(alice)
	if u["used"] != float64(len(text))+imgSize || u["files"] != float64(2) {
		t.Fatalf("usage %v", u)
	}

	t.Run("upload413", func(t *testing.T) {
		before := h.objects()
		big := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 8<<10) // 64 KiB: over what is left
		wantError(t, h.upload("/upload/file", alice, fileField("big.bin", big)), http.StatusRequestEntityTooLarge, "quota_exceeded")
		// Streamed, of unknown size: stopped once past the quota.
		wantError(t, h.streamForm("/upload/file", alice, "stream.bin", &pattern{n: 100 << 20}), http.StatusRequestEntityTooLarge, "quota_exceeded")
		if after := h.objects(); len(after) != len(before) {
			t.Fatalf("objects %v, before %v", after, before)
		}
		if u := usage(alice); u["files"] != float64(2) {
			t.Fatalf("usage %v", u)
		}
	})
	t.Run("concurrent413", func(t *testing.T) {
		// Eight uploads of 10 KiB race for the ~46 KiB left: together they
		// never pass the quota.
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				h.upload("/upload/file", alice, fileField(fmt.Sprintf("c%d.bin", i), bytes.Repeat([]byte{byte(i + 1)}, 10<<10)))
			})
		}
		wg.Wait()
		u := usage(alice)
		if u["used"].(float64) > quota {
			t.Fatalf("usage %v passes the quota", u)
		}
		if n := int64(len(h.objects())); n != h.records() {
			t.Fatalf("%d objects, %d records", n, h.records())
		}
	})
	t.Run("adminOverride200", func(t *testing.T) {
		admin := h.admin("root")
		wantError(t, h.get("/usage/"+uid, alice, nil), http.StatusForbidden, "forbidden")
		wantError(t, h.get("/usage/alice", admin, nil), http.StatusBadRequest, "invalid_user_id")
		wantError(t, h.sendJSON("PUT", "/usage/"+uid, admin, `{"quota":-1}`), http.StatusBadRequest, "invalid_quota")
		wantError(t, h.sendJSON("PUT", "/usage/"+uid, admin, `{"quota":"1"}`), http.StatusBadRequest, "invalid_quota")
		wantError(t, h.sendJSON("PUT", "/usage/"+uid, admin, `{}`), http.StatusBadRequest, "missing_quota")
		wantError(t, h.sendJSON("PUT", "/usage/"+uid, admin, ``), http.StatusBadRequest, "empty_body")
		r := h.sendJSON("PUT", "/usage/"+uid, admin, `{"quota":1048576}`)
		wantStatus(t, r, http.StatusOK)
		if m := r.json(t); m["quota"] != float64(1<<20) || m["userId"] != uid {
			t.Fatalf("%v", m)
		}
		h.uploadFile(alice, "more.bin", bytes.Repeat([]byte{9}, 100<<10))
		r = h.get("/usage/"+uid, admin, nil)
		wantStatus(t, r, http.StatusOK)
		var got struct {
			Used, Files int64
			Quota       *int64
		}
		if err := json.Unmarshal(r.body, &got); err != nil || got.Quota == nil || *got.Quota != 1<<20 || got.Used <= quota {
			t.Fatalf("%s", r.body)
		}
		// null: back to the default, which the user is now over.
		wantStatus(t, h.sendJSON("PUT", "/usage/"+uid, admin, `{"quota":null}`), http.StatusOK)
		wantError(t, h.upload("/upload/file", alice, fileField("x.txt", []byte("hello"))), http.StatusRequestEntityTooLarge, "quota_exceeded")
		wantError(t, h.upload("/upload/image", alice, fileField("p.png", pngBytes(t, solid(8, 8, colorBlack{})))), http.StatusRequestEntityTooLarge, "quota_exceeded")
		// Zero: nothing at all.
		wantStatus(t, h.sendJSON("PUT", "/usage/"+uid, admin, `{"quota":0}`), http.StatusOK)
		if u := usage(alice); u["quota"] != float64(0) {
			t.Fatalf("usage %v", u)
		}
	})
}
