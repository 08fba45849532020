package files

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestCleanName(t *testing.T) {
	long := strings.Repeat("a", 10_000) + ".txt"
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "report.pdf", "report.pdf"},
		{"traversal", "../../etc/passwd", "passwd"},
		{"windowsTraversal", `..\..\boot.ini`, "boot.ini"},
		{"onlyDots", "..", DefaultName},
		{"nul", "a\x00b.txt", "ab.txt"},
		{"controls", "a\r\nb\x7f\u0085c", "abc"},
		{"rtlOverride", "invoice\u202Etxt.exe", "invoicetxt.exe"},
		{"isolates", "\u2067abc\u2069.png", "abc.png"},
		{"arabicKept", "تقرير.pdf", "تقرير.pdf"},
		{"hebrewKept", "דוח שנתי.txt", "דוח שנתי.txt"},
		{"reserved", `a<b>c:d"e|f?g*h.txt`, "a_b_c_d_e_f_g_h.txt"},
		{"invalidUTF8", "a\xff\xfeb", "ab"},
		{"trimmed", "  .hidden. ", "hidden"},
		{"empty", "", DefaultName},
		{"zeroWidth", "a\u200Bb\uFEFF", "ab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CleanName(tc.in); got != tc.want {
				t.Fatalf("CleanName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	got := CleanName(long)
	if len(got) > MaxNameBytes || !strings.HasSuffix(got, ".txt") {
		t.Fatalf("long name: %d bytes, %q...", len(got), got[len(got)-8:])
	}
	multi := CleanName(strings.Repeat("é", 300))
	if len(multi) > MaxNameBytes || !utf8.ValidString(multi) {
		t.Fatalf("multi-byte name cut badly: %d bytes, valid %v", len(multi), utf8.ValidString(multi))
	}
}

func TestKeysAndIDs(t *testing.T) {
	id := NewID()
	if !ValidID(id) || ValidID(strings.ToUpper(id)) || ValidID(id[1:]) || ValidID("../"+id[3:]) {
		t.Fatal("ValidID")
	}
	if NewID() == id {
		t.Fatal("ids repeat")
	}
	at := time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC)
	key := ObjectKey(KindFile, id, at)
	if key != "files/2026/03/"+id {
		t.Fatalf("key %q", key)
	}
	if got, ok := IDFromKey(key); !ok || got != id {
		t.Fatalf("IDFromKey(%q) = %q %v", key, got, ok)
	}
	if got, ok := IDFromKey(ObjectKey(KindImage, id, at)); !ok || got != id {
		t.Fatal("image key")
	}
	if got, ok := IDFromKey("variants/2026/03/" + id + "/100x100c-q82.jpeg"); !ok || got != id {
		t.Fatal("variant key: its image's id")
	}
	for _, k := range []string{"other/2026/03/" + id, "files/2026/03/x", "files/" + id, "files/2026/03/" + id + "/x",
		"variants/2026/03/" + id, "variants/2026/03/" + id + "/../x", "variants/2026/03/" + id + "/A B", "variants/2026/03/x/1x1.png"} {
		if _, ok := IDFromKey(k); ok {
			t.Fatalf("IDFromKey accepted %q", k)
		}
	}
}

func TestCompressible(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/plain; charset=utf-8": true,
		"text/html; charset=utf-8":  true,
		"application/json":          true,
		"image/bmp":                 true,
		"image/png":                 false,
		"application/zip":           false,
		"application/x-gzip":        false,
		"application/octet-stream":  false,
		"application/pdf":           false,
		"garbage;;":                 false,
	} {
		if Compressible(ct) != want {
			t.Errorf("Compressible(%q) != %v", ct, want)
		}
	}
}

func TestCanRead(t *testing.T) {
	f := &File{Owner: "u1"}
	for _, tc := range []struct {
		name    string
		r       Reader
		readAll bool
		want    bool
	}{
		{"owner", Reader{UserID: "u1"}, false, true},
		{"other", Reader{UserID: "u2"}, false, false},
		{"admin", Reader{UserID: "a", Admin: true}, false, true},
		{"otherReadAll", Reader{UserID: "u2"}, true, true},
		{"anonymousReadAll", Reader{}, true, false},
	} {
		if got := f.CanRead(tc.r, tc.readAll); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}
