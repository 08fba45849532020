package e2e

// The attacks of issue 34's security review that held, replayed through the
// gateway against the real processes so that they keep holding: share-link
// download limits and quotas under concurrency, gzip bombs on the log
// routes, regular-expression and pathological search terms, and one-time
// tokens used at once from many clients. (Cross-user access and API-key
// scopes on every route: TestAuthorizationMatrix, matrix_test.go.)

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/scripts/stack"
)

// userClient creates a user with the administrator's session and signs it
// in; it returns the user's client and id.
func userClient(t *testing.T, admin *client, gw, email string) (*client, string) {
	t.Helper()
	m := admin.mustStatus(201, "POST", "/users", map[string]any{"email": email, "password": "correct horse battery", "fullName": email, "edv": "E-" + email[:3]})
	return signIn(t, gw, email, "correct horse battery"), m["user"].(map[string]any)["id"].(string)
}

// randomBytes is n bytes no compressor shrinks (so a record's size is the
// bytes sent).
func randomBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed, 0x34}).Read(b)
	return b
}

// TestHostileLinkDownloadLimitUnderConcurrency: a share link allowing 3
// downloads, fetched by 20 anonymous clients at once (a quarter of them
// asking for a range, which takes a download too). Exactly 3 get the file
// (200, or 206 with the range); every other one the documented 410
// link_exhausted. A counter that
// is read, compared and written back (or a filtered $inc, which FerretDB
// does not apply atomically) lets several requests take the last download.
func TestHostileLinkDownloadLimitUnderConcurrency(t *testing.T) {
	p, sec, _ := platform(t, nil)
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	ada, _ := userClient(t, admin, gw, "ada@example.com")
	content := randomBytes(64<<10, 1)
	r := ada.upload("/upload/file", part{field: "file", filename: "shared.bin", data: bytes.NewReader(content)})
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	id := r.json(t)["file"].(map[string]any)["id"].(string)
	link := ada.mustStatus(201, "POST", "/files/"+id+"/links", map[string]any{"maxDownloads": 3})
	path := sharePath(t, gw, link)

	const n = 20
	results := make([]rawResp, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		anon := newClient(t, gw)
		wg.Go(func() {
			<-start
			var hdr map[string]string
			if i%4 == 1 { // a range takes a download too
				hdr = map[string]string{"Range": "bytes=100-199"}
			}
			results[i] = anon.raw("GET", path, hdr, nil, "")
		})
	}
	close(start)
	wg.Wait()
	served := 0
	for i, res := range results {
		switch res.status {
		case 200:
			if !bytes.Equal(res.body, content) {
				t.Errorf("download %d: 200 with %d bytes, not the file's %d", i, len(res.body), len(content))
			}
			served++
		case 206:
			if i%4 != 1 || !bytes.Equal(res.body, content[100:200]) {
				t.Errorf("download %d: 206 with %d bytes, want bytes 100-199 for a range request", i, len(res.body))
			}
			served++
		case 410:
			if m := res.json(t); m["code"] != "link_exhausted" {
				t.Errorf("download %d: 410 %v, want code link_exhausted", i, m)
			}
		default:
			t.Errorf("download %d: %d %.200s, want 200/206 or 410 link_exhausted", i, res.status, res.body)
		}
	}
	if served != 3 {
		t.Fatalf("%d of %d concurrent downloads served the file, want exactly maxDownloads = 3", served, n)
	}
	ls := ada.mustStatus(200, "GET", "/files/"+id+"/links", nil)["links"].([]any)
	if len(ls) != 1 || ls[0].(map[string]any)["downloads"] != float64(3) {
		t.Fatalf("links after the race: %v, want one with downloads 3", ls)
	}
	if g := newClient(t, gw).raw("GET", path, nil, nil, ""); g.status != 410 || g.json(t)["code"] != "link_exhausted" {
		t.Fatalf("download after the race: %d %s", g.status, g.body)
	}
}

// TestHostileQuotaUnderParallelUploads: an administrator gives a user a
// quota of 350 KiB; the user sends ten 100 KiB uploads at once (1000 KiB
// together). The accepted ones never sum above the quota, the others are
// 413 quota_exceeded, usage and listing agree with what was accepted, and
// the quota is then usable to its last byte and not one byte further. A
// check made only before the upload (each racing upload sees the same free
// space) would accept all ten.
func TestHostileQuotaUnderParallelUploads(t *testing.T) {
	p, sec, _ := platform(t, nil)
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	ada, adaID := userClient(t, admin, gw, "ada@example.com")
	const quota, size, n = 350 << 10, 100 << 10, 10
	if u := admin.mustStatus(200, "PUT", "/usage/"+adaID, map[string]any{"quota": quota}); u["quota"] != float64(quota) {
		t.Fatalf("set quota: %v", u)
	}

	results := make([]rawResp, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		data := randomBytes(size, byte(10+i))
		wg.Go(func() {
			<-start
			results[i] = ada.upload("/upload/file", part{field: "file", filename: fmt.Sprintf("p%d.bin", i), data: bytes.NewReader(data)})
		})
	}
	close(start)
	wg.Wait()
	accepted, acceptedBytes := 0, 0
	for i, res := range results {
		switch res.status {
		case 201:
			accepted++
			acceptedBytes += int(res.json(t)["file"].(map[string]any)["size"].(float64))
		case 413:
			if m := res.json(t); m["code"] != "quota_exceeded" {
				t.Errorf("upload %d: 413 %v, want code quota_exceeded", i, m)
			}
		default:
			t.Errorf("upload %d: %d %.200s, want 201 or 413 quota_exceeded", i, res.status, res.body)
		}
	}
	t.Logf("%d of %d parallel uploads accepted (%d bytes, quota %d)", accepted, n, acceptedBytes, quota)
	if acceptedBytes > quota {
		t.Fatalf("accepted uploads sum to %d bytes, over the quota of %d", acceptedBytes, quota)
	}
	u := ada.mustStatus(200, "GET", "/me/usage", nil)
	listed, listedBytes := 0, 0
	for _, f := range ada.mustStatus(200, "GET", "/files?limit=100", nil)["files"].([]any) {
		listed++
		listedBytes += int(f.(map[string]any)["size"].(float64))
	}
	if u["used"] != float64(acceptedBytes) || u["files"] != float64(accepted) || listed != accepted || listedBytes != acceptedBytes {
		t.Fatalf("usage %v, listing %d files / %d bytes; want what was accepted: %d files / %d bytes", u, listed, listedBytes, accepted, acceptedBytes)
	}

	// The rest of the quota, to the byte, then nothing more.
	if rest := quota - acceptedBytes; rest > 0 {
		if r := ada.upload("/upload/file", part{field: "file", filename: "rest.bin", data: bytes.NewReader(randomBytes(rest, 99))}); r.status != 201 {
			t.Fatalf("upload of the %d bytes left: %d %s", rest, r.status, r.body)
		}
	}
	if r := ada.upload("/upload/file", part{field: "file", filename: "one.bin", data: bytes.NewReader([]byte{1})}); r.status != 413 || r.json(t)["code"] != "quota_exceeded" {
		t.Fatalf("one byte over a full quota: %d %s", r.status, r.body)
	}
	if u := admin.mustStatus(200, "GET", "/usage/"+adaID, nil); u["used"] != float64(quota) {
		t.Fatalf("usage of a full quota: %v, want used %d", u, quota)
	}
}

// gzipOf compresses prefix, then n bytes of fill, then suffix, at the best
// compression, streaming (the inflated body never exists here).
func gzipOf(t *testing.T, prefix []byte, fill byte, n int64, suffix []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(prefix)
	chunk := bytes.Repeat([]byte{fill}, 1<<20)
	for left := n; left > 0; left -= int64(len(chunk)) {
		if left < int64(len(chunk)) {
			chunk = chunk[:left]
		}
		if _, err := zw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	zw.Write(suffix)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pb is a protobuf length-delimited field.
func pb(field int, b []byte) []byte {
	out := binary.AppendUvarint(nil, uint64(field<<3|2))
	out = binary.AppendUvarint(out, uint64(len(b)))
	return append(out, b...)
}

// otlpProto is an ExportLogsServiceRequest with one record whose body is
// msg, from the app service.name (encoded by hand: resource_logs 1 →
// resource 1 → attributes 1 {key 1, value 2 → string_value 1}, scope_logs 2
// → log_records 2 → body 5 → string_value 1).
func otlpProto(app, msg string) []byte {
	attr := append(pb(1, []byte("service.name")), pb(2, pb(1, []byte(app)))...)
	rl := append(pb(1, pb(1, attr)), pb(2, pb(2, pb(5, pb(1, []byte(msg)))))...)
	return pb(1, rl)
}

func otlpJSON(app, msg string) string {
	return `{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"` + app + `"}}]},` +
		`"scopeLogs":[{"logRecords":[{"body":{"stringValue":"` + msg + `"}}]}]}]}`
}

// TestHostileOTLPGzipBomb: gzip bodies that inflate to 256 MiB (about
// 250 KiB sent, under the gateway's bound, so the logs service inflates
// them) and 1 GiB (about 1 MiB sent) to POST /v1/logs, each a valid
// export with a marker record followed by padding (JSON whitespace, or an
// unknown protobuf field), so a service that inflated it whole would store
// the marker; and the same bomb to the JSON routes POST /log and POST
// /signin. Each is refused (413 body_too_large, 415 for the JSON routes,
// which take no content encoding), nothing is stored, and the peak resident
// set of the logs, auth and gateway processes stays under 256 MiB. Reading
// the body with Fiber's c.Body() (which inflates without a bound) or an
// unbounded io.ReadAll of the gzip reader would store the marker and take
// 256 MiB to 1 GiB.
func TestHostileOTLPGzipBomb(t *testing.T) {
	const inflated = 256 << 20
	marker := fmt.Sprintf("bomb%d", time.Now().UnixNano())
	jsonBomb := gzipOf(t, []byte(otlpJSON("LOGGING", marker)), ' ', inflated, nil)
	head := otlpProto("LOGGING", marker)
	head = binary.AppendUvarint(head, uint64(1000<<3|2)) // unknown field 1000, bytes
	head = binary.AppendUvarint(head, inflated)
	protoBomb := gzipOf(t, head, 0, inflated, nil)
	gigaBomb := gzipOf(t, []byte(otlpJSON("LOGGING", marker)), ' ', 1<<30, nil)
	logBomb := gzipOf(t, []byte(`{"app":"LOGGING","type":"log","logBody":"`+marker+`"}`), ' ', inflated, nil)
	// Under the gateway's 64 KiB bound for auth bodies, so auth reads it.
	signinBomb := gzipOf(t, []byte(`{"email":"admin@acme.test","password":"x"}`), ' ', 48<<20, nil)
	t.Logf("bombs: JSON %d KiB, protobuf %d KiB, 1 GiB %d KiB", len(jsonBomb)>>10, len(protoBomb)>>10, len(gigaBomb)>>10)

	p, sec, _ := platform(t, nil)
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	procs := []string{"logs", "auth", "gateway"}
	for _, name := range procs {
		if err := stack.ResetPeakRSS(p.Procs[name].Pid()); err != nil {
			t.Fatal(err)
		}
	}

	post := func(c *client, path, ct string, body []byte, hdr map[string]string) rawResp {
		t.Helper()
		h := map[string]string{"Content-Encoding": "gzip"}
		for k, v := range hdr {
			h[k] = v
		}
		began := time.Now()
		r := c.raw("POST", path, h, bytes.NewReader(body), ct)
		t.Logf("POST %s (%s, %d KiB gzip): %d in %v", path, ct, len(body)>>10, r.status, time.Since(began).Round(time.Millisecond))
		return r
	}
	cred := map[string]string{"X-Service-Credential": sec.ServiceCredential}
	anon := newClient(t, gw)
	for _, c := range []struct {
		what   string
		c      *client
		path   string
		ct     string
		body   []byte
		hdr    map[string]string
		status int
		code   string
	}{
		{"OTLP/JSON, 256 MiB inflated", anon, "/v1/logs", "application/json", jsonBomb, cred, 413, "body_too_large"},
		{"OTLP/protobuf, 256 MiB inflated", anon, "/v1/logs", "application/x-protobuf", protoBomb, cred, 413, "body_too_large"},
		{"OTLP/JSON, 1 GiB inflated", anon, "/v1/logs", "application/json", gigaBomb, cred, 413, ""},
		{"POST /log", admin, "/log", "application/json", logBomb, nil, 415, "unsupported_encoding"},
		{"POST /signin", anon, "/signin", "application/json", signinBomb, nil, 415, "unsupported_encoding"},
	} {
		r := post(c.c, c.path, c.ct, c.body, c.hdr)
		if r.status != c.status {
			t.Errorf("%s: %d %.200s, want %d", c.what, r.status, r.body, c.status)
			continue
		}
		if m := r.json(t); m["code"] == nil || (c.code != "" && m["code"] != c.code) {
			t.Errorf("%s: %d %v, want code %q", c.what, r.status, m, c.code)
		}
	}

	for _, name := range procs {
		peak, err := stack.PeakRSS(p.Procs[name].Pid())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (pid %d) peak RSS %d MiB, now %d MiB", name, p.Procs[name].Pid(), peak>>20, vmRSS(t, p.Procs[name].Pid())>>20)
		if peak >= 256<<20 {
			t.Errorf("%s peak RSS %d MiB during the gzip bombs, want < 256 MiB", name, peak>>20)
		}
	}

	// Nothing stored. The same two requests with 1 KiB of padding instead
	// of 256 MiB, sent after the bombs, are taken and stored (so the bombs
	// differ from an accepted export only by their size, and the stream has
	// been read past them); the bombs' marker is not.
	control := "control" + marker
	pbHead := otlpProto("LOGGING", "pb"+control)
	pbHead = binary.AppendUvarint(pbHead, uint64(1000<<3|2))
	pbHead = binary.AppendUvarint(pbHead, 1<<10)
	for _, c := range []struct {
		ct   string
		body []byte
	}{
		{"application/json", gzipOf(t, []byte(otlpJSON("LOGGING", control)), ' ', 1<<10, nil)},
		{"application/x-protobuf", gzipOf(t, pbHead, 0, 1<<10, nil)},
	} {
		if r := post(anon, "/v1/logs", c.ct, c.body, cred); r.status != 200 {
			t.Fatalf("padded export (%s) of 1 KiB: %d %s", c.ct, r.status, r.body)
		}
	}
	waitLogs(t, admin, "/log/log/1/LOGGING?q="+control, func(ls []map[string]any) bool { return len(ls) == 2 })
	for _, typ := range []string{"log", "error"} {
		for _, l := range logsOf(t, admin.mustStatus(201, "GET", "/log/"+typ+"/1?q="+marker+"&limit=500", nil)) {
			if !strings.Contains(l["logBody"].(string), control) {
				t.Errorf("a bomb's record was stored: %.200v", l)
			}
		}
	}
}

// TestHostileSearchRegex: regular-expression syntax and pathological terms
// in q= on the listing and the export. Each answers 201/200, or 400 JSON
// with a code, within the client's timeout, never 5xx; and q is matched as
// literal text: a literal ".*" finds only the record holding those two
// characters. A search that compiled q as a regular expression would find
// both records for ".*", hang on "(a+)+$" against long input, or fail
// (5xx) on "[" and "\"; a matcher that lower-cases by index would panic on
// U+0130 and U+212A, whose lower cases have another byte length.
func TestHostileSearchRegex(t *testing.T) {
	p, sec, _ := platform(t, nil)
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	marker := fmt.Sprintf("rx%d", time.Now().UnixNano())
	postLog(t, admin, marker+" literal .* here")
	postLog(t, admin, marker+" no wildcard here")
	postLog(t, admin, marker+" "+strings.Repeat("a", 5000)+"!")
	postLog(t, admin, marker+" \u0130stanbul \u212Aelvin")
	waitLogs(t, admin, "/log/log/1/LOGGING?q="+marker, func(ls []map[string]any) bool { return len(ls) == 4 })

	q := func(s string) string { return url.QueryEscape(s) }
	found := func(term string) []string {
		t.Helper()
		var bodies []string
		for _, l := range logsOf(t, admin.mustStatus(201, "GET", "/log/log/1/LOGGING?q="+q(marker+" "+term), nil)) {
			bodies = append(bodies, l["logBody"].(string))
		}
		return bodies
	}
	if got := found(".*"); len(got) != 1 || got[0] != marker+" literal .* here" {
		t.Errorf("q=.*: %q, want only the record holding the literal .*", got)
	}
	if got := found("\u0130stanbul"); len(got) != 1 || !strings.Contains(got[0], "\u0130stanbul") {
		t.Errorf("q=\u0130stanbul: %q, want the record holding it", got)
	}
	if got := found("\u212Aelvin"); len(got) != 1 {
		t.Errorf("q=\u212Aelvin: %q, want the record holding it", got)
	}
	if got := found("(a+)+$"); len(got) != 0 {
		t.Errorf("q=(a+)+$: %q, want nothing (no record holds those characters)", got)
	}

	terms := make([]string, 1000)
	for i := range terms {
		terms[i] = fmt.Sprintf("t%d", i)
	}
	hostile := []string{
		".*", "(a+)+$", "(a|aa)+$", "[", "]", "\\", "\\\\", "a{1000000}", "(?i)", "^$", "*", "+", "?",
		"\x00", "%00", "a\x00b", "\xff\xfe", "\"", "\"unterminated", "\"\"",
		strings.Repeat("a", 10000), strings.Repeat("(a+)+", 50), strings.Join(terms, " "),
		"\u0130", "\u212A", "\u0130\u212A\u0130\u212A", strings.Repeat("\u0130", 80), "\u00df", "\uFFFD", "\U0001F600",
	}
	// Each must answer within the client's timeout (a transport error
	// fails the test); the slowest is logged, not asserted.
	answers := map[string]int{}
	var slowest time.Duration
	var slowestWhat string
	defer func() { t.Logf("answers to the hostile terms: %v; slowest %v (%s)", answers, slowest, slowestWhat) }()
	for _, s := range hostile {
		for _, path := range []string{"/log/log/1?q=" + q(s), "/log/log/1/LOGGING?q=" + q(s) + "&limit=500", "/log/export?type=log&q=" + q(s)} {
			began := time.Now()
			r := admin.raw("GET", path, nil, nil, "")
			took := time.Since(began)
			what := fmt.Sprintf("GET %.80s (%d bytes of q)", path, len(s))
			answer := fmt.Sprint(r.status)
			if r.status == 400 && strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
				answer += " " + fmt.Sprint(r.json(t)["code"])
			}
			answers[answer]++
			switch {
			case r.status == 200 || r.status == 201:
			case r.status == 400:
				if m := r.json(t); m["code"] == nil {
					t.Errorf("%s: 400 without a code: %v", what, m)
				}
			default:
				t.Errorf("%s: %d %.200s, want 200/201 or 400 with a code", what, r.status, r.body)
			}
			if took > slowest {
				slowest, slowestWhat = took, what
			}
		}
	}
	if t.Failed() {
		return
	}
	// The process is still there and still searching.
	if got := found(".*"); len(got) != 1 {
		t.Fatalf("q=.* after the hostile terms: %q", got)
	}
}

// TestHostileTokensWorkOnce: one password-reset token sent by ten clients
// at once, each with another new password, and one e-mail verification
// token by ten at once. Exactly one use succeeds; the others are refused
// (400 invalid_token), and only the winner's password signs in. A token
// looked up, then spent in a second step (or spent with a find-and-modify
// that is not atomic on the server) lets several requests through, each
// setting its own password. (Passkey ceremonies and TOTP challenges are
// replayed in TestPasskeyCeremonies and TestMFAThroughGateway.)
func TestHostileTokensWorkOnce(t *testing.T) {
	mc, env := mailCatcher(t, nil)
	p, sec, _ := platform(t, env)
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)
	admin.mustStatus(201, "POST", "/users", map[string]any{"email": "ada@example.com", "password": "correct horse battery", "fullName": "Ada", "edv": "E-1"})
	verify := mailedToken(t, mc, "ada@example.com", "Confirm your e-mail address", "verify", 1)
	newClient(t, gw).mustStatus(202, "POST", "/password/forgot", map[string]string{"email": "ada@example.com"})
	reset := mailedToken(t, mc, "ada@example.com", "Reset your password", "reset", 1)

	race := func(what, path string, body func(i int) map[string]string) int {
		t.Helper()
		const n = 10
		type res struct {
			status int
			m      map[string]any
		}
		results := make([]res, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			c := newClient(t, gw)
			wg.Go(func() {
				<-start
				st, m, _ := c.do("POST", path, body(i))
				results[i] = res{st, m}
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, r := range results {
			switch {
			case r.status == 200:
				if winner >= 0 {
					t.Errorf("%s: uses %d and %d both succeeded", what, winner, i)
				}
				winner = i
			case r.status == 400 && r.m["code"] == "invalid_token":
			case r.status == 429 && r.m["code"] == "throttled":
			default:
				t.Errorf("%s: use %d answered %d %v, want 200 once, else 400 invalid_token", what, i, r.status, r.m)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: no use succeeded", what)
		}
		return winner
	}

	pw := func(i int) string { return fmt.Sprintf("new secret phrase %d", i) }
	won := race("password reset", "/password/reset", func(i int) map[string]string { return map[string]string{"token": reset, "password": pw(i)} })
	// Only the winner's password signs in (the losers' are wrong passwords:
	// 401, or 429 once the account's throttle counts them).
	ada := signIn(t, gw, "ada@example.com", pw(won))
	for i := range 10 {
		if i == won {
			continue
		}
		if st, m, _ := newClient(t, gw).do("POST", "/signin", map[string]string{"email": "ada@example.com", "password": pw(i)}); st != 401 && !(st == 429 && m["code"] == "throttled") {
			t.Errorf("sign-in with the password of use %d (winner %d): %d %v, want 401 or 429", i, won, st, m)
		}
	}
	if st, m, _ := newClient(t, gw).do("POST", "/password/reset", map[string]string{"token": reset, "password": "yet another phrase"}); st != 400 || m["code"] != "invalid_token" {
		t.Errorf("reset token used after the race: %d %v", st, m)
	}

	// The verification token mailed at creation: its first use, ten at once.
	if me := ada.mustStatus(200, "GET", "/me", nil); me["user"].(map[string]any)["id"] == nil {
		t.Fatalf("/me: %v", me)
	}
	race("e-mail verification", "/email/verify", func(int) map[string]string { return map[string]string{"token": verify} })
	if st, m, _ := newClient(t, gw).do("POST", "/email/verify", map[string]string{"token": verify}); st != 400 || m["code"] != "invalid_token" {
		t.Errorf("verification token used after the race: %d %v", st, m)
	}
}
