// The audit trail (administrators): security events recorded by auth as
// ACME-AUTH records of type "log" whose body is a JSON object with
// "audit": true, read through the logs API and filtered here.
import { api } from './api.js';
import { h, field, errorBox, fmtDate } from './dom.js';

const APP = 'ACME-AUTH';
// Every event type auth records (services/auth/internal/account: events.go,
// identity.go, emailcode.go); TestAuditEventsFilterable keeps the two alike.
const events = ['', 'signin.succeeded', 'signin.failed', 'signin.throttled', 'signin.unverified',
  'signin.email.requested', 'signin.email.failed', 'signin.email.voided', 'signout', 'session.ended',
  'password.changed', 'password.reset_requested', 'password.reset', 'email.verified', 'email.change_requested',
  'email.change_confirmed', 'email.changed', 'user.created', 'user.changed', 'user.deleted',
  'apikey.created', 'apikey.first_used', 'apikey.revoked', 'mfa.enabled', 'mfa.disabled', 'mfa.reset', 'mfa.failed',
  'passkey.added', 'passkey.removed', 'passkey.failed', 'passkey.clone_warning',
  'identity.linked', 'identity.unlinked', 'identity.invited'];

export function auditPage(main) {
  const err = errorBox();
  const tbody = h('tbody');
  const more = h('button', { type: 'button', hidden: true }, 'Older events');
  const filters = h('form', { class: 'filters', 'aria-label': 'Filters' },
    field('Event', 'event', { options: events.map(e => ({ value: e, label: e || 'any' })) }),
    field('Actor (user id)', 'actor', {}),
    field('Target (user id or e-mail)', 'target', {}),
    field('Client address', 'ip', {}),
    h('button', { type: 'submit' }, 'Apply'));
  const card = h('section', { class: 'card', 'aria-labelledby': 'audit-title' },
    h('h1', { id: 'audit-title' }, 'Audit trail'),
    h('p', {}, 'Security events: sign-ins (passwords, second factors, passkeys, identity providers, mailed codes), password and address changes, user administration, API keys. Newest first.'),
    filters, err,
    h('div', { class: 'scroll' }, h('table', {},
      h('thead', {}, h('tr', {}, ['When', 'Event', 'Actor', 'Target', 'Client', 'Request', 'Detail'].map(t => h('th', { scope: 'col' }, t)))),
      tbody)),
    more);
  let cursor = '';

  function matches(r) {
    const f = filters;
    if (f.event.value && r.event !== f.event.value) return false;
    if (f.actor.value.trim() && r.actor !== f.actor.value.trim()) return false;
    const t = f.target.value.trim().toLowerCase();
    if (t && r.target !== t && (r.targetEmail || '').toLowerCase() !== t) return false;
    if (f.ip.value.trim() && r.clientIp !== f.ip.value.trim()) return false;
    return true;
  }

  async function load(append) {
    err.show('');
    if (!append) { cursor = ''; tbody.replaceChildren(); }
    try {
      const q = new URLSearchParams({ limit: '200' });
      if (cursor) q.set('before', cursor);
      const r = await api('GET', `/log/log/1/${APP}?${q}`);
      const logs = r.logs || [];
      for (const rec of logs) {
        let e;
        try { e = JSON.parse(rec.logBody); } catch { continue; }
        if (!e || e.audit !== true || !matches(e)) continue;
        tbody.append(h('tr', {},
          h('td', {}, fmtDate(e.at || rec.createdAt)), h('td', {}, e.event),
          h('td', {}, e.actor || ''), h('td', {}, e.targetEmail ? `${e.targetEmail} ${e.target ? '(' + e.target + ')' : ''}` : (e.target || '')),
          h('td', {}, e.clientIp || ''), h('td', {}, h('code', {}, e.requestId || '')),
          h('td', {}, e.detail ? JSON.stringify(e.detail) : '')));
      }
      cursor = logs.length ? logs[logs.length - 1].id : '';
      more.hidden = logs.length < 200;
      if (!tbody.children.length && more.hidden) tbody.append(h('tr', {}, h('td', { colspan: 7 }, 'No events match.')));
    } catch (e) { err.show(e.message); }
  }
  filters.addEventListener('submit', (ev) => { ev.preventDefault(); load(false); });
  more.addEventListener('click', () => load(true));
  main.append(card);
  load(false);
}
