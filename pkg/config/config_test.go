package config

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testTable has one setting of each sort the tests need.
var testTable = Join(Mongo, NATS, Identity, Table{
	{Key: "ADDR", Default: "def", Doc: "listen address"},
	{Key: "TTL", Kind: Duration, Default: "1m", Doc: "a duration"},
	{Key: "PASSWORD", Default: "def", Shared: true, File: true, Secret: true, Doc: "a secret"},
	{Key: "COUNT", Kind: Int, Default: "3", Doc: "an integer"},
	{Key: "BYTES", Kind: Size, Default: "4KiB", Doc: "a size"},
	{Key: "ON", Kind: Bool, Default: "true", Doc: "a boolean"},
	{Key: "ITEMS", Kind: List, Default: "a, b", Doc: "a list"},
})

func TestPrefixThenShared(t *testing.T) {
	env := map[string]string{"AUTH_MONGO_URL": "own", "MONGO_URL": "shared", "NATS_URL": "n", "ADDR": "x", "AUTH_TTL": "bad"}
	r := New("auth", func(k string) string { return env[k] }, testTable)
	if got := r.String("MONGO_URL"); got != "own" {
		t.Fatalf("prefixed: %s", got)
	}
	if got := r.String("NATS_URL"); got != "n" {
		t.Fatalf("shared: %s", got)
	}
	if got := r.String("ADDR"); got != "def" {
		t.Fatalf("a setting that is not shared must ignore the unprefixed key: %s", got)
	}
	if got := r.Duration("TTL"); got != time.Minute || r.Err() == nil || !strings.Contains(r.Err().Error(), "AUTH_TTL") {
		t.Fatalf("bad duration: %v %v", got, r.Err())
	}
}

func TestDefaultsFromTable(t *testing.T) {
	r := New("auth", func(string) string { return "" }, testTable)
	if got := r.Int("COUNT"); got != 3 {
		t.Errorf("COUNT = %d", got)
	}
	if got := r.Int64("BYTES"); got != 4096 {
		t.Errorf("BYTES = %d", got)
	}
	if got := r.Bool("ON"); !got {
		t.Errorf("ON = %v", got)
	}
	if got := r.List("ITEMS"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("ITEMS = %q", got)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	unread := r.Unread()
	if len(unread) == 0 || slices.Contains(unread, "COUNT") || !slices.Contains(unread, "MONGO_URL") {
		t.Fatalf("Unread = %q", unread)
	}
}

func TestUnknownKeyOrWrongKindPanics(t *testing.T) {
	for name, read := range map[string]func(r *Reader){
		"unknown":   func(r *Reader) { r.String("NOPE") },
		"wrongKind": func(r *Reader) { r.Int("TTL") },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			read(New("auth", func(string) string { return "" }, testTable))
		})
	}
}

func TestTableCheck(t *testing.T) {
	if err := Join(testTable, Logging, S3, ServiceCredential).Check(); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]Table{
		"twice":       {{Key: "A", Doc: "a"}, {Key: "A", Doc: "b"}},
		"noDoc":       {{Key: "A"}},
		"badDefault":  {{Key: "A", Kind: Duration, Default: "5", Doc: "a"}},
		"fileSuffix":  {{Key: "A_FILE", Doc: "a"}},
		"lowerCase":   {{Key: "a", Doc: "a"}},
		"badSize":     {{Key: "A", Kind: Size, Default: "1TB", Doc: "a"}},
		"twoLineDocs": {{Key: "A", Doc: "a\nb"}},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct {
		s      Setting
		prefix string
		want   string
	}{
		{Setting{Key: "ADDR"}, "AUTH", "AUTH_ADDR"},
		{Setting{Key: "MONGO_DB", Shared: true}, "AUTH", "AUTH_MONGO_DB MONGO_DB"},
		{Setting{Key: "MFA_KEY", File: true}, "AUTH", "AUTH_MFA_KEY AUTH_MFA_KEY_FILE"},
		{Setting{Key: "NATS_PASSWORD", Shared: true, File: true}, "AUTH", "AUTH_NATS_PASSWORD AUTH_NATS_PASSWORD_FILE NATS_PASSWORD NATS_PASSWORD_FILE"},
		{Setting{Key: "S3_BUCKET"}, "", "S3_BUCKET"},
	} {
		if got := strings.Join(c.s.Names(c.prefix), " "); got != c.want {
			t.Errorf("%s: %s, want %s", c.s.Key, got, c.want)
		}
	}
}

func TestReference(t *testing.T) {
	got := Reference("auth", Table{
		{Key: "ADDR", Default: "127.0.0.1:8081", Doc: "listen address"},
		{Key: "MONGO_PASSWORD", Shared: true, File: true, Doc: "password"},
		{Key: "CPUS", Kind: Int, Default: "8", DefaultDoc: "the number of CPUs", Doc: "workers"},
	})
	want := "| Variable | Kind | Default | What it does |\n|---|---|---|---|\n" +
		"| `AUTH_ADDR` | text | `127.0.0.1:8081` | listen address |\n" +
		"| `AUTH_MONGO_PASSWORD` (also `AUTH_MONGO_PASSWORD_FILE`, `MONGO_PASSWORD`, `MONGO_PASSWORD_FILE`) | text | empty | password |\n" +
		"| `AUTH_CPUS` | integer | the number of CPUs | workers |\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestSyncReference(t *testing.T) {
	p := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Doc\n\n" + fmt.Sprintf(beginMark, "auth") + "old\n" + fmt.Sprintf(endMark, "auth") + "\ntail\n"
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := SyncReference(p, "auth", "new\n", false); err == nil {
		t.Fatal("a stale section passed the check")
	}
	if err := SyncReference(p, "files", "new\n", false); err == nil {
		t.Fatal("a missing section passed the check")
	}
	if err := SyncReference(p, "auth", "new\n", true); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if want := strings.Replace(doc, "old\n", "new\n", 1); string(b) != want {
		t.Fatalf("rewritten:\n%s", b)
	}
	if err := SyncReference(p, "auth", "new\n", false); err != nil {
		t.Fatal(err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"10": 10, "4KiB": 4096, "64MiB": 64 << 20, "1GiB": 1 << 30} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Fatalf("%s: %d %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-1", "1TB", "x"} {
		if _, err := ParseSize(in); err == nil {
			t.Fatalf("%q accepted", in)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSecretFromFile(t *testing.T) {
	own := writeFile(t, "own-secret\n")
	shared := writeFile(t, "  shared-secret \r\n")
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"prefixedFile", map[string]string{"AUTH_PASSWORD_FILE": own, "PASSWORD": "plain"}, "own-secret"},
		{"sharedFile", map[string]string{"PASSWORD_FILE": shared}, "shared-secret"},
		{"variableWinsOverItsFile", map[string]string{"AUTH_PASSWORD": "plain", "AUTH_PASSWORD_FILE": own}, "plain"},
		{"prefixedVariableWinsOverSharedFile", map[string]string{"AUTH_PASSWORD": "plain", "PASSWORD_FILE": shared}, "plain"},
		{"default", map[string]string{}, "def"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := New("auth", func(k string) string { return c.env[k] }, testTable)
			if got := r.String("PASSWORD"); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFileErrors(t *testing.T) {
	env := map[string]string{"PASSWORD_FILE": filepath.Join(t.TempDir(), "missing")}
	r := New("auth", func(k string) string { return env[k] }, testTable)
	if got := r.String("PASSWORD"); got != "" {
		t.Fatalf("a missing file must not fall back to the default: %q", got)
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "PASSWORD_FILE") {
		t.Fatalf("want an error naming PASSWORD_FILE, got %v", err)
	}
	// Settings without File (listen addresses) have no _FILE variant.
	env = map[string]string{"AUTH_ADDR_FILE": writeFile(t, ":9999")}
	r = New("auth", func(k string) string { return env[k] }, testTable)
	if got := r.String("ADDR"); got != "def" {
		t.Fatalf("Own read a file: %q", got)
	}
}

func TestLogMasksFilesAndURLPasswords(t *testing.T) {
	env := map[string]string{
		"IDENTITY_PUBLIC_KEY_FILE": writeFile(t, "file-content-123"),
		"NATS_URL":                 "nats://auth:url-pass-456@nats:4222",
		"MONGO_DB":                 "acme",
	}
	r := New("auth", func(k string) string { return env[k] }, testTable)
	if got := r.String("IDENTITY_PUBLIC_KEY"); got != "file-content-123" {
		t.Fatalf("String from file: %q", got)
	}
	if got := r.String("NATS_URL"); got != env["NATS_URL"] {
		t.Fatalf("NATS_URL: %q", got)
	}
	r.String("MONGO_DB")
	var buf bytes.Buffer
	r.Log(slog.New(slog.NewJSONHandler(&buf, nil)))
	out := buf.String()
	for _, leaked := range []string{"file-content-123", "url-pass-456"} {
		if strings.Contains(out, leaked) {
			t.Fatalf("log line shows %q: %s", leaked, out)
		}
	}
	for _, shown := range []string{`"MONGO_DB":"acme"`, "nats://auth:xxxxx@nats:4222", `"IDENTITY_PUBLIC_KEY_FILE":"***"`} {
		if !strings.Contains(out, shown) {
			t.Fatalf("log line lacks %s: %s", shown, out)
		}
	}
}

func TestURLWithLogin(t *testing.T) {
	pw := writeFile(t, "p@ss/w:rd\n")
	cases := []struct {
		name string
		env  map[string]string
		want string
		bad  bool
	}{
		{"noUser", map[string]string{"NATS_URL": "nats://nats:4222"}, "nats://nats:4222", false},
		{"userAndPasswordFile", map[string]string{"NATS_URL": "nats://nats:4222", "NATS_USER": "auth", "NATS_PASSWORD_FILE": pw},
			"nats://auth:p%40ss%2Fw%3Ard@nats:4222", false},
		{"prefixedUser", map[string]string{"NATS_URL": "nats://nats:4222", "AUTH_NATS_USER": "auth", "NATS_PASSWORD": "x"},
			"nats://auth:x@nats:4222", false},
		{"everyServer", map[string]string{"NATS_URL": "nats://n1:4222, nats://n2:4222", "NATS_USER": "auth", "NATS_PASSWORD": "x"},
			"nats://auth:x@n1:4222,nats://auth:x@n2:4222", false},
		{"replacesUserInURL", map[string]string{"NATS_URL": "nats://old:old@nats:4222", "NATS_USER": "auth", "NATS_PASSWORD": "x"},
			"nats://auth:x@nats:4222", false},
		{"passwordWithoutUser", map[string]string{"NATS_URL": "nats://nats:4222", "NATS_PASSWORD": "x"}, "nats://nats:4222", true},
		{"notAURL", map[string]string{"NATS_URL": "nats:4222", "NATS_USER": "auth"}, "nats:4222", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := New("auth", func(k string) string { return c.env[k] }, testTable)
			got := r.URLWithLogin("NATS_URL", "NATS_USER", "NATS_PASSWORD")
			if got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			if (r.Err() != nil) != c.bad {
				t.Fatalf("err = %v, want error: %v", r.Err(), c.bad)
			}
		})
	}
	// The password the client sees is the file's, decoded.
	u, err := url.Parse("nats://auth:p%40ss%2Fw%3Ard@nats:4222")
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := u.User.Password(); p != "p@ss/w:rd" {
		t.Fatalf("decoded password %q", p)
	}
}

func TestMongoURL(t *testing.T) {
	pw := writeFile(t, "s3cr:t\n")
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"default", nil, "mongodb://127.0.0.1:27017"},
		{"noUser", map[string]string{"MONGO_URL": "mongodb://mongo:27017/?authSource=acme"}, "mongodb://mongo:27017/?authSource=acme"},
		{"userAndPasswordFile", map[string]string{"MONGO_URL": "mongodb://mongo:27017/?authSource=acme", "MONGO_USER": "acme", "MONGO_PASSWORD_FILE": pw},
			"mongodb://acme:s3cr%3At@mongo:27017/?authSource=acme"},
		// Several hosts are one connection string, logged in to once.
		{"replicaSet", map[string]string{"MONGO_URL": "mongodb://m1:27017,m2:27017/?replicaSet=rs0", "MONGO_USER": "acme", "MONGO_PASSWORD": "x"},
			"mongodb://acme:x@m1:27017,m2:27017/?replicaSet=rs0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := New("files", func(k string) string { return c.env[k] }, testTable)
			if got := r.MongoURL(); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"nats://nats:4222":                        "nats://nats:4222",
		"mongodb://u:secret@mongo:27017/?x=1":     "mongodb://u:xxxxx@mongo:27017/?x=1",
		"nats://a:s1@n1:4222,nats://a:s2@n2:4222": "nats://a:xxxxx@n1:4222,nats://a:xxxxx@n2:4222",
		"admin@acme.local":                        "admin@acme.local",
		"nats://a:s%zz@n1":                        "nats://***",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
