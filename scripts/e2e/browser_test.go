package e2e

// Small helpers for driving the web console in headless Chromium with
// chromedp (TestConsoleInBrowser). Elements are found the way a person or a
// screen reader finds them: by role and accessible name, by label, by text.
// Lookups and waits are JavaScript expressions evaluated with the DevTools
// protocol (which the page's Content-Security-Policy does not govern, and
// which never use eval in the page); clicks and typing are real input events.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's Chromium (scripts/ensure-packages.sh installs
// it; `make test` runs that first).
const chromiumPath = "/usr/bin/chromium"

// stepTimeout bounds every browser action and every wait.
const stepTimeout = 15 * time.Second

// chromiumFlags: headless, no sandbox (the tests run as root), and no
// background connections to Google (the machine has no outside network).
var chromiumFlags = []chromedp.ExecAllocatorOption{
	chromedp.ExecPath(chromiumPath),
	chromedp.Headless,
	chromedp.NoSandbox,
	chromedp.DisableGPU,
	chromedp.NoFirstRun,
	chromedp.NoDefaultBrowserCheck,
	chromedp.Flag("disable-quic", true),
	chromedp.Flag("disable-background-networking", true),
	chromedp.Flag("disable-component-update", true),
	chromedp.Flag("disable-sync", true),
	chromedp.Flag("disable-default-apps", true),
	chromedp.Flag("disable-extensions", true),
	chromedp.Flag("disable-dev-shm-usage", true),
	chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
	chromedp.Flag("metrics-recording-only", true),
	chromedp.Flag("password-store", "basic"),
	chromedp.Flag("use-mock-keychain", true),
}

// browserRun is one Chromium process and the pages (tabs, each in its own
// browser context) of a test.
type browserRun struct {
	t         *testing.T
	ctx       context.Context // the browser's; ends with the test's bound
	artifacts string
	downloads string

	mu       sync.Mutex
	stepName string
	tabs     []*tab
	problems []string // CSP violations and page errors, "step: tab: text"
}

// browserArtifacts is the start of every browser test: it skips with
// CONSOLE_BROWSER=skip, fails (not skips) when Chromium is missing (`make
// test` installs it with scripts/ensure-packages.sh), and returns the
// screenshots' directory, artifacts/console.
func browserArtifacts(t *testing.T) string {
	t.Helper()
	if os.Getenv("CONSOLE_BROWSER") == "skip" {
		t.Skip("CONSOLE_BROWSER=skip")
	}
	if fi, err := os.Stat(chromiumPath); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s is required for the browser tests: run scripts/ensure-packages.sh (make test does), or set CONSOLE_BROWSER=skip (%v)", chromiumPath, err)
	}
	artifacts, err := filepath.Abs(filepath.Join("artifacts", "console"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	return artifacts
}

func startBrowser(ctx context.Context, t *testing.T, artifacts string) *browserRun {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, chromiumFlags...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	start := time.Now()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	v, err := chromedp.CallBrowser(bctx, browser.GetVersion, cdp.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%s) started in %v", v.Product, chromiumPath, time.Since(start).Round(time.Millisecond))
	return &browserRun{t: t, ctx: bctx, artifacts: artifacts, downloads: t.TempDir(), stepName: "start"}
}

// tab is a page in a browser context of its own (its own cookies), with
// the viewport given.
type tab struct {
	b      *browserRun
	name   string
	ctx    context.Context
	cancel context.CancelFunc
	dir    string // downloads

	barrier chan string // console markers seen, for drain
}

func (b *browserRun) newTab(name string, width, height int64) *tab {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	tb := &tab{b: b, name: name, ctx: ctx, cancel: cancel, dir: filepath.Join(b.downloads, name), barrier: make(chan string, 16)}
	if err := os.MkdirAll(tb.dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	// The first action on a context opens its page and binds the page's
	// life to the context it runs with: this one, with no step timeout.
	if err := chromedp.Do(ctx); err != nil {
		b.t.Fatalf("%s: open a page: %v", name, err)
	}
	tb.run("set the viewport", chromedp.EmulateViewport(width, height))
	// Content-Security-Policy reports (the browser logs them with the source
	// "security") and uncaught exceptions or promise rejections are failures.
	csp := regexp.MustCompile(`(?i)Content.Security.Policy|Refused to`)
	messages := chromedp.Console(ctx) // subscribed from here on
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			switch {
			case m.Type == chromedp.ConsoleDebug && strings.HasPrefix(m.Text, "e2e-barrier "):
				select {
				case tb.barrier <- m.Text:
				case <-ctx.Done():
					return
				}
			case m.IsException():
				b.problem(tb, "page error: "+m.Text)
			case csp.MatchString(m.Text), m.Source == "security" && m.Type == chromedp.ConsoleError:
				b.problem(tb, m.Text)
			}
		}
	}()
	_, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, BrowserContextID: chromedp.FromContext(ctx).BrowserContextID,
		DownloadPath: tb.dir, EventsEnabled: new(true),
	})
	if err != nil {
		b.t.Fatalf("%s: downloads: %v", name, err)
	}
	b.mu.Lock()
	b.tabs = append(b.tabs, tb)
	b.mu.Unlock()
	return tb
}

// close ends the page and its browser context.
func (tb *tab) close() {
	tb.drain()
	tb.cancel()
	b := tb.b
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, o := range b.tabs {
		if o == tb {
			b.tabs = append(b.tabs[:i], b.tabs[i+1:]...)
			break
		}
	}
}

func (b *browserRun) problem(tb *tab, text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, fmt.Sprintf("%s: %s: %s", b.stepName, tb.name, text))
}

func (b *browserRun) takeProblems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

// drain waits until the console messages the page logged so far have been
// looked at: it logs a marker and waits for it (the messages keep their order).
func (tb *tab) drain() {
	marker := fmt.Sprintf("e2e-barrier %d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf("console.debug(%q)", marker))); err != nil {
		tb.b.t.Errorf("%s: console marker: %v", tb.name, err)
		return
	}
	for {
		select {
		case m := <-tb.barrier:
			if m == marker {
				return
			}
		case <-ctx.Done():
			tb.b.t.Errorf("%s: the console marker never arrived", tb.name)
			return
		}
	}
}

// step runs one scenario step. A failing step (or one after which the
// browser reported a CSP violation or a page error) leaves
// failed-<step>.png of main, and failed-<step>-<tab>.png of every other
// open page, in the artifacts.
func (b *browserRun) step(name string, main *tab, fn func()) {
	b.t.Helper()
	b.mu.Lock()
	b.stepName = name
	b.mu.Unlock()
	start := time.Now()
	failedBefore, finished := b.t.Failed(), false
	defer func() {
		if finished && (failedBefore || !b.t.Failed()) {
			return
		}
		slug := strings.ReplaceAll(name, " ", "-")
		b.mu.Lock()
		tabs := append([]*tab(nil), b.tabs...)
		b.mu.Unlock()
		for _, tb := range tabs {
			file := "failed-" + slug
			if tb != main {
				file += "-" + tb.name
			}
			if err := tb.screenshot(file); err != nil {
				b.t.Logf("screenshot %s: %v", file, err)
			}
		}
		b.t.Logf("step %q failed after %v; screenshots in %s", name, time.Since(start).Round(time.Millisecond), b.artifacts)
	}()
	fn()
	b.mu.Lock()
	tabs := append([]*tab(nil), b.tabs...)
	b.mu.Unlock()
	for _, tb := range tabs {
		tb.drain()
	}
	if p := b.takeProblems(); len(p) > 0 {
		b.t.Errorf("the browser reported problems:\n%s", strings.Join(p, "\n"))
	}
	finished = true
	b.t.Logf("step %q: %v", name, time.Since(start).Round(time.Millisecond))
}

// run runs actions on the page, within stepTimeout.
func (tb *tab) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.b.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.b.t.Fatalf("%s: %s: %v", tb.name, what, err)
	}
}

// goTo opens url and waits for its load event. (chromedp.Navigate can miss
// the first navigation of a new page: it only knows the page's frame once a
// navigation was reported.)
func (tb *tab) goTo(url string) {
	tb.b.t.Helper()
	tb.load("open "+url, func(ctx context.Context, t *chromedp.Target) error {
		res, err := cdp.Call(ctx, t, page.Navigate, page.NavigateParams{URL: url})
		if err == nil && res.ErrorText != "" {
			err = fmt.Errorf("%s", res.ErrorText)
		}
		return err
	})
}

// reload reloads the page and waits for its load event.
func (tb *tab) reload() {
	tb.b.t.Helper()
	tb.load("reload", func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.Reload, page.ReloadParams{})
		return err
	})
}

func (tb *tab) load(what string, start func(context.Context, *chromedp.Target) error) {
	tb.b.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Func(start))); err != nil {
		tb.b.t.Fatalf("%s: %s: %v", tb.name, what, err)
	}
}

// press sends keys (kb constants or text) to the focused element.
func (tb *tab) press(keys string) { tb.run(fmt.Sprintf("press %q", keys), chromedp.KeyEvent(keys)) }

// screenshot writes the whole page (not only the viewport) as <name>.png.
func (tb *tab) screenshot(name string) error {
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	m, err := chromedp.Call(ctx, page.GetLayoutMetrics, cdp.Empty{})
	if err != nil {
		return err
	}
	vp := m.CSSLayoutViewport
	w, h := float64(vp.ClientWidth), float64(vp.ClientHeight)
	if c := m.CSSContentSize; c != nil {
		w, h = max(w, c.Width), max(h, c.Height)
	}
	shot, err := chromedp.Call(ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatPng, CaptureBeyondViewport: new(true),
		Clip: &page.Viewport{Width: w, Height: h, Scale: 1},
	})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(tb.b.artifacts, name+".png"), shot.Data, 0o644)
}

// shot is screenshot that fails the test on an error.
func (tb *tab) shot(name string) {
	tb.b.t.Helper()
	if err := tb.screenshot(name); err != nil {
		tb.b.t.Fatalf("%s: screenshot %s: %v", tb.name, name, err)
	}
}

// jsLib is in scope of every expression evaluated by the helpers. Lookups
// give arrays of elements; roots are arrays too.
const jsLib = `const q = {
  norm: (s) => (s || '').replace(/\s+/g, ' ').trim(),
  match: (s, want) => want instanceof RegExp ? want.test(s) : s === want,
  uniq: (els) => [...new Set(els)].filter(Boolean),
  // shown: rendered with a size and not visibility:hidden (what a person sees)
  shown: (el) => {
    if (!el || !el.isConnected || !el.checkVisibility({ visibilityProperty: true })) return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  },
  // exposed: not hidden from assistive technology
  exposed: (el) => el.checkVisibility() && !el.closest('[aria-hidden="true"]'),
  roles: {
    button: 'button, [role=button], input[type=submit], input[type=button]', link: 'a[href]',
    heading: 'h1, h2, h3, h4, h5, h6', alert: '[role=alert]', status: '[role=status]', img: 'img[alt]',
    cell: 'td, [role=cell]', row: 'tr', table: 'table', navigation: 'nav, [role=navigation]',
  },
  name: (el) => el.getAttribute('aria-label') || (el.tagName === 'IMG' ? el.alt : el.textContent),
  role: (roots, role, want) => q.uniq(roots.flatMap((r) => [...r.querySelectorAll(q.roles[role] || role)]))
    .filter((el) => q.exposed(el) && (want === null || q.match(q.norm(q.name(el)), want))),
  label: (roots, want) => q.uniq(roots.flatMap((r) => [
    ...[...r.querySelectorAll('label')].filter((l) => q.match(q.norm(l.textContent), want)).map((l) => l.control),
    ...[...r.querySelectorAll('[aria-label]')].filter((el) => q.match(q.norm(el.getAttribute('aria-label')), want))])),
  // text: the innermost elements whose whole text is want
  text: (roots, want) => q.uniq(roots.flatMap((r) => [...r.querySelectorAll('*')]
    .filter((el) => q.match(q.norm(el.textContent), want) && ![...el.children].some((c) => q.match(q.norm(c.textContent), want))))),
  has: (el, want) => want instanceof RegExp ? want.test(q.norm(el.textContent)) : q.norm(el.textContent).includes(want),
  // fact: the dd after the dt named want
  fact: (roots, want) => q.uniq(roots.flatMap((r) => [...r.querySelectorAll('dt')]
    .filter((dt) => q.norm(dt.textContent) === want).map((dt) => dt.nextElementSibling))),
  one: (els) => {
    if (els.length !== 1) return { err: els.length + ' elements match' };
    const el = els[0];
    if (!q.shown(el)) return { err: 'not visible' };
    return { el };
  },
};
`

// js wraps an expression with jsLib in scope.
func js(expr string) string { return "(() => {\n" + jsLib + "return (" + expr + ");\n})()" }

// rx is a regular expression (JavaScript syntax) matched against
// whitespace-normalized text, where a string would match the whole text.
type rx string

func jsMatch(want any) string {
	switch w := want.(type) {
	case nil:
		return "null"
	case rx:
		b, _ := json.Marshal(string(w))
		return "new RegExp(" + string(b) + ")"
	case string:
		b, _ := json.Marshal(w)
		return string(b)
	}
	panic(fmt.Sprintf("jsMatch: %T", want))
}

// loc finds elements: js is an expression giving an array of elements, desc
// says what for error messages.
type loc struct{ js, desc string }

var doc = loc{"[document]", "the page"}

func (l loc) sub(js, desc string) loc {
	if l.js == doc.js {
		return loc{js, desc}
	}
	return loc{js, desc + " in " + l.desc}
}

// role: elements of an ARIA role (or a tag name, such as h1) whose
// accessible name is name (a string, an rx, or nil for any).
func (l loc) role(role string, name any) loc {
	return l.sub(fmt.Sprintf("q.role(%s, %q, %s)", l.js, role, jsMatch(name)), fmt.Sprintf("%s %v", role, name))
}

// label: form controls labelled text (label element or aria-label).
func (l loc) label(text string) loc {
	return l.sub(fmt.Sprintf("q.label(%s, %s)", l.js, jsMatch(text)), fmt.Sprintf("field %q", text))
}

func (l loc) css(sel string) loc {
	return l.sub(fmt.Sprintf("q.uniq(%s.flatMap((r) => [...r.querySelectorAll(%q)]))", l.js, sel), sel)
}

// text: the innermost elements whose whole text is want (string or rx).
func (l loc) text(want any) loc {
	return l.sub(fmt.Sprintf("q.text(%s, %s)", l.js, jsMatch(want)), fmt.Sprintf("text %v", want))
}

// fact: the value (dd) of the term (dt) named term.
func (l loc) fact(term string) loc {
	return l.sub(fmt.Sprintf("q.fact(%s, %s)", l.js, jsMatch(term)), fmt.Sprintf("fact %q", term))
}

// hasText keeps the elements whose text contains want (or matches an rx).
func (l loc) hasText(want any) loc {
	return loc{fmt.Sprintf("%s.filter((el) => q.has(el, %s))", l.js, jsMatch(want)), fmt.Sprintf("%s with text %v", l.desc, want)}
}

func (l loc) nth(i int) loc {
	return loc{fmt.Sprintf("%s.slice(%d, %d)", l.js, i, i+1), fmt.Sprintf("%s #%d", l.desc, i+1)}
}

func (l loc) parent() loc {
	return loc{fmt.Sprintf("q.uniq(%s.map((el) => el.parentElement))", l.js), "parent of " + l.desc}
}

func (l loc) closest(sel string) loc {
	return loc{fmt.Sprintf("q.uniq(%s.map((el) => el.closest(%q)))", l.js, sel), sel + " around " + l.desc}
}

// evalJS evaluates expr (jsLib in scope, promises awaited) into out.
func (tb *tab) evalJS(ctx context.Context, expr string, out any) error {
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](js(expr), chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// eval is evalJS within stepTimeout, failing the test on an error.
func (tb *tab) eval(expr string, out any) {
	tb.b.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	if err := tb.evalJS(ctx, expr, out); err != nil {
		tb.b.t.Fatalf("%s: %v\n%s", tb.name, err, expr)
	}
}

// poll evaluates expr until it gives {ok: true, ...} (decoded into out when
// not nil) or within ends; expr may explain itself with {why: "..."}.
// It returns the time it took.
func (tb *tab) poll(what string, within time.Duration, expr string, out any) time.Duration {
	tb.b.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(tb.ctx, within)
	defer cancel()
	var last string
	for {
		var raw json.RawMessage
		err := tb.evalJS(ctx, expr, &raw)
		var r struct {
			OK  bool   `json:"ok"`
			Why string `json:"why"`
		}
		switch {
		case err != nil && ctx.Err() == nil:
			last = err.Error() // the page may be navigating
		case err != nil:
		case json.Unmarshal(raw, &r) != nil:
			tb.b.t.Fatalf("%s: %s: bad result %s", tb.name, what, raw)
		case r.OK:
			if out != nil {
				if err := json.Unmarshal(raw, out); err != nil {
					tb.b.t.Fatalf("%s: %s: %v", tb.name, what, err)
				}
			}
			return time.Since(start)
		default:
			last = r.Why
		}
		select {
		case <-ctx.Done():
			tb.b.t.Fatalf("%s: %s: not within %v (%s)", tb.name, what, within, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitFor waits until l is exactly one visible element.
func (tb *tab) waitFor(l loc) { tb.b.t.Helper(); tb.waitWithin(l, stepTimeout) }

func (tb *tab) waitWithin(l loc, within time.Duration) time.Duration {
	tb.b.t.Helper()
	return tb.poll("wait for "+l.desc, within, fmt.Sprintf(`(() => { const r = q.one(%s); return r.err ? { why: r.err } : { ok: true }; })()`, l.js), nil)
}

// waitJS waits until the boolean expression cond holds.
func (tb *tab) waitJS(what, cond string) {
	tb.b.t.Helper()
	tb.poll(what, stepTimeout, fmt.Sprintf(`(%s) ? { ok: true } : { why: 'not yet' }`, cond), nil)
}

// count is the number of elements of l shown (now, no waiting).
func (tb *tab) count(l loc) int {
	tb.b.t.Helper()
	var n int
	tb.eval(fmt.Sprintf("%s.filter(q.shown).length", l.js), &n)
	return n
}

// textOf is the whitespace-normalized text of the single element of l.
func (tb *tab) textOf(l loc) string {
	tb.b.t.Helper()
	var s string
	tb.poll("read "+l.desc, stepTimeout, fmt.Sprintf(`(() => { const r = q.one(%s); return r.err ? { why: r.err } : { ok: true, text: q.norm(r.el.textContent) }; })()`, l.js), &struct {
		Text *string `json:"text"`
	}{&s})
	return s
}

// value is the value of the single form control of l.
func (tb *tab) value(l loc) string {
	tb.b.t.Helper()
	var s string
	tb.poll("read "+l.desc, stepTimeout, fmt.Sprintf(`(() => { const r = q.one(%s); return r.err ? { why: r.err } : { ok: true, value: r.el.value }; })()`, l.js), &struct {
		Value *string `json:"value"`
	}{&s})
	return s
}

// actionable is the state a click or typing needs: one visible, enabled
// element, scrolled into view, in the same place as at the previous try
// (not moving), that is itself what a click at its centre hits.
const actionable = `(() => {
  const r = q.one(%s);
  if (r.err) return { why: r.err };
  const el = r.el;
  if (el.disabled || el.closest('fieldset[disabled]')) return { why: 'disabled' };
  el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
  const b = el.getBoundingClientRect();
  const box = [b.left, b.top, b.width, b.height].join();
  if (window.e2eBox !== box) { window.e2eBox = box; return { why: 'moving' }; }
  const x = b.left + b.width / 2, y = b.top + b.height / 2;
  const hit = document.elementFromPoint(x, y);
  if (!hit || !(el === hit || el.contains(hit) || (el.control && el.control === hit)))
    return { why: 'covered by ' + (hit ? hit.outerHTML.slice(0, 80) : 'nothing') };
  %s
  return { ok: true, x, y };
})()`

// armClick records where the next click lands: e2eClick is "hit" when on
// the element (or inside it), else what it hit.
const armClick = `window.removeEventListener('click', window.e2eOnClick, true);
  window.e2eClick = 'no click';
  window.e2eOnClick = (e) => { window.e2eClick = el.contains(e.target) ? 'hit' : 'missed, on ' + e.target.outerHTML.slice(0, 80); };
  window.addEventListener('click', window.e2eOnClick, { capture: true, once: true });`

// click clicks the middle of the single element of l with the mouse. A
// click that lands elsewhere (the page moved in between) is tried again.
func (tb *tab) click(l loc) {
	tb.b.t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		var at struct{ X, Y float64 }
		tb.poll("click "+l.desc, time.Until(deadline), fmt.Sprintf(actionable, l.js, armClick), &at)
		tb.run("click "+l.desc, chromedp.MouseClickXY(at.X, at.Y))
		var landed string
		ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
		err := tb.evalJS(ctx, "window.e2eClick || 'hit'", &landed)
		cancel()
		if err != nil || landed == "hit" { // an error: the click left the page
			return
		}
		if time.Now().After(deadline) {
			tb.b.t.Fatalf("%s: click %s: %s", tb.name, l.desc, landed)
		}
	}
}

// fill empties the single text field of l, focuses it and types s on the
// keyboard.
func (tb *tab) fill(l loc, s string) {
	tb.b.t.Helper()
	tb.poll("fill "+l.desc, stepTimeout, fmt.Sprintf(actionable, l.js,
		`if (el.readOnly) return { why: 'read-only' }; el.focus(); el.value = ''; if (document.activeElement !== el) return { why: 'no focus' };`), nil)
	tb.press(s)
	if got := tb.value(l); got != s {
		tb.b.t.Fatalf("%s: typed %q into %s, it holds %q", tb.name, s, l.desc, got)
	}
}

// focused says whether the single element of l has the keyboard focus.
func (tb *tab) focused(l loc) bool {
	tb.b.t.Helper()
	var ok bool
	tb.eval(fmt.Sprintf("(() => { const r = q.one(%s); return !r.err && document.activeElement === r.el; })()", l.js), &ok)
	return ok
}

// selectOption chooses the option valued v of the single select of l, as
// a choice in the list does (input and change events).
func (tb *tab) selectOption(l loc, v string) {
	tb.b.t.Helper()
	tb.poll(fmt.Sprintf("select %q in %s", v, l.desc), stepTimeout, fmt.Sprintf(actionable, l.js, fmt.Sprintf(
		`if (![...el.options].some((o) => o.value === %[1]q)) return { why: 'no option %[1]s' };
  el.focus(); el.value = %[1]q;
  el.dispatchEvent(new Event('input', { bubbles: true })); el.dispatchEvent(new Event('change', { bubbles: true }));`, v)), nil)
}

// setFiles puts files (paths) into the single file input of l, as the
// file chooser does.
func (tb *tab) setFiles(l loc, files ...string) {
	tb.b.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	tb.poll("find "+l.desc, stepTimeout, fmt.Sprintf(`%s.length === 1 ? { ok: true } : { why: 'not one element' }`, l.js), nil)
	obj, err := chromedp.Run(ctx, chromedp.Evaluate[*runtime.RemoteObject](js(l.js+"[0]")))
	if err == nil {
		_, err = chromedp.Call(ctx, dom.SetFileInputFiles, dom.SetFileInputFilesParams{Files: files, ObjectID: obj.ObjectID})
	}
	if err != nil {
		tb.b.t.Fatalf("%s: set files of %s: %v", tb.name, l.desc, err)
	}
}

// download clicks l and waits for the download it starts; it returns the
// file name the browser suggests and the bytes saved.
func (tb *tab) download(l loc) (string, []byte) {
	tb.b.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	begins := chromedp.BrowserEvents(ctx, browser.DownloadWillBegin)
	progress := chromedp.BrowserEvents(ctx, browser.DownloadProgress)
	tb.click(l)
	var name, guid string
	for ev, err := range begins {
		if err != nil {
			tb.b.t.Fatalf("%s: no download after a click on %s: %v", tb.name, l.desc, err)
		}
		name, guid = ev.SuggestedFilename, ev.GUID
		break
	}
	for ev, err := range progress {
		if err != nil {
			tb.b.t.Fatalf("%s: download %s: %v", tb.name, name, err)
		}
		if ev.GUID != guid || ev.State == browser.DownloadProgressStateInProgress {
			continue
		}
		if ev.State != browser.DownloadProgressStateCompleted {
			tb.b.t.Fatalf("%s: download %s: %s", tb.name, name, ev.State)
		}
		break
	}
	data, err := os.ReadFile(filepath.Join(tb.dir, guid))
	if err != nil {
		tb.b.t.Fatal(err)
	}
	return name, data
}

// acceptDialog accepts the next JavaScript dialog (confirm) the page opens;
// the func returned waits for it and gives its message.
func (tb *tab) acceptDialog() func() string {
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	msg := make(chan string, 1)
	go func() {
		defer cancel()
		defer close(msg)
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err == nil {
				msg <- ev.Message
			}
			return
		}
	}()
	return func() string {
		tb.b.t.Helper()
		m, ok := <-msg
		if !ok {
			tb.b.t.Fatalf("%s: no dialog opened", tb.name)
		}
		return m
	}
}

// holdRequests holds the page's requests whose URL matches pattern (the
// Fetch domain's wildcards): they never get an answer. It gives the
// requests as they are held and a func that stops holding new ones.
func (tb *tab) holdRequests(pattern string) (<-chan *fetch.EventRequestPaused, func()) {
	tb.b.t.Helper()
	ctx, cancel := context.WithCancel(tb.ctx)
	held := make(chan *fetch.EventRequestPaused, 8)
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			held <- &ev
		}
	}()
	tb.run("hold "+pattern, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: pattern, RequestStage: fetch.RequestStageRequest}}})
		return err
	}))
	return held, func() {
		tb.b.t.Helper()
		tb.run("release "+pattern, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, fetch.Disable, cdp.Empty{})
			return err
		}))
		cancel()
	}
}

// waitText waits until l is exactly one visible element whose
// whitespace-normalized text is want (a string) or matches it (an rx).
func (tb *tab) waitText(l loc, want any) {
	tb.b.t.Helper()
	tb.poll(fmt.Sprintf("%s to read %v", l.desc, want), stepTimeout, fmt.Sprintf(`(() => {
  const r = q.one(%s);
  if (r.err) return { why: r.err };
  const text = q.norm(r.el.textContent);
  return q.match(text, %s) ? { ok: true } : { why: 'it reads ' + JSON.stringify(text) };
})()`, l.js, jsMatch(want)), nil)
}

// redraw runs trigger, which reloads the rows of the table l, and waits
// until the rows shown are new ones (or the table's section shows an error).
func (tb *tab) redraw(l loc, trigger func()) {
	tb.b.t.Helper()
	tb.eval(fmt.Sprintf(`%s.forEach((t) => { for (const r of t.tBodies[0].rows) r.dataset.e2eStale = '1'; }) || true`, l.js), nil)
	trigger()
	var r struct {
		Error string `json:"error"`
	}
	tb.poll(l.desc+" redrawn", stepTimeout, fmt.Sprintf(`(() => {
  const r = q.one(%s);
  if (r.err) return { why: r.err };
  const alert = [...r.el.closest('section').querySelectorAll('[role=alert]')].find(q.shown);
  if (alert) return { ok: true, error: q.norm(alert.textContent) };
  const rows = [...r.el.tBodies[0].rows];
  return rows.length && !rows.some((row) => row.dataset.e2eStale) ? { ok: true } : { why: 'the old rows are shown' };
})()`, l.js), &r)
	if r.Error != "" {
		tb.b.t.Fatalf("%s: %s: %s", tb.name, l.desc, r.Error)
	}
}

// reloadUntil clicks button, which reloads the table l, until cond holds:
// a try every 250 ms, for up to stepTimeout.
func (tb *tab) reloadUntil(what string, button, l loc, cond func() bool) {
	tb.b.t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		tb.redraw(l, func() { tb.click(button) })
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			tb.b.t.Fatalf("%s: %s: not within %v", tb.name, what, stepTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
