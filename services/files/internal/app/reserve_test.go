package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
	"github.com/acme/platform/pkg/testkit/apptest"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestQuotaUnderManyParallelUploads: 200 uploads of one user race, through
// the HTTP app, for a quota that fits 50 of them. Exactly 50 are stored,
// the others answer 413 quota_exceeded, and the user's usage is the sum
// of the 50 records, with one object each and nothing else in the bucket.
func TestQuotaUnderManyParallelUploads(t *testing.T) {
	const size, fits, uploads = 1000, 50, 200
	h := start(t, map[string]string{"FILES_QUOTA": fmt.Sprint(fits * size)}, hooks{})
	alice := h.user("64b0000000000000000000a1")
	bodies := make([][]byte, uploads)
	for i := range bodies {
		bodies[i] = make([]byte, size)
		rand.Read(bodies[i])
	}
	results := make([]*response, uploads)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range uploads {
		wg.Go(func() {
			<-start
			results[i] = h.upload("/upload/file", alice, fileField(fmt.Sprintf("p%d.bin", i), bodies[i]))
		})
	}
	close(start)
	wg.Wait()
	stored := 0
	for i, r := range results {
		switch r.StatusCode {
		case http.StatusCreated:
			stored++
		case http.StatusRequestEntityTooLarge:
			if code := r.json(t)["code"]; code != "quota_exceeded" {
				t.Errorf("upload %d: 413 %v, want quota_exceeded", i, code)
			}
		default:
			t.Errorf("upload %d: %d %.200s, want 201 or 413", i, r.StatusCode, r.body)
		}
	}
	if stored != fits {
		t.Fatalf("%d of %d parallel uploads stored, want exactly %d (the quota fits %d)", stored, uploads, fits, fits)
	}
	if n := h.records(); n != fits {
		t.Fatalf("%d records, want %d", n, fits)
	}
	u := h.get("/me/usage", alice, nil)
	wantStatus(t, u, http.StatusOK)
	if m := u.json(t); m["used"] != float64(fits*size) || m["files"] != float64(fits) {
		t.Fatalf("usage %v, want %d bytes in %d files", m, fits*size, fits)
	}
	// The account in the database is the sum of the records.
	db := h.kit.Mongo.Database(h.env["MONGO_DB"])
	var acct struct {
		Bytes, Count int64
	}
	if err := db.Collection("file_usage").FindOne(context.Background(), bson.D{{Key: "_id", Value: "64b0000000000000000000a1"}}).Decode(&acct); err != nil {
		t.Fatal(err)
	}
	if acct.Bytes != fits*size || acct.Count != fits {
		t.Fatalf("account %+v, want %d bytes in %d records", acct, fits*size, fits)
	}
	apptest.Eventually(t, 10*time.Second, func() error {
		if n := len(h.objects()); n != fits {
			return fmt.Errorf("%d objects, want %d (one per record)", n, fits)
		}
		return nil
	})
}

// TestUploadRoundTrips counts, with the driver's command monitor, the
// database commands of an upload under a quota: the first of a user
// (nothing cached: the account is read, and made from the records) and
// the next one, whose bound comes from the account the first one's
// reservation left in the owner cache. That one sends two: the
// reservation and the record's insert.
func TestUploadRoundTrips(t *testing.T) {
	cmds := &testkit.Commands{}
	h := start(t, map[string]string{"FILES_QUOTA": "1000000"}, hooks{mongoMonitor: cmds.Monitor()})
	alice := h.user("64b0000000000000000000a2")
	upload := func(name string) []string {
		return cmds.During(func() { h.uploadFile(alice, name, []byte(strings.Repeat(name, 100))) })
	}
	cold := upload("first.txt")
	t.Logf("first upload (cold): %d commands %v", len(cold), cold)
	warm := upload("second.txt")
	if want := []string{"findAndModify", "insert"}; !slices.Equal(warm, want) {
		t.Fatalf("second upload sent %d commands %v, want %v (reservation, insert)", len(warm), warm, want)
	}
	// The account cached is the one the reservation answered: the usage
	// shows both uploads.
	var u map[string]any
	usage := cmds.During(func() {
		r := h.get("/me/usage", alice, nil)
		wantStatus(t, r, http.StatusOK)
		u = r.json(t)
	})
	want := float64(len("first.txt")*100 + len("second.txt")*100)
	if u["used"] != want || u["files"] != float64(2) || len(usage) != 0 {
		t.Fatalf("usage %v after commands %v, want %v bytes in 2 files from the cache", u, usage, want)
	}

	// Uploads of one user at once: still two commands each (no reservation
	// drops the account another one left), and the account kept is the
	// last, counting every upload.
	const n = 8
	results := make([]*response, n)
	overlapping := cmds.During(func() {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results[i] = h.upload("/upload/file", alice, fileField(fmt.Sprintf("at-once-%d.txt", i), []byte(strings.Repeat("x", 100))))
			})
		}
		wg.Wait()
	})
	for _, r := range results {
		wantStatus(t, r, http.StatusCreated)
	}
	slices.Sort(overlapping)
	if want := slices.Concat(slices.Repeat([]string{"findAndModify"}, n), slices.Repeat([]string{"insert"}, n)); !slices.Equal(overlapping, want) {
		t.Fatalf("%d uploads at once sent %v, want %v", n, overlapping, want)
	}
	usage = cmds.During(func() {
		r := h.get("/me/usage", alice, nil)
		wantStatus(t, r, http.StatusOK)
		u = r.json(t)
	})
	want += n * 100
	if u["used"] != want || u["files"] != float64(2+n) || len(usage) != 0 {
		t.Fatalf("usage %v after commands %v, want %v bytes in %d files from the cache", u, usage, want, 2+n)
	}
}
