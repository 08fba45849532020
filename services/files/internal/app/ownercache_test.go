package app

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/acme/platform/pkg/metrics/metricstest"
)

// Two replicas on one database, bucket and NATS: an owner's listing and
// usage are cached on each, and an upload or deletion through either shows
// in both on the very next request after it was answered (every insert and
// delete announces its owner, flushed, before it answers; each replica
// fences before it serves; services/files/internal/filecache).
func TestOwnerCacheAcrossReplicas(t *testing.T) {
	a := start(t, nil, hooks{})
	b := start(t, maps.Clone(map[string]string(a.env)), hooks{})
	b.id = a.id // one identity key for both
	alice := a.user("alice")

	hits := func(h *harness) float64 {
		t.Helper()
		v, ok := metricstest.Scrape(t, h.base+"/metrics").Sum("acme_files_owner_cache_hits_total")
		if !ok {
			t.Fatal("no acme_files_owner_cache_hits_total")
		}
		return v
	}
	var want []string // alice's ids, newest first
	var used float64
	check := func(step string) {
		t.Helper()
		for _, h := range []*harness{b, a} {
			for range 2 { // the second is answered from the cache
				m := h.get("/files?limit=50", alice, nil).json(t)
				var got []string
				for _, f := range m["files"].([]any) {
					got = append(got, f.(map[string]any)["id"].(string))
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: GET /files through %s lists %v, want %v", step, h.base, got, want)
				}
				u := h.get("/me/usage", alice, nil).json(t)
				if u["files"] != float64(len(want)) || u["used"] != used {
					t.Fatalf("%s: GET /me/usage through %s: %v, want %d files, %v bytes", step, h.base, u, len(want), used)
				}
			}
		}
	}
	check("empty")
	before := hits(b)
	const n = 12
	for i := range n {
		up, del := a, b
		if i%2 == 1 {
			up, del = b, a
		}
		content := []byte(fmt.Sprintf("file %d of the owner cache test", i))
		id := up.uploadFile(alice, fmt.Sprintf("f%d.txt", i), content)["id"].(string)
		want = append([]string{id}, want...)
		used += float64(len(content))
		check(fmt.Sprintf("upload %d", i))
		if i%3 == 2 {
			victim := want[len(want)-1]
			r := del.get("/retrieve/file/"+victim, alice, nil).json(t)
			wantStatus(t, del.do("DELETE", "/files/"+victim, alice, nil, nil), http.StatusNoContent)
			want = want[:len(want)-1]
			used -= r["file"].(map[string]any)["size"].(float64)
			check(fmt.Sprintf("delete after upload %d", i))
		}
	}
	if h := hits(b) - before; h < n {
		t.Fatalf("%v owner cache hits on b, want at least %d", h, n)
	}
}
