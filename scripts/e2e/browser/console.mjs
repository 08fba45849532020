// Browser scenarios of the web console, run by scripts/e2e
// (TestConsoleInBrowser) against a platform it started. Debian's Chromium,
// driven by playwright-core; no browser download, no external network.
//
// Protocol with the Go test: this script prints "publish <body>" when the
// live tail is open and waits for a "published" line on stdin; the record
// must then appear in the tail within one second.
import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(k + ' is not set'); return v; };
const base = env('GATEWAY_URL');
const artifacts = env('ARTIFACTS');
const admin = { email: env('ADMIN_EMAIL'), password: env('ADMIN_PASSWORD') };
const user = { email: env('USER_EMAIL'), password: env('USER_PASSWORD') };

const stdinLines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function publish(body) {
  console.log('publish ' + body);
  const { value, done } = await stdinLines.next();
  assert.ok(!done && value === 'published', 'no publish confirmation from the Go test');
}

// poison has the Go test publish a message that can never be a record,
// carrying text.
async function poison(text) {
  console.log('poison ' + text);
  const { value, done } = await stdinLines.next();
  assert.ok(!done && value === 'published', 'no publish confirmation from the Go test');
}

// A 2×2 PNG written by the Go test, for the avatar.
const png = await readFile(env('AVATAR_PNG'));

const browser = await chromium.launch({
  executablePath: env('CHROMIUM'),
  headless: true,
  // Flags from the machine notes: no sandbox as root, and no background
  // connections to Google (the network is closed).
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const problems = [];
let step = 'start';
const t0 = Date.now();
const log = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

async function newPage(viewport = { width: 1280, height: 900 }) {
  const context = await browser.newContext({ viewport, acceptDownloads: true });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content.Security.Policy|Refused to/i.test(m.text())) problems.push(`${step}: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`${step}: page error: ${e.message}`));
  return page;
}
const shot = (page, name, full = true) => page.screenshot({ path: join(artifacts, name + '.png'), fullPage: full });

async function signIn(page, who) {
  await page.goto(base + '/');
  await page.waitForURL(/\/console\/#\/signin$/);
  await page.getByLabel('E-mail').fill(who.email);
  await page.getByLabel('Password').fill(who.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Profile', level: 1 }).waitFor();
}

try {
  // --- sign in: a wrong password first, with a clear message ---
  step = 'sign in';
  const page = await newPage();
  await page.goto(base + '/');
  await page.waitForURL(/\/console\/#\/signin$/);
  await page.getByLabel('E-mail').fill(user.email);
  await page.getByLabel('Password').fill('not the password');
  await page.keyboard.press('Enter'); // keyboard only
  await page.getByRole('alert').filter({ hasText: 'The e-mail or the password is wrong.' }).waitFor();
  await shot(page, '01-signin-error');
  // Throttling: repeated failures for one account lock it; the page says
  // how long to wait (from the 429's retryAfter) and counts down.
  await page.getByLabel('E-mail').fill('nobody@example.com');
  for (let i = 0; i < 8; i++) {
    await page.getByLabel('Password').fill('wrong password ' + i);
    await page.getByRole('button', { name: 'Sign in' }).click();
    const alert = page.getByRole('alert');
    await alert.filter({ hasText: /wrong|Try again in/ }).waitFor();
    if (/Try again in \d+ seconds?\./.test(await alert.textContent())) break;
    assert.ok(i < 7, 'never throttled');
  }
  assert.ok(await page.getByRole('button', { name: 'Sign in' }).isDisabled(), 'sign-in button enabled while locked');
  await shot(page, '01-signin-throttled');
  await page.reload();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await page.getByLabel('E-mail').fill(user.email);
  await page.getByLabel('Password').fill(user.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Profile', level: 1 }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'Users' }).isVisible(), false, 'a user sees the Users link');
  log('signed in');

  // --- edit the profile; it survives a reload (stored by the service) ---
  step = 'profile';
  await page.getByLabel('Full name').fill('Grace B. Hopper');
  await page.getByLabel('Sector').fill('Navy');
  await page.getByRole('button', { name: 'Save profile' }).click();
  await page.getByRole('status').filter({ hasText: 'Profile saved.' }).waitFor();
  await page.getByLabel('Image (JPEG, PNG, GIF or WebP)').setInputFiles({ name: 'me.png', mimeType: 'image/png', buffer: png });
  await page.getByRole('button', { name: 'Upload avatar' }).click();
  await page.getByRole('status').filter({ hasText: 'Avatar updated.' }).waitFor();
  const avatar = page.getByRole('img', { name: 'Your avatar' });
  await avatar.waitFor();
  // The status comes when the src is set; the image may still be loading.
  const width = await avatar.evaluate((img) => img.complete ? img.naturalWidth : new Promise((done) => {
    img.addEventListener('load', () => done(img.naturalWidth), { once: true });
    img.addEventListener('error', () => done(0), { once: true });
  }));
  assert.equal(width, 2, 'avatar image not loaded');
  await page.reload();
  await page.getByRole('heading', { name: 'Profile', level: 1 }).waitFor();
  assert.equal(await page.getByLabel('Full name').inputValue(), 'Grace B. Hopper');
  assert.equal(await page.getByLabel('Sector').inputValue(), 'Navy');
  assert.match(await page.getByLabel('Avatar URL').inputValue(), /\/images\/[0-9a-f]{32}$/);
  await page.getByRole('cell', { name: /\(this one\)/ }).waitFor();
  await shot(page, '02-profile');
  log('profile edited');

  // --- files: upload with the picker and by drag and drop, then download ---
  step = 'files';
  await page.getByRole('link', { name: 'Files' }).click();
  await page.getByRole('heading', { name: 'Files', level: 1 }).waitFor();
  const content = 'Console end-to-end test\n'.repeat(2000) + Date.now();
  await page.getByLabel('Note stored with the next uploads (optional)').fill('{"from":"browser"}');
  await page.locator('#files-input').setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from(content) });
  await page.locator('.queue li', { hasText: 'notes.txt' }).getByText('done').waitFor();
  // Drag and drop: a drop event carrying a file, as a browser fires it.
  await page.locator('#dropzone').evaluate((zone) => {
    const dt = new DataTransfer();
    dt.items.add(new File(['dropped bytes'], 'dropped.txt', { type: 'text/plain' }));
    zone.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  });
  await page.locator('.queue li', { hasText: 'dropped.txt' }).getByText('done').waitFor();
  // Cancel: an upload held on the way (the request never completes) is
  // aborted by its Cancel button.
  await page.route('**/upload/file', () => {}); // hold it
  await page.locator('#files-input').setInputFiles({ name: 'held.bin', mimeType: 'application/octet-stream', buffer: Buffer.alloc(4096, 1) });
  const heldItem = page.locator('.queue li', { hasText: 'held.bin' });
  await heldItem.getByRole('button', { name: 'Cancel' }).click();
  await heldItem.getByText('cancelled').waitFor();
  await page.unroute('**/upload/file');
  const rows = page.locator('table tbody tr');
  await rows.first().getByRole('button', { name: 'dropped.txt' }).waitFor(); // newest first
  await rows.nth(1).getByRole('button', { name: 'notes.txt' }).waitFor();
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    rows.nth(1).getByRole('link', { name: 'Download' }).click(),
  ]);
  assert.equal(download.suggestedFilename(), 'notes.txt');
  assert.equal(await readFile(await download.path(), 'utf8'), content, 'downloaded bytes differ');
  await rows.nth(1).getByRole('button', { name: 'notes.txt' }).click();
  const details = page.locator('#file-details');
  await details.getByText('{"from":"browser"}').waitFor();
  await details.getByText('text/plain; charset=utf-8').waitFor();
  await shot(page, '03-files');
  log('uploaded and downloaded');

  // --- phone-sized screen ---
  step = 'phone';
  const phone = await newPage({ width: 390, height: 844 });
  await signIn(phone, user);
  await phone.getByRole('link', { name: 'Files' }).click();
  await phone.getByRole('button', { name: 'notes.txt' }).waitFor();
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the files page is ${overflow}px wider than a phone screen`);
  await shot(phone, '04-files-phone');
  // The phone's session, ended from the first browser.
  await page.getByRole('link', { name: 'Profile' }).click();
  const sessionRows = page.getByRole('heading', { name: 'Sessions' }).locator('..').locator('tbody tr');
  await sessionRows.nth(1).waitFor();
  assert.equal(await sessionRows.count(), 2);
  await sessionRows.getByRole('button', { name: 'End' }).click();
  await page.getByRole('status').filter({ hasText: 'Session ended.' }).waitFor();
  // The console reloads the list before it says so: the row is gone now.
  assert.equal(await sessionRows.count(), 1, 'the ended session is still listed when "Session ended." shows');
  await phone.reload();
  await phone.getByRole('heading', { name: 'Sign in' }).waitFor(); // that session is gone
  await phone.context().close();

  // --- sign out ---
  step = 'sign out';
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  log('signed out');

  // --- administrator: users, logs, live tail ---
  step = 'admin users';
  const adm = await newPage();
  await signIn(adm, admin);
  await adm.getByRole('link', { name: 'Users' }).click();
  await adm.getByRole('cell', { name: user.email }).waitFor();
  const form = adm.locator('form', { has: adm.getByRole('heading', { name: 'Create a user' }) });
  await form.getByLabel('E-mail').fill('temp@example.com');
  await form.getByLabel('Full name').fill('Temporary Person');
  await form.getByLabel('EDV').fill('E-99');
  await form.getByLabel('Initial password').fill('temporary password');
  await form.getByRole('button', { name: 'Create user' }).click();
  await adm.getByRole('status').filter({ hasText: 'temp@example.com created.' }).waitFor();
  await adm.getByLabel('Role of temp@example.com').selectOption('admin');
  await adm.getByRole('status').filter({ hasText: 'temp@example.com is now admin.' }).waitFor();
  await shot(adm, '05-users');
  adm.once('dialog', (d) => d.accept());
  await adm.getByRole('row', { name: /temp@example\.com/ }).getByRole('button', { name: 'Delete' }).click();
  await adm.getByRole('status').filter({ hasText: 'temp@example.com deleted.' }).waitFor();
  // The list is reloaded before the status says so.
  assert.equal(await adm.getByRole('cell', { name: 'temp@example.com' }).count(), 0, 'the deleted user is still listed');

  step = 'admin logs';
  await adm.getByRole('link', { name: 'Logs' }).click();
  await adm.getByRole('heading', { name: 'Logs', level: 1 }).waitFor();
  await adm.getByRole('button', { name: 'Start live tail' }).click();
  await adm.locator('#tail-state').filter({ hasText: /^live$/ }).waitFor();
  const live = adm.getByRole('table', { name: 'Live records' });
  const body = 'disk almost full on build-7 (console test ' + Date.now() + ')';
  await publish(body);
  const sent = Date.now();
  await live.getByRole('button', { name: body }).waitFor({ timeout: 1000 });
  log(`live tail: record shown ${Date.now() - sent} ms after it was published`);
  await live.getByRole('button', { name: body }).click();
  await adm.locator('#log-details pre').filter({ hasText: body }).waitFor();

  // Pause holds new records back; resume shows them.
  await adm.getByRole('button', { name: 'Pause' }).click();
  const held = 'held while paused ' + Date.now();
  await publish(held);
  await adm.locator('#tail-state').filter({ hasText: 'paused, 1 new' }).waitFor();
  assert.equal(await live.getByRole('button', { name: held }).count(), 0, 'shown while paused');
  await adm.getByRole('button', { name: 'Resume' }).click();
  await live.getByRole('button', { name: held }).waitFor({ timeout: 1000 });

  // The listing, filtered by type and app, shows the stored record.
  await adm.getByLabel('Type', { exact: true }).selectOption('error');
  await adm.getByLabel('Application').selectOption('SERVER-APP-A');
  for (let i = 0; ; i++) {
    await adm.getByRole('button', { name: 'Show', exact: true }).click();
    if (await adm.getByRole('table', { name: 'Log records' }).getByRole('button', { name: body }).count()) break;
    assert.ok(i < 20, 'the published record was never listed');
    await adm.waitForTimeout(250);
  }

  // Pages go by cursor: 30 records of SERVER-APP-B, 20 a page.
  await adm.getByLabel('Type', { exact: true }).selectOption('log');
  await adm.getByLabel('Application').selectOption('SERVER-APP-B');
  await adm.getByLabel('Per page').selectOption('20');
  const listed = adm.getByRole('table', { name: 'Log records' });
  const firstBody = async () => (await listed.locator('tbody tr').first().textContent()) || '';
  for (let i = 0; ; i++) {
    await adm.getByRole('button', { name: 'Show', exact: true }).click();
    await adm.waitForTimeout(250);
    if (/paging record 29/.test(await firstBody())) break;
    assert.ok(i < 20, 'the paging records were never listed');
  }
  assert.equal(await listed.locator('tbody tr').count(), 20);
  const pages = adm.getByRole('navigation', { name: 'Log record pages' });
  await pages.getByRole('button', { name: 'Older →' }).click();
  await pages.getByText('Page 2').waitFor();
  await listed.getByRole('button', { name: 'paging record 09' }).waitFor();
  assert.match(await firstBody(), /paging record 09/);
  assert.equal(await listed.locator('tbody tr').count(), 10);
  assert.ok(await pages.getByRole('button', { name: 'Older →' }).isDisabled(), 'older than the oldest page');
  await pages.getByRole('button', { name: '← Newer' }).click();
  await pages.getByText('Page 1').waitFor();
  await listed.getByRole('button', { name: 'paging record 29' }).waitFor();
  log('listing pages by cursor');

  // Dead letters: a message that can never be a record is listed with its
  // reason, and its payload is shown.
  step = 'admin dead letters';
  const marker = 'not a log record ' + Date.now();
  await poison(marker);
  const dead = adm.getByRole('table', { name: 'Dead letters' });
  for (let i = 0; ; i++) {
    await adm.getByRole('button', { name: 'Refresh dead letters' }).click();
    await adm.waitForTimeout(250);
    if (await dead.getByRole('button', { name: /unknown field/ }).count()) break;
    assert.ok(i < 20, 'the poison message was never listed');
  }
  await dead.getByRole('button', { name: /unknown field/ }).first().click();
  await adm.locator('#log-details pre').filter({ hasText: marker }).waitFor();
  await adm.locator('#log-details').getByText('Dead letter', { exact: true }).waitFor();
  log('dead letters ok');

  await adm.locator('#log-details').evaluate((el) => { el.hidden = true; });
  await adm.locator('#status').evaluate((el) => { el.textContent = ''; });
  await shot(adm, '06-logs');
  await adm.setViewportSize({ width: 390, height: 844 });
  await shot(adm, '07-logs-phone');
  log('live tail and listing ok');

  assert.deepEqual(problems, [], 'browser reported problems');
  await browser.close();
  log('all scenarios passed');
  process.exit(0);
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.stack || e}`);
  if (problems.length) console.error('browser problems:\n' + problems.join('\n'));
  for (const ctx of browser.contexts()) {
    for (const [i, p] of ctx.pages().entries()) await p.screenshot({ path: join(artifacts, `failure-${i}.png`), fullPage: true }).catch(() => {});
  }
  await browser.close();
  process.exit(1);
}
