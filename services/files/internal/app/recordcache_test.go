package app

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"testing"

	"github.com/acme/platform/pkg/metrics/metricstest"
)

// Two replicas on one database, bucket and NATS: records read through one
// are cached there, and a deletion through the other is refused by the
// first on the very next request (the deletion is announced and the cache
// fenced, services/files/internal/filecache).
func TestRecordCacheAcrossReplicas(t *testing.T) {
	a := start(t, nil, hooks{})
	shared := maps.Clone(map[string]string(a.env))
	b := start(t, shared, hooks{})
	b.id = a.id // one identity key for both
	alice := a.user("alice")

	cacheHits := func(h *harness) float64 {
		t.Helper()
		v, ok := metricstest.Scrape(t, h.base+"/metrics").Sum("acme_files_record_cache_hits_total")
		if !ok {
			t.Fatal("no acme_files_record_cache_hits_total")
		}
		return v
	}

	const n = 20
	for i := range n {
		content := []byte(fmt.Sprintf("file %d of the cache test", i))
		id := a.uploadFile(alice, fmt.Sprintf("f%d.txt", i), content)["id"].(string)
		// Read twice through b: the second read is answered from b's cache.
		before := cacheHits(b)
		for range 2 {
			r := b.get("/download/file/"+id, alice, nil)
			wantStatus(t, r, http.StatusOK)
			if !bytes.Equal(r.body, content) {
				t.Fatalf("file %d: got %q", i, r.body)
			}
		}
		if hits := cacheHits(b) - before; hits < 1 {
			t.Fatalf("file %d: %v cache hits on b for two reads of one record", i, hits)
		}
		wantStatus(t, b.get("/retrieve/file/"+id, alice, nil), http.StatusOK)
		// Deleted through a (alternately b, which must drop its own entry
		// too): refused at once through both.
		del := a
		if i%2 == 1 {
			del = b
		}
		wantStatus(t, del.do("DELETE", "/files/"+id, alice, nil, nil), http.StatusNoContent)
		for _, h := range []*harness{b, a} {
			wantError(t, h.get("/retrieve/file/"+id, alice, nil), http.StatusNotFound, "file_not_found")
			wantError(t, h.get("/download/file/"+id, alice, nil), http.StatusNotFound, "file_not_found")
		}
	}
	a.assertNothingStored(t)
}

// The cache holds records, not rights: another user still gets 404 for a
// record cached through its owner's read.
func TestRecordCacheKeepsAccessRules(t *testing.T) {
	h := start(t, nil, hooks{})
	alice, bob := h.user("alice"), h.user("bob")
	id := h.uploadFile(alice, "a.txt", text)["id"].(string)
	for range 2 {
		wantStatus(t, h.get("/download/file/"+id, alice, nil), http.StatusOK)
	}
	wantError(t, h.get("/download/file/"+id, bob, nil), http.StatusNotFound, "file_not_found")
	wantStatus(t, h.get("/download/file/"+id, h.admin("root"), nil), http.StatusOK)
}
