import { api, upload } from './api.js';
import { h, errorBox, say, fmtDate, fmtSize } from './dom.js';

const uploadErrors = {
  file_too_large: 'The file is too large.',
  empty_file: 'The file is empty.',
  meta_too_long: 'The note is too long.',
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

  async function load() {
    err.show('');
    try {
      const r = await api('GET', `/files?page=${page}&limit=${limit}`);
      tbody.replaceChildren(...r.files.map(f => h('tr', {},
        h('td', {}, h('button', { type: 'button', class: 'link', onclick: () => show(f.id) }, f.name || f.id)),
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
          f.kind === 'image' ? 'Open image' : 'Download'));
      details.hidden = false;
      details.querySelector('h2').focus();
    } catch (e) { err.show(e.body.err || e.message); }
  }

  main.append(
    h('section', { class: 'card', 'aria-labelledby': 'up-title' },
      h('h1', { id: 'up-title' }, 'Files'),
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
