package mongostore

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The cache holds at most its size, least recently used out first, never a
// chunk bigger than a quarter of it, and drops what retention removes.
func TestChunkCacheBounds(t *testing.T) {
	chunk := func(n int, body int, at time.Time) *chunkDoc {
		return &chunkDoc{ID: fmt.Sprint("t.log#", n), MaxAt: at, Records: []chunkRec{{LogBody: strings.Repeat("x", body)}}}
	}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	one := chunkSize(chunk(0, 1000, t0))
	cc := newChunkCache(10 * one)
	for n := range 10 {
		cc.put(chunk(n, 1000, t0.Add(time.Duration(n)*time.Hour)))
	}
	if cc.get("t.log#0") == nil { // now the most recently used
		t.Fatal("chunk 0 not cached")
	}
	cc.put(chunk(10, 1000, t0.Add(10*time.Hour))) // pushes out the least recently used: 1
	if cc.get("t.log#1") != nil || cc.get("t.log#0") == nil || cc.get("t.log#10") == nil {
		t.Fatal("not least recently used out first")
	}
	if cc.size > cc.max {
		t.Fatalf("size %d over %d", cc.size, cc.max)
	}
	cc.put(chunk(99, int(3*one), t0)) // more than a quarter of the cache
	if cc.get("t.log#99") != nil {
		t.Fatal("a huge chunk was cached")
	}
	cc.dropBefore(t0.Add(5 * time.Hour)) // chunks 0..4 are older
	for n := range 11 {
		if got := cc.get(fmt.Sprint("t.log#", n)) != nil; got != (n >= 5) {
			t.Fatalf("after dropBefore chunk %d cached: %v", n, got)
		}
	}
	off := newChunkCache(0)
	off.put(chunk(1, 10, t0))
	if off.get("t.log#1") != nil {
		t.Fatal("a cache of size 0 keeps chunks")
	}
}
