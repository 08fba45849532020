package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/pkg/testkit"
	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestConsoleInBrowser drives the web console in headless Chromium
// (Debian's /usr/bin/chromium) with chromedp, as a person would, through a
// platform of its own: sign in with the keyboard (a wrong password first,
// then the throttling lock), edit the profile and upload an avatar, upload
// files with the picker and by drag and drop, cancel an upload, download a
// file, end another device's session, sign out; as the administrator,
// create, promote and delete a user, watch records published on NATS appear
// in the live tail within a second, page through the listing by cursor, and
// find a message that can never be a record among the dead letters. Any
// Content-Security-Policy violation or page error the browser reports fails
// it. Screenshots of every page go to artifacts/console/, and failed-*.png
// there when a step fails.
//
// It fails, not skips, when Chromium is missing (`make test` installs it
// with scripts/ensure-packages.sh); CONSOLE_BROWSER=skip skips it on
// purpose.
func TestConsoleInBrowser(t *testing.T) {
	artifacts := browserArtifacts(t)
	old, _ := filepath.Glob(filepath.Join(artifacts, "failed-*.png"))
	for _, f := range old {
		os.Remove(f)
	}

	// The files the browser uploads.
	uploads := t.TempDir()
	content := strings.Repeat("Console end-to-end test\n", 2000) + strconv.FormatInt(time.Now().UnixNano(), 10)
	notesPath, heldPath, avatarPath := filepath.Join(uploads, "notes.txt"), filepath.Join(uploads, "held.bin"), filepath.Join(uploads, "me.png")
	for path, data := range map[string][]byte{notesPath: []byte(content), heldPath: bytes.Repeat([]byte{1}, 4096), avatarPath: testPNG(t, 2, 2)} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	p, sec, _ := platform(t, nil)
	base := p.GatewayURL
	admin := newClient(t, base)
	admin.mustStatus(200, "POST", "/signin", map[string]string{"email": sec.AdminEmail, "password": sec.AdminPassword})
	const userEmail, userPassword = "grace@example.com", "correct horse battery"
	admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": userEmail, "password": userPassword, "fullName": "Grace Hopper", "edv": "E-7",
	})

	// Records are published the way services do it, with pkg/logclient
	// over NATS, by this test while the browser watches.
	s := testkit.Get(t)
	lv, _ := launched.Load(p)
	prefix := lv.(launch).servers.SubjectPrefix
	nc, err := nats.Connect(s.NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lc, err := logclient.New(nc, logclient.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Thirty records for the listing's pages (20 a page).
	for i := range 30 {
		if !lc.Log("SERVER-APP-B", logclient.TypeLog, fmt.Sprintf("paging record %02d", i), "") {
			t.Fatal("logclient refused a record")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	started := time.Now()
	b := startBrowser(ctx, t, artifacts)
	status := func(text string) loc { return doc.role("status", text) }

	// The detector of CSP violations and page errors works: a probe page
	// makes one of each, and both are reported.
	b.step("problem detection", nil, func() {
		probe := b.newTab("probe", 1280, 900)
		probe.goTo(base + "/console/")
		probe.waitFor(doc.role("h1", "Sign in"))
		probe.eval(`(() => {
  document.body.append(Object.assign(document.createElement('img'), { src: 'http://example.invalid/e2e.png' }));
  setTimeout(() => { throw new Error('e2e probe'); });
  return true;
})()`, nil)
		var seen []string
		deadline := time.Now().Add(stepTimeout)
		for !(slices.ContainsFunc(seen, func(s string) bool {
			return strings.Contains(s, "example.invalid") && strings.Contains(s, "Content Security Policy")
		}) &&
			slices.ContainsFunc(seen, func(s string) bool { return strings.Contains(s, "page error: Uncaught Error: e2e probe") })) {
			if time.Now().After(deadline) {
				t.Fatalf("the browser's problem reports were not seen; got %q", seen)
			}
			probe.drain()
			seen = append(seen, b.takeProblems()...)
		}
		probe.close()
	})

	pg := b.newTab("desktop", 1280, 900)
	email, password, signInButton := doc.label("E-mail"), doc.label("Password"), doc.role("button", "Sign in")
	// keyboardSignIn fills the sign-in form and sends it with the keyboard
	// only: the page has the focus when it opens, Tab goes to the e-mail
	// field, Tab again to the password, Enter sends.
	keyboardSignIn := func(tb *tab, who, pw string) {
		t.Helper()
		var focus struct {
			On string `json:"on"`
		}
		tb.poll("the focus on the page", stepTimeout, `(() => {
  const a = document.activeElement;
  if (a && a.id === 'main' && q.label([document], 'E-mail').length === 1) return { ok: true, on: 'main' };
  if (a && a === q.label([document], 'E-mail')[0]) return { ok: true, on: 'email' };
  return { why: 'the focus is on ' + (a || document.body).outerHTML.slice(0, 80) };
})()`, &focus)
		if focus.On == "main" {
			tb.press(kb.Tab)
		}
		if !tb.focused(email) {
			t.Fatal("Tab from the page does not go to the e-mail field")
		}
		tb.press(who)
		tb.press(kb.Tab)
		if !tb.focused(password) {
			t.Fatal("Tab from the e-mail field does not go to the password")
		}
		tb.press(pw)
		if got := tb.value(email); got != who {
			t.Fatalf("e-mail field holds %q", got)
		}
		if got := tb.value(password); got != pw {
			t.Fatalf("password field holds %q", got)
		}
		tb.press(kb.Enter)
	}
	signInAs := func(tb *tab, who, pw string) {
		t.Helper()
		tb.goTo(base + "/")
		tb.waitJS("the sign-in page", `/\/console\/#\/signin$/.test(location.href)`)
		tb.fill(email, who)
		tb.fill(password, pw)
		tb.click(signInButton)
		tb.waitFor(doc.role("h1", "Profile"))
	}

	b.step("sign in", pg, func() {
		pg.goTo(base + "/")
		pg.waitJS("the sign-in page", `/\/console\/#\/signin$/.test(location.href)`)
		pg.waitFor(doc.role("h1", "Sign in"))
		// A wrong password, keyboard only: a clear message, and the focus
		// back on the password.
		keyboardSignIn(pg, userEmail, "not the password")
		pg.waitFor(doc.role("alert", "The e-mail or the password is wrong."))
		if !pg.focused(password) {
			t.Error("after a wrong password the focus is not on the password field")
		}
		pg.shot("01-signin-error")

		// Throttling: repeated failures for one account lock it; the page
		// says how long to wait (from the 429's retryAfter) and counts down.
		pg.fill(email, "nobody@example.com")
		lockedMsg := regexp.MustCompile(`^Too many failed attempts\. Try again in \d+ seconds?\.$`)
		locked := false
		for i := 0; i < 8 && !locked; i++ {
			pg.fill(password, fmt.Sprintf("wrong password %d", i))
			pg.click(signInButton) // the form hides its message at once
			locked = lockedMsg.MatchString(pg.textOf(doc.role("alert", rx(`wrong|Try again in`))))
		}
		if !locked {
			t.Fatal("never throttled")
		}
		var disabled bool
		pg.eval(signInButton.js+"[0].disabled", &disabled)
		if !disabled {
			t.Fatal("sign-in button enabled while locked")
		}
		pg.shot("01-signin-throttled")

		pg.reload()
		pg.waitFor(doc.role("h1", "Sign in"))
		keyboardSignIn(pg, userEmail, userPassword)
		pg.waitFor(doc.role("h1", "Profile"))
		if pg.count(doc.role("link", "Users")) != 0 || pg.count(doc.role("link", "Logs")) != 0 {
			t.Fatal("a user sees the Users or the Logs link")
		}
	})

	avatarLoaded := func(tb *tab) {
		t.Helper()
		var img struct {
			Width int    `json:"width"`
			Src   string `json:"src"`
		}
		tb.poll("the avatar image", stepTimeout, `(() => {
  const r = q.one(q.role([document], 'img', 'Your avatar'));
  if (r.err) return { why: r.err };
  if (!r.el.complete) return { why: 'loading' };
  return { ok: true, width: r.el.naturalWidth, src: r.el.currentSrc };
})()`, &img)
		if img.Width != 2 || !regexp.MustCompile(`^`+regexp.QuoteMeta(base)+`/images/[0-9a-f]{32}$`).MatchString(img.Src) {
			t.Fatalf("avatar image not loaded: %+v", img)
		}
	}
	b.step("profile", pg, func() {
		pg.fill(doc.label("Full name"), "Grace B. Hopper")
		pg.fill(doc.label("Sector"), "Navy")
		pg.click(doc.role("button", "Save profile"))
		pg.waitFor(status("Profile saved."))
		pg.setFiles(doc.label("Image (JPEG, PNG, GIF or WebP)"), avatarPath)
		pg.click(doc.role("button", "Upload avatar"))
		pg.waitFor(status("Avatar updated."))
		avatarLoaded(pg)
		// Stored by the services: all still there after a reload.
		pg.reload()
		pg.waitFor(doc.role("h1", "Profile"))
		if got := pg.value(doc.label("Full name")); got != "Grace B. Hopper" {
			t.Errorf("full name after a reload: %q", got)
		}
		if got := pg.value(doc.label("Sector")); got != "Navy" {
			t.Errorf("sector after a reload: %q", got)
		}
		if got := pg.value(doc.label("Avatar URL")); !regexp.MustCompile(`/images/[0-9a-f]{32}$`).MatchString(got) {
			t.Errorf("avatar URL after a reload: %q", got)
		}
		avatarLoaded(pg)
		pg.waitFor(doc.role("cell", rx(`\(this one\)`)))
		pg.shot("02-profile")
	})

	b.step("files", pg, func() {
		pg.click(doc.role("link", "Files"))
		pg.waitFor(doc.role("h1", "Files"))
		pg.fill(doc.label("Note stored with the next uploads (optional)"), `{"from":"browser"}`)
		upload := func(name string) loc { return doc.css(".queue li").hasText(name) }
		pg.setFiles(doc.css("#files-input"), notesPath)
		pg.waitFor(upload("notes.txt").text("done"))
		// Drag and drop: a drop event carrying a file, as a browser fires it.
		pg.eval(`(() => {
  const dt = new DataTransfer();
  dt.items.add(new File(['dropped bytes'], 'dropped.txt', { type: 'text/plain' }));
  document.getElementById('dropzone').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  return true;
})()`, nil)
		pg.waitFor(upload("dropped.txt").text("done"))
		// Cancel: an upload held on the way (its request never gets an
		// answer) is aborted by its Cancel button.
		held, release := pg.holdRequests("*/upload/file")
		pg.setFiles(doc.css("#files-input"), heldPath)
		select {
		case r := <-held:
			if r.Request.Method != "POST" {
				t.Fatalf("held %s %s", r.Request.Method, r.Request.URL)
			}
		case <-time.After(stepTimeout):
			t.Fatal("the upload of held.bin never started")
		}
		pg.click(upload("held.bin").role("button", "Cancel"))
		pg.waitFor(upload("held.bin").text("cancelled"))
		release()

		rows := doc.role("h2", "Your files").parent().css("tbody tr")
		pg.waitFor(rows.nth(0).role("button", "dropped.txt")) // newest first
		pg.waitFor(rows.nth(1).role("button", "notes.txt"))
		pg.waitFor(rows.nth(2).role("button", "me.png")) // the avatar
		if n := pg.count(rows); n != 3 {
			t.Fatalf("%d files listed, want 3 (the cancelled one is not stored)", n)
		}
		// The image is shown as a thumbnail: a variant of it, loaded.
		var thumb struct {
			Width int    `json:"width"`
			Src   string `json:"src"`
			N     int    `json:"n"`
		}
		pg.poll("the image's thumbnail", stepTimeout, `(() => {
  const imgs = document.querySelectorAll('main img.thumb');
  const el = imgs[0];
  if (!el) return { why: 'no thumbnail' };
  if (!el.complete) return { why: 'loading' };
  return { ok: true, width: el.naturalWidth, src: el.currentSrc, n: imgs.length };
})()`, &thumb)
		if thumb.N != 1 || thumb.Width != 2 || !regexp.MustCompile(`/images/[0-9a-f]{32}\?w=2&h=2&format=auto$`).MatchString(thumb.Src) {
			t.Fatalf("thumbnail: %+v, want the avatar's one 2x2 variant loaded", thumb)
		}
		name, data := pg.download(rows.nth(1).role("link", "Download"))
		if name != "notes.txt" || string(data) != content {
			t.Fatalf("downloaded %q, %d bytes; want notes.txt, %d bytes as uploaded", name, len(data), len(content))
		}
		pg.click(rows.nth(1).role("button", "notes.txt"))
		details := doc.css("#file-details")
		sum := sha256.Sum256([]byte(content))
		for term, want := range map[string]any{
			"Name": "notes.txt", "Note (meta)": `{"from":"browser"}`, "Type": "text/plain; charset=utf-8",
			"Size": rx(regexp.QuoteMeta(fmt.Sprintf("(%d bytes)", len(content))) + "$"), "SHA-256": hex.EncodeToString(sum[:]),
		} {
			pg.waitText(details.fact(term), want)
		}
		pg.shot("03-files")
	})

	b.step("share links, delete, usage", pg, func() {
		rows := doc.role("h2", "Your files").parent().css("tbody tr")
		// (The upload cancelled above may still land: its request was held,
		// not refused; so the counts are compared, not fixed.)
		pg.waitText(doc.css("#usage-text"), rx(`^[0-9.]+ KiB of 10 GiB used \([0-9]+ files\)$`))
		pg.click(rows.nth(0).role("button", "dropped.txt"))
		details := doc.css("#file-details")
		pg.waitText(details.fact("Name"), "dropped.txt")
		pg.fill(doc.label("Days the link lasts"), "2")
		pg.click(doc.role("button", "Create share link"))
		pg.waitFor(status("Share link created."))
		url := pg.value(doc.label("Share link URL (shown once)"))
		anonymousGet := func() (int, string) {
			resp, err := http.Get(url) // no cookie: whoever got the link
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if st, body := anonymousGet(); st != 200 || body != "dropped bytes" {
			t.Fatalf("share link %s: %d %q", url, st, body)
		}
		pg.click(doc.role("button", "Copy link"))
		pg.waitFor(status("Link copied."))
		// Reading the clipboard back needs the permission a person would grant.
		if _, err := chromedp.CallBrowser(pg.ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: "clipboard-read"}, Setting: browser.PermissionSettingGranted,
			BrowserContextID: chromedp.FromContext(pg.ctx).BrowserContextID,
		}); err != nil {
			t.Fatal(err)
		}
		var copied string
		pg.eval(`navigator.clipboard.readText()`, &copied)
		if copied != url {
			t.Errorf("clipboard %q, want %q", copied, url)
		}
		links := doc.role("table", "Share links").css("tbody tr")
		pg.waitText(links.nth(0).css("td").nth(0), rx(`\S`)) // the expiry
		if n := pg.count(links); n != 1 {
			t.Fatalf("%d share links listed, want 1", n)
		}
		pg.shot("03b-share-link")
		pg.click(links.nth(0).role("button", rx(`^Revoke link [0-9a-f]{32}$`)))
		pg.waitFor(status("Share link revoked."))
		pg.waitFor(links.nth(0).text("No share links."))
		if st, _ := anonymousGet(); st != 404 {
			t.Fatalf("revoked link: %d", st)
		}
		confirmed := pg.acceptDialog()
		pg.click(details.role("button", "Delete file"))
		if m := confirmed(); !strings.HasPrefix(m, "Delete dropped.txt? This cannot be undone") {
			t.Errorf("confirmation %q", m)
		}
		pg.waitFor(status("dropped.txt deleted."))
		pg.waitJS("dropped.txt gone from the list", `![...document.querySelectorAll('#main tbody button')].some(b => b.textContent === 'dropped.txt')`)
		pg.waitFor(rows.role("button", "notes.txt"))
		var listed, counted int
		pg.eval(`document.querySelectorAll('#main table:not([aria-label]) tbody tr').length`, &listed)
		pg.eval(`Number(/\((\d+) files?\)/.exec(document.getElementById('usage-text').textContent)[1])`, &counted)
		if listed != counted {
			t.Fatalf("%d files listed, the usage bar counts %d", listed, counted)
		}
	})

	b.step("phone", pg, func() {
		phone := b.newTab("phone", 390, 844)
		signInAs(phone, userEmail, userPassword)
		phone.click(doc.role("link", "Files"))
		phone.waitFor(doc.role("button", "notes.txt"))
		var overflow int
		phone.eval("document.documentElement.scrollWidth - window.innerWidth", &overflow)
		if overflow > 0 {
			t.Errorf("the files page is %dpx wider than a phone screen", overflow)
		}
		phone.shot("04-files-phone")
		// The phone's session, ended from the first browser.
		pg.click(doc.role("link", "Profile"))
		sessions := doc.role("h2", "Sessions").parent().css("tbody tr")
		pg.waitFor(sessions.nth(1))
		if n := pg.count(sessions); n != 2 {
			t.Fatalf("%d sessions listed, want 2", n)
		}
		pg.click(sessions.role("button", "End"))
		pg.waitFor(status("Session ended."))
		// The console reloads the list before it says so: the row is gone now.
		if n := pg.count(sessions); n != 1 {
			t.Fatalf("%d sessions listed when \"Session ended.\" shows, want 1", n)
		}
		pg.waitFor(sessions.role("cell", rx(`\(this one\)`)))
		phone.reload()
		phone.waitFor(doc.role("h1", "Sign in")) // that session is gone
		phone.close()
	})

	b.step("sign out", pg, func() {
		pg.click(doc.role("button", "Sign out"))
		pg.waitFor(doc.role("h1", "Sign in"))
		pg.reload()
		pg.waitFor(doc.role("h1", "Sign in")) // the session is gone, not only the page
	})

	adm := b.newTab("admin", 1280, 900)
	roleOf := func(email string) string {
		t.Helper()
		for _, u := range admin.mustStatus(200, "GET", "/users?page=1&limit=100", nil)["users"].([]any) {
			if u := u.(map[string]any); u["email"] == email {
				return u["roleName"].(string)
			}
		}
		return ""
	}
	b.step("admin users", adm, func() {
		signInAs(adm, sec.AdminEmail, sec.AdminPassword)
		adm.click(doc.role("link", "Users"))
		adm.waitFor(doc.role("cell", userEmail))
		form := doc.role("h2", "Create a user").closest("form")
		adm.fill(form.label("E-mail"), "temp@example.com")
		adm.fill(form.label("Full name"), "Temporary Person")
		adm.fill(form.label("EDV"), "E-99")
		adm.fill(form.label("Initial password"), "temporary password")
		adm.click(form.role("button", "Create user"))
		adm.waitFor(status("temp@example.com created."))
		adm.selectOption(doc.label("Role of temp@example.com"), "admin")
		adm.waitFor(status("temp@example.com is now admin."))
		if r := roleOf("temp@example.com"); r != "admin" {
			t.Fatalf("the service has the role %q", r)
		}
		adm.shot("05-users")
		confirmed := adm.acceptDialog()
		adm.click(doc.role("row", rx(`temp@example\.com`)).role("button", "Delete"))
		if m := confirmed(); m != "Delete temp@example.com? Their sessions end at once." {
			t.Errorf("confirmation %q", m)
		}
		adm.waitFor(status("temp@example.com deleted."))
		// The list is reloaded before the status says so.
		if adm.count(doc.role("cell", "temp@example.com")) != 0 {
			t.Fatal("the deleted user is still listed")
		}
		if r := roleOf("temp@example.com"); r != "" {
			t.Fatal("the service still has the deleted user")
		}
	})

	details := doc.css("#log-details")
	b.step("admin logs", adm, func() {
		adm.click(doc.role("link", "Logs"))
		adm.waitFor(doc.role("h1", "Logs"))
		tailState := doc.css("#tail-state")
		adm.click(doc.role("button", "Start live tail"))
		adm.waitText(tailState, "live")
		live := doc.role("table", "Live records")
		body := fmt.Sprintf("disk almost full on build-7 (console test %d)", time.Now().UnixNano())
		sent := time.Now()
		if !lc.Log("SERVER-APP-A", logclient.TypeError, body, "console-e2e") {
			t.Fatal("logclient refused the record")
		}
		adm.waitWithin(live.role("button", body), time.Second)
		t.Logf("live tail: the record shown %v after it was published", time.Since(sent).Round(time.Millisecond))
		adm.click(live.role("button", body))
		adm.waitText(details.role("h2", nil), "Log record")
		adm.waitText(details.css("pre"), body)
		for term, want := range map[string]string{"Application": "SERVER-APP-A", "Type": "error", "Metrics id": "console-e2e"} {
			adm.waitText(details.fact(term), want)
		}

		// Pause holds new records back; resume shows them.
		adm.click(doc.role("button", "Pause"))
		adm.waitText(tailState, "paused")
		heldBody := fmt.Sprintf("held while paused %d", time.Now().UnixNano())
		if !lc.Log("SERVER-APP-A", logclient.TypeError, heldBody, "") {
			t.Fatal("logclient refused the record")
		}
		adm.waitText(tailState, "paused, 1 new")
		if adm.count(live.role("button", heldBody)) != 0 {
			t.Fatal("a record is shown while paused")
		}
		adm.click(doc.role("button", "Resume"))
		adm.waitWithin(live.role("button", heldBody), time.Second)
		adm.waitText(tailState, "live")

		// The listing, filtered by type and application, shows the stored
		// record.
		listed := doc.role("table", "Log records")
		show := doc.role("button", "Show")
		adm.selectOption(doc.label("Type"), "error")
		adm.selectOption(doc.label("Application"), "SERVER-APP-A")
		adm.reloadUntil("the published record listed", show, listed, func() bool { return adm.count(listed.role("button", body)) == 1 })

		// Pages go by cursor: 30 records of SERVER-APP-B, 20 a page.
		adm.selectOption(doc.label("Type"), "log")
		adm.selectOption(doc.label("Application"), "SERVER-APP-B")
		adm.selectOption(doc.label("Per page"), "20")
		bodies := func() []string {
			var b []string
			adm.eval(`[...`+listed.js+`[0].tBodies[0].rows].map((r) => r.cells.length === 4 ? q.norm(r.cells[3].textContent) : q.norm(r.textContent))`, &b)
			return b
		}
		var newest, oldest []string
		for i := 29; i >= 0; i-- {
			if i >= 10 {
				newest = append(newest, fmt.Sprintf("paging record %02d", i))
			} else {
				oldest = append(oldest, fmt.Sprintf("paging record %02d", i))
			}
		}
		adm.reloadUntil("the paging records listed", show, listed, func() bool { return slices.Equal(bodies(), newest) })
		pages := doc.role("navigation", "Log record pages")
		adm.redraw(listed, func() { adm.click(pages.role("button", "Older →")) })
		adm.waitText(pages.css("span"), "Page 2")
		if got := bodies(); !slices.Equal(got, oldest) {
			t.Fatalf("page 2: %q, want %q", got, oldest)
		}
		var disabled bool
		adm.eval(pages.role("button", "Older →").js+"[0].disabled", &disabled)
		if !disabled {
			t.Fatal("Older is enabled on the oldest page")
		}
		adm.redraw(listed, func() { adm.click(pages.role("button", "← Newer")) })
		adm.waitText(pages.css("span"), "Page 1")
		if got := bodies(); !slices.Equal(got, newest) {
			t.Fatalf("page 1 again: %q, want %q", got, newest)
		}

		// Search (q=): a word of the published error record, any case.
		adm.selectOption(doc.label("Type"), "error")
		adm.selectOption(doc.label("Application"), "SERVER-APP-A")
		adm.fill(doc.label("Search"), "BUILD-7")
		adm.redraw(listed, func() { adm.click(show) })
		if got := bodies(); len(got) != 1 || !strings.Contains(got[0], "build-7") {
			t.Fatalf("search BUILD-7: %q", got)
		}
		adm.fill(doc.label("Search"), `"full on build-8"`)
		adm.redraw(listed, func() { adm.click(show) })
		if got := bodies(); !slices.Equal(got, []string{"No records."}) {
			t.Fatalf("search for a phrase no record has: %q", got)
		}
		// The volume chart: one bar per interval of the last 24 hours; the
		// newest holds the record; choosing it narrows the list (From and
		// To) to its interval.
		adm.fill(doc.label("Search"), "")
		adm.redraw(listed, func() { adm.click(show) })
		bar := doc.css("#log-chart").role("button", rx(`: [1-9][0-9]* error$`))
		adm.waitFor(bar)
		var bars int
		adm.eval(doc.css("#log-chart").role("button", nil).js+".length", &bars)
		if bars < 24 || bars > 60 {
			t.Fatalf("%d bars for 24 hours", bars)
		}
		adm.redraw(listed, func() { adm.click(bar.nth(adm.count(bar) - 1)) })
		var from, to string
		adm.eval(doc.label("From").js+"[0].value", &from)
		adm.eval(doc.label("To").js+"[0].value", &to)
		if from == "" || to == "" {
			t.Fatal("choosing a bar did not set From and To")
		}
		if adm.count(listed.role("button", body)) != 1 {
			t.Fatalf("the record is not listed in its bar's interval %s..%s: %q", from, to, bodies())
		}
		var href string
		adm.eval(doc.role("link", "Export NDJSON").js+"[0].getAttribute('href')", &href)
		if !strings.HasPrefix(href, "/log/export?type=error&") || !strings.Contains(href, "app=SERVER-APP-A") || !strings.Contains(href, "from=") {
			t.Fatalf("export link %q", href)
		}
	})

	b.step("admin dead letters", adm, func() {
		// Valid JSON with a field the payload does not have: the writer
		// dead-letters it. It is listed with its reason, and its payload
		// opens.
		marker := fmt.Sprintf("not a log record %d", time.Now().UnixNano())
		data, _ := json.Marshal(map[string]string{"marker": marker})
		subject := logclient.Subject(prefix, "SERVER-APP-A", "log")
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, "console-poison-"+marker)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish the poison message: %v", err)
		}
		dead := doc.role("table", "Dead letters")
		reason := dead.role("button", rx(`unknown field`))
		adm.reloadUntil("the poison message listed", doc.role("button", "Refresh dead letters"), dead, func() bool { return adm.count(reason) > 0 })
		adm.click(reason.nth(0))
		adm.waitText(details.role("h2", nil), "Dead letter")
		adm.waitText(details.css("pre"), rx(regexp.QuoteMeta(marker)))
		adm.waitText(details.fact("Message id"), "console-poison-"+marker)
		adm.waitText(details.fact("Subject"), subject)
	})

	b.step("logs screenshots", adm, func() {
		adm.eval(`(() => { document.getElementById('log-details').hidden = true; document.getElementById('status').textContent = ''; return true; })()`, nil)
		adm.shot("06-logs")
		adm.run("a phone-sized screen", chromedp.EmulateViewport(390, 844))
		adm.shot("07-logs-phone")
	})
	t.Logf("browser scenarios passed in %v", time.Since(started).Round(time.Millisecond))
}

// The live tail through the gateway, as EventSource uses it: admins only,
// checked input, events as they are published on NATS, unbuffered.
func TestLiveTailThroughGateway(t *testing.T) {
	p, sec, _ := platform(t, nil)
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "linus@example.com", "password": "correct horse battery", "fullName": "Linus", "edv": "E-9",
	})
	user := signIn(t, p.GatewayURL, "linus@example.com", "correct horse battery")

	apps := admin.mustStatus(200, "GET", "/log/apps", nil)["apps"].([]any)
	if len(apps) != 6 {
		t.Fatalf("apps: %v", apps)
	}
	user.mustStatus(403, "GET", "/log/apps", nil)
	user.mustStatus(403, "GET", "/log/tail", nil)
	newClient(t, p.GatewayURL).mustStatus(401, "GET", "/log/tail", nil)
	if b := admin.mustStatus(400, "GET", "/log/tail?type=warning", nil); b["code"] != "invalid_type" {
		t.Fatalf("bad type: %v", b)
	}
	if b := admin.mustStatus(400, "GET", "/log/tail?app=NO-SUCH-APP", nil); b["code"] != "unknown_app" || b["sentAppName"] != "NO-SUCH-APP" {
		t.Fatalf("unknown app: %v", b)
	}

	req, _ := http.NewRequest("GET", p.GatewayURL+"/log/tail?type=error", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := admin.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("tail: %d %v", resp.StatusCode, resp.Header)
	}
	events := make(chan [2]string, 16) // event, data
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var ev, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && ev != "":
				events <- [2]string{ev, data}
				ev, data = "", ""
			case strings.HasPrefix(line, "event: "):
				ev = line[7:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			}
		}
	}()
	nextEvent := func(within time.Duration) [2]string {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended")
			}
			return ev
		case <-time.After(within):
			t.Fatalf("no event within %v", within)
		}
		return [2]string{}
	}
	if ev := nextEvent(10 * time.Second); ev[0] != "ready" {
		t.Fatalf("first event %v", ev)
	}

	nc, err := nats.Connect(testkit.Get(t).NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lv, _ := launched.Load(p)
	lc, err := logclient.New(nc, logclient.Options{Prefix: lv.(launch).servers.SubjectPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	lc.Log("ACME-S3", logclient.TypeLog, "not an error: filtered out", "")
	lc.Log("ACME-S3", logclient.TypeError, "bucket gone", "tail-e2e")
	start := time.Now()
	ev := nextEvent(2 * time.Second)
	if ev[0] != "log" || !strings.Contains(ev[1], `"logBody":"bucket gone"`) || !strings.Contains(ev[1], `"type":"error"`) {
		t.Fatalf("event %v", ev)
	}
	t.Logf("tail event %v after publishing", time.Since(start))

	// A record written over HTTP appears in the tail too.
	admin.mustStatus(201, "POST", "/log", map[string]string{"app": "ACME-S3", "type": "error", "logBody": "posted over HTTP"})
	if ev := nextEvent(2 * time.Second); ev[0] != "log" || !strings.Contains(ev[1], `"logBody":"posted over HTTP"`) {
		t.Fatalf("event for the POST /log record: %v", ev)
	}
	admin.mustStatus(201, "POST", "/log", map[string]string{"app": "ACME-S3", "type": "log", "logBody": "filtered out by type"})

	// Signing out ends the open stream within the gateway's re-check
	// interval (2 s), though the stream itself was admitted before.
	admin.mustStatus(200, "DELETE", "/signout", nil)
	out := time.Now()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-events:
			if !ok {
				t.Logf("stream ended %v after sign-out", time.Since(out))
				return
			}
		case <-deadline:
			t.Fatal("the live tail still streams 10 s after its session signed out")
		}
	}
}
