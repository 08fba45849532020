import { api, upload } from './api.js';
import { h, errorBox, say, fmtDate, fmtSize } from './dom.js';

const uploadErrors = {
  file_too_large: 'The file is too large.',
  empty_file: 'The file is empty.',
  meta_too_long: 'The note is too long.',
  quota_exceeded: 'Your storage quota is full.',
};

export function filesPage(main) {
  let page = 1;
  const limit = 20;
  const active = new Set();

  // Upload: several files, drag and drop, progress, cancel.
  const picker = h('input', { type: 'file', id: 'files-input', multiple: true, class: 'visually-hidden' });
  const meta = h('input', { id: 'files-meta', name: 'meta', maxlength: 4096 });
  const queue = h('ul', { class: 'queue', 'aria-label': 'Uploads' });
  const drop = h('div', { class: 'drop', id: 'dropzone' },
    h('p', {}, 'Drop files here or '),
    h('label', { for: 'files-input', class: 'button', tabindex: 0, role: 'button',
      onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); picker.click(); } } }, 'choose files'),
    picker);
  for (const t of ['dragenter', 'dragover']) drop.addEventListener(t, (e) => { e.preventDefault(); drop.classList.add('over'); });
  for (const t of ['dragleave', 'drop']) drop.addEventListener(t, () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => { e.preventDefault(); start([...e.dataTransfer.files]); });
  picker.addEventListener('change', () => { start([...picker.files]); picker.value = ''; });

  function start(files) {
    for (const file of files) {
      const bar = h('progress', { max: 100, value: 0, 'aria-label': 'Progress of ' + file.name });
      const note = h('span', { class: 'note' }, 'uploading…');
      const cancel = h('button', { type: 'button', class: 'small' }, 'Cancel');
      const item = h('li', {}, h('span', { class: 'name' }, file.name, ' (', fmtSize(file.size), ')'), bar, note, cancel);
      queue.append(item);
      const u = upload('/upload/file', file, meta.value, (done, total) => {
        bar.value = Math.round(done * 100 / total);
        note.textContent = bar.value + '%';
      });
      active.add(u);
      cancel.addEventListener('click', () => u.abort());
      u.promise.then(() => {
        bar.value = 100;
        note.textContent = 'done';
        say(file.name + ' uploaded.');
        page = 1;
        load();
      }, (e) => {
        note.textContent = e.code === 'cancelled' ? 'cancelled' : ('failed: ' + (uploadErrors[e.code] || e.body.err || e.message));
        note.classList.add(e.code === 'cancelled' ? 'muted' : 'error');
      }).finally(() => { active.delete(u); cancel.remove(); });
    }
  }

  // Own files, newest first.
  const err = errorBox();
  const tbody = h('tbody');
  const details = h('section', { class: 'card', id: 'file-details', 'aria-labelledby': 'fd-title', hidden: true });
  const pager = h('div', { class: 'pager' });

  // Storage used against the quota.
  const usageBar = h('progress', { id: 'usage-bar', max: 1, value: 0, 'aria-label': 'Storage used' });
  const usageText = h('span', { id: 'usage-text' });
  async function loadUsage() {
    try {
      const u = await api('GET', '/me/usage');
      const files = u.files + (u.files === 1 ? ' file' : ' files');
      if (u.quota === null) {
        usageBar.hidden = true;
        usageText.textContent = `${fmtSize(u.used)} used, no quota (${files})`;
      } else {
        usageBar.hidden = false;
        usageBar.max = Math.max(u.quota, 1);
        usageBar.value = Math.min(u.used, usageBar.max);
        usageText.textContent = `${fmtSize(u.used)} of ${fmtSize(u.quota)} used (${files})`;
      }
    } catch (e) { usageText.textContent = ''; }
  }

  async function load() {
    err.show('');
    loadUsage();
    try {
      const r = await api('GET', `/files?page=${page}&limit=${limit}`);
      tbody.replaceChildren(...r.files.map(f => h('tr', {},
        h('td', {}, f.kind === 'image' ? thumbnail(f) : '',
          h('button', { type: 'button', class: 'link', onclick: () => show(f.id) }, f.name || f.id)),
        h('td', {}, fmtSize(f.size || 0)),
        h('td', {}, f.type),
        h('td', {}, fmtDate(f.createdAt)),
        h('td', {}, f.kind === 'image'
          ? h('a', { href: f.url, target: '_blank', rel: 'noopener' }, 'Open')
          : h('a', { href: '/download/file/' + encodeURIComponent(f.id), download: f.name || '' }, 'Download')))));
      if (!r.files.length) tbody.append(h('tr', {}, h('td', { colspan: 5 }, page === 1 ? 'No files yet.' : 'No more files.')));
      pager.replaceChildren(
        h('button', { type: 'button', disabled: page <= 1, onclick: () => { page--; load(); } }, '← Newer'),
        h('span', {}, 'Page ' + page),
        h('button', { type: 'button', disabled: !r.hasMore, onclick: () => { page++; load(); } }, 'Older →'));
    } catch (e) { err.show(e.message); }
  }

  // An image's thumbnail: a variant of it, made once by the files service
  // and cached like the image (48 CSS pixels, drawn from 96 for dense
  // screens; never more than the image itself). WebP where the browser
  // takes it. Decorative: the file's name follows it.
  function thumbnail(f) {
    const w = Math.min(96, f.width || 96), ht = Math.min(96, f.height || 96);
    return h('img', { class: 'thumb', alt: '', loading: 'lazy', width: 48, height: 48,
      src: `/images/${encodeURIComponent(f.id)}?w=${w}&h=${ht}&format=auto` });
  }

  async function show(id) {
    try {
      const r = await api('GET', '/retrieve/file/' + encodeURIComponent(id));
      const f = r.file;
      const rows = [['Name', f.name], ['Id', f.id], ['Type', f.type], ['Size', fmtSize(f.size || 0) + ` (${f.size} bytes)`],
        ['Uploaded', fmtDate(f.createdAt)], ['SHA-256', f.sha256], ['Kind', f.kind], ['Note (meta)', f.meta ?? '—']];
      if (f.width) rows.push(['Dimensions', `${f.width} × ${f.height}`]);
      details.replaceChildren(h('h2', { id: 'fd-title', tabindex: -1 }, 'File details'),
        h('dl', { class: 'facts' }, rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '')])),
        h('a', { class: 'button', href: r.downloadUrl, download: f.kind === 'image' ? false : (f.name || '') },
          f.kind === 'image' ? 'Open image' : 'Download'),
        h('button', { type: 'button', class: 'danger', onclick: () => remove(f) }, 'Delete file'),
        shareLinks(f));
      details.hidden = false;
      details.querySelector('h2').focus();
    } catch (e) { err.show(e.body.err || e.message); }
  }

  // Delete, after a confirmation.
  async function remove(f) {
    if (!confirm(`Delete ${f.name || f.id}? This cannot be undone; its share links stop working.`)) return;
    try {
      await api('DELETE', '/files/' + encodeURIComponent(f.id));
      details.hidden = true;
      details.replaceChildren();
      say((f.name || f.id) + ' deleted.');
      load();
    } catch (e) { err.show(e.body.err || e.message); }
  }

  // Share links of the file shown: create (the URL is shown once), copy,
  // list, revoke.
  function shareLinks(f) {
    const box = errorBox();
    const made = h('div', { class: 'field', hidden: true });
    const list = h('tbody');
    const path = '/files/' + encodeURIComponent(f.id) + '/links';
    async function reload() {
      try {
        const r = await api('GET', path);
        list.replaceChildren(...r.links.map(l => h('tr', {},
          h('td', {}, fmtDate(l.expiresAt)),
          h('td', {}, l.maxDownloads === null ? String(l.downloads) : `${l.downloads} of ${l.maxDownloads}`),
          h('td', {}, h('button', { type: 'button', class: 'small', 'aria-label': 'Revoke link ' + l.id, onclick: () => revoke(l) }, 'Revoke')))));
        if (!r.links.length) list.append(h('tr', {}, h('td', { colspan: 3 }, 'No share links.')));
      } catch (e) { box.show(e.body.err || e.message); }
    }
    async function revoke(l) {
      try {
        await api('DELETE', path + '/' + encodeURIComponent(l.id));
        say('Share link revoked.');
        reload();
      } catch (e) { box.show(e.body.err || e.message); }
    }
    const days = h('input', { id: 'share-days', type: 'number', min: 1, max: 30, value: 7 });
    async function create() {
      box.show('');
      const n = Number(days.value);
      if (!Number.isInteger(n) || n < 1 || n > 30) { box.show('A link lasts 1 to 30 days.'); return; }
      try {
        const l = await api('POST', path, { expiresAt: new Date(Date.now() + n * 86400000).toISOString() });
        const url = h('input', { id: 'share-url', readonly: true, value: l.url });
        made.replaceChildren(h('label', { for: 'share-url' }, 'Share link URL (shown once)'), url,
          h('button', { type: 'button', class: 'small', onclick: () => copy(url) }, 'Copy link'));
        made.hidden = false;
        say('Share link created.');
        reload();
      } catch (e) { box.show(e.body.err || e.message); }
    }
    async function copy(input) {
      try {
        await navigator.clipboard.writeText(input.value);
        say('Link copied.');
      } catch (e) {
        input.select();
        say('Press Ctrl+C to copy the selected link.');
      }
    }
    reload();
    return h('section', { 'aria-labelledby': 'sl-title' },
      h('h3', { id: 'sl-title' }, 'Share links'), box,
      h('div', { class: 'field' }, h('label', { for: 'share-days' }, 'Days the link lasts'), days),
      h('button', { type: 'button', onclick: create }, 'Create share link'), made,
      h('div', { class: 'scroll' }, h('table', { 'aria-label': 'Share links' },
        h('thead', {}, h('tr', {}, ['Expires', 'Downloads', ''].map(t => h('th', { scope: 'col' }, t)))), list)));
  }

  main.append(
    h('section', { class: 'card', 'aria-labelledby': 'up-title' },
      h('h1', { id: 'up-title' }, 'Files'),
      h('p', { class: 'usage' }, usageBar, ' ', usageText),
      h('div', { class: 'field' }, h('label', { for: 'files-meta' }, 'Note stored with the next uploads (optional)'), meta),
      drop, queue),
    h('section', { class: 'card', 'aria-labelledby': 'list-title' },
      h('h2', { id: 'list-title' }, 'Your files'), err,
      h('div', { class: 'scroll' }, h('table', {},
        h('thead', {}, h('tr', {}, ['Name', 'Size', 'Type', 'Uploaded', ''].map(t => h('th', { scope: 'col' }, t)))),
        tbody)), pager),
    details);
  load();
  return () => { for (const u of active) u.abort(); };
}
