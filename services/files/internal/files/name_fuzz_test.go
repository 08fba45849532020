package files

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzCleanName: any client file name cleans to a non-empty, valid UTF-8
// name of at most MaxNameBytes bytes with no path separator, control,
// format or Windows-reserved character and no leading/trailing dot or
// space; cleaning is idempotent.
func FuzzCleanName(f *testing.F) {
	for _, s := range []string{"report.pdf", "../../etc/passwd", `C:\x\y.txt`, "a\x00b\r\nc", "\u202egnp.exe", "...", "  ",
		strings.Repeat("é", 200) + ".tar.gz", "\xff\xfe", "con:|<>?*\"x", "تقرير.pdf", "\u200b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := CleanName(name)
		if got == "" || !utf8.ValidString(got) || len(got) > MaxNameBytes {
			t.Fatalf("CleanName(%q) = %q", name, got)
		}
		if strings.ContainsAny(got, `/\<>:"|?*`) {
			t.Fatalf("CleanName(%q) = %q keeps a reserved character", name, got)
		}
		for _, r := range got {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || isBidiControl(r) {
				t.Fatalf("CleanName(%q) = %q keeps %U", name, got, r)
			}
		}
		if got != DefaultName && (strings.Trim(got, ". ") != got) {
			t.Fatalf("CleanName(%q) = %q has leading or trailing dots or spaces", name, got)
		}
		if again := CleanName(got); again != got {
			t.Fatalf("not idempotent: %q → %q → %q", name, got, again)
		}
	})
}
