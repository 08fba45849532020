package main

import (
	"bytes"
	"testing"
	"time"
)

func TestRecordIDIsTheServicesScheme(t *testing.T) {
	tag := [5]byte{0xaa, 0xbb, 0xcc, 0xdd, 0xee}
	for _, seq := range []uint64{1, 255, 256, 1_000_000, 1<<48 - 1} {
		id := recordID(tag, seq)
		// The logsearch section reads the sequence back from ids the service made.
		if got := seqOf(id.Hex()); got != seq {
			t.Errorf("seqOf(recordID(%d)) = %d (%s)", seq, got, id.Hex())
		}
		if !bytes.Equal(id[1:6], tag[:]) {
			t.Errorf("recordID(%d) = %s: tag not in bytes 1-5", seq, id.Hex())
		}
	}
	// _id order is sequence order, also where a byte carries over.
	prev := recordID(tag, 1)
	for _, seq := range []uint64{2, 255, 256, 65535, 65536, 1 << 40} {
		id := recordID(tag, seq)
		if bytes.Compare(prev[:], id[:]) >= 0 {
			t.Errorf("recordID(%d) = %s is not after %s", seq, id.Hex(), prev.Hex())
		}
		prev = id
	}
}

func TestLogDocsBodyHasTheNeedleOnceInAThousand(t *testing.T) {
	found := 0
	for i := range 50_000 {
		if matchesQ(logDocsBody(i), "NEEDLE") {
			found++
		}
	}
	if found != 50 {
		t.Fatalf("%d records of 50,000 hold the word, want 50", found)
	}
	if matchesQ(logDocsBody(0), "haystack") {
		t.Fatal("a word no record has matched")
	}
	if !matchesQ("Request TOOK 5 ms", "took 5") {
		t.Fatal("matching does not ignore case")
	}
}

func TestIngestDuration(t *testing.T) {
	if got, want := ingestDuration(10_000_000, 5_000), 2000*time.Second; got != want {
		t.Errorf("10M at 5,000/s = %s, want %s", got, want)
	}
	if got := ingestDuration(10, 0); got != 0 {
		t.Errorf("at no rate = %s, want 0", got)
	}
}

func TestLogDocsRowMeets(t *testing.T) {
	r := &logDocsRow{target: 50 * time.Millisecond}
	fast := []time.Duration{time.Millisecond, 2 * time.Millisecond, 40 * time.Millisecond}
	slow := []time.Duration{time.Millisecond, 60 * time.Millisecond}
	if got := r.meets(fast); got != mark(true) {
		t.Errorf("p99 40 ms against 50: %q", got)
	}
	if got := r.meets(slow); got != mark(false) {
		t.Errorf("p99 60 ms against 50: %q", got)
	}
	if got := r.meets(nil); got != "-" {
		t.Errorf("no samples: %q", got)
	}
	if got := (&logDocsRow{}).meets(slow); got != "report" {
		t.Errorf("no target: %q", got)
	}
}
