import { api, apiResponse } from './api.js';
import { h, field, errorBox, say, fmtDate } from './dom.js';
import { barChart, chooseStep } from './chart.js';

const TYPES = ['log', 'error', 'db'];
const MAX_LIVE = 200;

export async function logsPage(main) {
  let apps = [];
  try { apps = (await api('GET', '/log/apps')).apps.map(a => a.name); } catch (e) { say(e.message, 'error'); }
  const appOptions = [{ value: '', label: 'All applications' }, ...apps];

  // The details panel: a log record (listing and live tail alike) or a
  // dead letter. facts: [label, value] pairs.
  const details = h('section', { class: 'card', id: 'log-details', 'aria-labelledby': 'ld-title', hidden: true });
  function showDetails(title, facts, bodyLabel, body) {
    details.replaceChildren(
      h('h2', { id: 'ld-title', tabindex: -1 }, title),
      h('dl', { class: 'facts' }, ...facts.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
      h('pre', { class: 'body', tabindex: 0, 'aria-label': bodyLabel }, body),
      h('button', { type: 'button', onclick: () => { details.hidden = true; } }, 'Close'));
    details.hidden = false;
    details.querySelector('h2').focus();
  }
  const showRecord = (r) => showDetails('Log record', [
    ['Time', fmtDate(r.createdAt)], ['Application', r.app], ['Type', r.type],
    ['Metrics id', r.metricsId ?? '—'], ['Id', r.id]], 'Log body', r.logBody);
  const row = (r) => h('tr', { class: 'type-' + r.type },
    h('td', {}, fmtDate(r.createdAt)), h('td', {}, r.app), h('td', {}, h('span', { class: 'tag' }, r.type)),
    h('td', { class: 'clip' }, h('button', { type: 'button', class: 'link', title: 'Show the whole record', onclick: () => showRecord(r) },
      r.logBody.length > 140 ? r.logBody.slice(0, 140) + '…' : r.logBody || '(empty)')));
  const table = (tbody, label, heads = ['Time', 'Application', 'Type', 'Body']) => h('div', { class: 'scroll' }, h('table', { 'aria-label': label },
    h('thead', {}, h('tr', {}, heads.map(t => h('th', { scope: 'col' }, t)))), tbody));

  // Listing: type, app, time range, pages. Pages go by cursor (?before=
  // the last record shown), so they stay put while records arrive; a page
  // the service cut short (Logs-Resume-Before) reads on from where it
  // stopped.
  let cursors = ['']; // cursors[i]: where page i+1 starts ('' = the newest)
  const err = errorBox();
  const tbody = h('tbody');
  const pager = h('nav', { class: 'pager', 'aria-label': 'Log record pages' });
  const filters = h('form', { class: 'filters', 'aria-label': 'Log filters' },
    field('Type', 'type', { options: TYPES, value: 'log' }),
    field('Application', 'app', { options: appOptions, value: '' }),
    field('Search', 'q', { type: 'search', placeholder: 'words or "a phrase"' }),
    field('From', 'from', { type: 'datetime-local', step: 1 }),
    field('To', 'to', { type: 'datetime-local', step: 1 }),
    field('Per page', 'limit', { options: ['20', '50', '100'], value: '50' }),
    h('button', { type: 'submit' }, 'Show'));
  filters.addEventListener('submit', (ev) => { ev.preventDefault(); cursors = ['']; load(); });

  // datetime-local wants local time without a zone.
  const localValue = (d) => {
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  };
  const exportLink = h('a', { class: 'button', id: 'log-export', download: 'logs.ndjson' }, 'Export NDJSON');
  const chartBox = h('div', { class: 'chart-box', id: 'log-chart' });
  const chartNote = h('p', { class: 'note' });

  // The chart: GET /log/stats over the chosen range (the last 24 hours by
  // default); a bar narrows the list to its interval.
  async function loadChart() {
    const f = filters;
    const to = f.to.value ? new Date(f.to.value) : new Date();
    const from = f.from.value ? new Date(f.from.value) : new Date(to.getTime() - 24 * 3600 * 1000);
    if (!(from < to)) { chartBox.replaceChildren(); return; }
    const step = chooseStep(from, to);
    const q = new URLSearchParams({ from: from.toISOString(), to: to.toISOString(), step: step + 's' });
    if (f.app.value) q.set('app', f.app.value);
    try {
      const stats = await api('GET', '/log/stats?' + q);
      chartBox.replaceChildren(barChart(stats, f.type.value, (bf, bt) => {
        // The fields hold whole seconds: From rounds down and To up, so
        // no record of the bar's interval falls outside them.
        f.from.value = localValue(bf);
        f.to.value = localValue(new Date(Math.ceil(bt.getTime() / 1000) * 1000));
        cursors = [''];
        load();
      }));
      chartNote.textContent = `Records of type ${f.type.value} per ${step >= 3600 ? step / 3600 + ' h' : step / 60 + ' min'}; choose a bar to list its records.` +
        (stats.partial ? ' (Older intervals may be incomplete.)' : '');
    } catch (e) {
      chartBox.replaceChildren();
      chartNote.textContent = 'Volume over time unavailable: ' + e.message;
    }
  }

  async function load() {
    err.show('');
    const f = filters;
    const limit = Number(f.limit.value);
    const path = `/log/${encodeURIComponent(f.type.value)}/1` + (f.app.value ? '/' + encodeURIComponent(f.app.value) : '');
    const q = new URLSearchParams({ limit: String(limit) });
    if (f.from.value) q.set('from', new Date(f.from.value).toISOString());
    if (f.to.value) q.set('to', new Date(f.to.value).toISOString());
    if (f.q.value.trim()) q.set('q', f.q.value.trim());
    const ex = new URLSearchParams({ type: f.type.value });
    for (const k of ['from', 'to', 'q']) if (q.has(k)) ex.set(k, q.get(k));
    if (f.app.value) ex.set('app', f.app.value);
    exportLink.href = '/log/export?' + ex;
    const page = cursors.length;
    if (page === 1) loadChart();
    if (cursors[page - 1]) q.set('before', cursors[page - 1]);
    try {
      const { data: r, headers } = await apiResponse('GET', path + '?' + q);
      const resume = headers.get('Logs-Resume-Before') || r.cursor || '';
      tbody.replaceChildren(...r.logs.map(row));
      if (!r.logs.length) tbody.append(h('tr', {}, h('td', { colspan: 4 }, resume ? 'Nothing yet: the search stopped early.' : 'No records.')));
      const next = resume || (r.logs.length === limit ? r.logs[r.logs.length - 1].id : '');
      pager.replaceChildren(
        h('button', { type: 'button', disabled: page <= 1, onclick: () => { cursors.pop(); load(); } }, '← Newer'),
        h('span', {}, 'Page ' + page),
        h('button', { type: 'button', disabled: !next, onclick: () => { cursors.push(next); load(); } }, resume ? 'Search older →' : 'Older →'));
    } catch (e) {
      err.show(e.body.field ? `${e.body.field}: ${e.message}` : e.message);
    }
  }

  // Live tail: server-sent events from GET /log/tail.
  let es = null, paused = false, held = [];
  const liveBody = h('tbody');
  const liveState = h('span', { class: 'note', id: 'tail-state' }, 'stopped');
  const tailType = h('select', { id: 'tail-type', 'aria-label': 'Live tail type' },
    [{ value: '', label: 'All types' }, ...TYPES].map(o => h('option', { value: o.value ?? o }, o.label ?? o)));
  const startBtn = h('button', { type: 'button', id: 'tail-start' }, 'Start live tail');
  const pauseBtn = h('button', { type: 'button', id: 'tail-pause', disabled: true, 'aria-pressed': 'false' }, 'Pause');
  function add(r) {
    liveBody.prepend(row(r));
    while (liveBody.children.length > MAX_LIVE) liveBody.lastChild.remove();
  }
  function start() {
    stop();
    const q = new URLSearchParams();
    if (tailType.value) q.set('type', tailType.value);
    if (filters.app.value) q.set('app', filters.app.value);
    es = new EventSource('/log/tail' + (q.size ? '?' + q : ''));
    liveState.textContent = 'connecting…';
    es.addEventListener('ready', () => { liveState.textContent = paused ? 'paused' : 'live'; });
    es.addEventListener('log', (ev) => {
      const r = JSON.parse(ev.data);
      if (paused) { held.push(r); liveState.textContent = `paused, ${held.length} new`; if (held.length > MAX_LIVE) held.shift(); }
      else add(r);
    });
    es.addEventListener('dropped', (ev) => say(`The live tail skipped ${JSON.parse(ev.data).dropped} record(s) it could not deliver in time.`, 'error'));
    es.onerror = () => {
      liveState.textContent = es && es.readyState === EventSource.CLOSED ? 'closed (not allowed or signed out)' : 'reconnecting…';
    };
    startBtn.textContent = 'Stop live tail';
    pauseBtn.disabled = false;
  }
  function stop() {
    if (es) es.close();
    es = null;
    paused = false; held = [];
    pauseBtn.textContent = 'Pause'; pauseBtn.setAttribute('aria-pressed', 'false'); pauseBtn.disabled = true;
    startBtn.textContent = 'Start live tail';
    liveState.textContent = 'stopped';
  }
  startBtn.addEventListener('click', () => (es ? stop() : start()));
  tailType.addEventListener('change', () => { if (es) start(); });
  pauseBtn.addEventListener('click', () => {
    paused = !paused;
    pauseBtn.textContent = paused ? 'Resume' : 'Pause';
    pauseBtn.setAttribute('aria-pressed', String(paused));
    if (!paused) { held.forEach(add); held = []; }
    liveState.textContent = paused ? 'paused' : 'live';
  });

  // Dead letters: stream messages the writer can never store (GET /log/dead).
  let deadPage = 1;
  const DEAD_LIMIT = 20;
  const deadErr = errorBox();
  const deadBody = h('tbody');
  const deadPager = h('div', { class: 'pager' });
  const showDead = (d) => showDetails('Dead letter', [
    ['Received', fmtDate(d.receivedAt)], ['Subject', d.subject], ['Stream message', d.id],
    ['Message id', d.msgId || '—'], ['Deliveries', String(d.deliveries)], ['Reason', d.reason]],
    'Message payload', d.data || '(empty)');
  const deadRow = (d) => h('tr', {},
    h('td', {}, fmtDate(d.receivedAt)), h('td', {}, d.subject),
    h('td', { class: 'clip' }, h('button', { type: 'button', class: 'link', title: 'Show the whole message', onclick: () => showDead(d) },
      d.reason.length > 140 ? d.reason.slice(0, 140) + '…' : d.reason)),
    h('td', {}, String(d.deliveries)));
  async function loadDead() {
    deadErr.show('');
    try {
      const r = await api('GET', `/log/dead?page=${deadPage}&limit=${DEAD_LIMIT}`);
      deadBody.replaceChildren(...r.deadLetters.map(deadRow));
      if (!r.deadLetters.length) deadBody.append(h('tr', {}, h('td', { colspan: 4 }, 'No dead letters.')));
      deadPager.replaceChildren(
        h('button', { type: 'button', disabled: deadPage <= 1, onclick: () => { deadPage--; loadDead(); } }, '← Newer'),
        h('span', {}, 'Page ' + deadPage),
        h('button', { type: 'button', disabled: r.deadLetters.length < DEAD_LIMIT, onclick: () => { deadPage++; loadDead(); } }, 'Older →'));
    } catch (e) {
      deadErr.show(e.message);
    }
  }

  main.append(
    h('section', { class: 'card', 'aria-labelledby': 'l-title' },
      h('h1', { id: 'l-title' }, 'Logs'), filters, err, chartBox, chartNote,
      table(tbody, 'Log records'), pager, h('div', { class: 'toolbar' }, exportLink)),
    h('section', { class: 'card', 'aria-labelledby': 'lt-title' },
      h('h2', { id: 'lt-title' }, 'Live tail'),
      h('div', { class: 'toolbar' }, tailType, startBtn, pauseBtn, liveState),
      h('p', { class: 'note' }, 'New records published to the log stream appear here as they arrive (the application selector above applies).'),
      table(liveBody, 'Live records')),
    h('section', { class: 'card', 'aria-labelledby': 'dl-title' },
      h('h2', { id: 'dl-title' }, 'Dead letters'),
      h('p', { class: 'note' }, 'Messages from the log stream that can never become records (malformed, unknown application or type, refused on every delivery), kept for inspection, newest first.'),
      h('div', { class: 'toolbar' }, h('button', { type: 'button', id: 'dead-refresh', onclick: () => { deadPage = 1; loadDead(); } }, 'Refresh dead letters')),
      deadErr, table(deadBody, 'Dead letters', ['Received', 'Subject', 'Reason', 'Deliveries']), deadPager),
    details);
  load();
  loadDead();
  return stop;
}
