package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestQueryDocListsAllowedScans: docs/design/queries.md lists exactly the
// whole-collection reads AllowedScans admits, with the same reasons.
func TestQueryDocListsAllowedScans(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "design", "queries.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "<!-- allowed-scans")
	end := strings.Index(doc, "<!-- /allowed-scans -->")
	if start < 0 || end < start {
		t.Fatal("docs/design/queries.md: no allowed-scans block")
	}
	var got []string
	for _, line := range strings.Split(doc[start:end], "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| collection") {
			continue
		}
		got = append(got, line)
	}
	var want []string
	for _, a := range AllowedScans {
		want = append(want, "| "+a.Collection+" | `"+a.Filter+"` | "+a.Why+" |")
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/design/queries.md's allowed-scans table:\n%s\nwant (pkg/testkit AllowedScans):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A scan is allowed by shape and collection, in every database, or in one
// database by AllowScan, or when it asks for every document; any other
// fails the check.
func TestScanAllowed(t *testing.T) {
	if !scanAllowed(Scan{DB: "a", Collection: "log_ids", Filter: "{at: {$lt: time.Time}}", Sort: "{}"}) {
		t.Error("an AllowedScans shape refused")
	}
	if !scanAllowed(Scan{DB: "a", Collection: "files", Filter: "{}", Sort: "{}"}) {
		t.Error("a read of every document refused")
	}
	if scanAllowed(Scan{DB: "a", Collection: "files", Filter: "{}", Sort: "{createdAt: number}", Limit: true}) {
		t.Error("a sorted page no index serves allowed")
	}
	s := Scan{DB: "b", Collection: "files", Filter: "{owner: {$regex: string}}"}
	if scanAllowed(s) {
		t.Error("a shape in no list allowed")
	}
	AllowScan("b", "files", "*")
	defer allowedInDB.Delete("b")
	if !scanAllowed(s) || scanAllowed(Scan{DB: "c", Collection: "files", Filter: s.Filter}) {
		t.Error("AllowScan: not allowed in its database, or allowed in another")
	}
}
