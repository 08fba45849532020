package logs

import (
	"testing"
	"time"
)

// A stream record's id is its stream tag and sequence, laid out as
// documented; ids of another stream incarnation or sequence differ, and
// what cannot be an id gives none.
func TestStreamRecordID(t *testing.T) {
	created := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tag := StreamTag("ACME_LOGS", created)
	if len(tag) != 10 || tag == StreamTag("ACME_LOGS", created.Add(time.Nanosecond)) || tag == StreamTag("OTHER_LOGS", created) {
		t.Fatalf("tags do not tell streams apart: %q", tag)
	}
	id := StreamRecordID(tag, 0x0102030405)
	if want := "01" + tag + "000102030405"; id != want {
		t.Fatalf("id %q, want %q", id, want)
	}
	if StreamRecordID(tag, 1) == StreamRecordID(tag, 2) || StreamRecordID(tag, 7) == StreamRecordID(StreamTag("X", created), 7) {
		t.Fatal("ids collide")
	}
	if got := StreamRecordID(tag, MaxStreamSeq); got != "01"+tag+"ffffffffffff" {
		t.Fatalf("largest sequence: %q", got)
	}
	for _, c := range []struct {
		tag string
		seq uint64
	}{{tag, 0}, {tag, MaxStreamSeq + 1}, {"", 1}, {"0102", 1}, {"zz02030405", 1}} {
		if got := StreamRecordID(c.tag, c.seq); got != "" {
			t.Errorf("StreamRecordID(%q, %d) = %q, want none", c.tag, c.seq, got)
		}
	}
}
