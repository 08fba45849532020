// API keys of the signed-in user (profile page): list, create (the secret
// is shown once), revoke.
import { api } from './api.js';
import { h, field, errorBox, say, fmtDate } from './dom.js';

const scopes = ['files:read', 'files:write', 'logs:read', 'logs:write'];
const messages = {
  invalid_value: 'Check the name and the expiry date (it must be in the future).',
  invalid_scopes: 'Choose at least one scope.',
  too_many_api_keys: 'You hold the most keys allowed; revoke one first.',
};

export function apiKeysSection() {
  const err = errorBox();
  const tbody = h('tbody');
  const secretBox = h('div', { class: 'note', hidden: true, role: 'status' });
  const form = h('form', { 'aria-label': 'New API key', novalidate: true },
    field('Name', 'name', { required: true, maxlength: 200, placeholder: 'backup script' }),
    h('fieldset', {}, h('legend', {}, 'Scopes'),
      scopes.map(s => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'scope', value: s }), ' ' + s))),
    field('Expires (optional)', 'expires', { type: 'date' }),
    h('button', { type: 'submit' }, 'Create key'));
  const section = h('section', { class: 'card', 'aria-labelledby': 'k-title' },
    h('h2', { id: 'k-title' }, 'API keys'),
    h('p', {}, 'Programs send a key as "Authorization: Bearer <key>" on file and log routes. A key can do only what both its scopes and your role allow.'),
    err, secretBox,
    h('div', { class: 'scroll' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Name', 'Key', 'Scopes', 'Created', 'Expires', 'Last used', ''].map(t => h('th', { scope: 'col' }, t)))),
      tbody)),
    form);

  async function load() {
    try {
      const r = await api('GET', '/me/api-keys');
      tbody.replaceChildren(...r.apiKeys.map(k => h('tr', {},
        h('td', {}, k.name), h('td', {}, h('code', {}, k.hint + '…')), h('td', {}, k.scopes.join(', ')),
        h('td', {}, fmtDate(k.createdAt)), h('td', {}, k.expiresAt ? fmtDate(k.expiresAt) : 'never'),
        h('td', {}, k.lastUsedAt ? fmtDate(k.lastUsedAt) : 'never'),
        h('td', {}, h('button', { type: 'button', class: 'small', onclick: () => revoke(k) }, 'Revoke')))));
    } catch (e) { err.show(e.message); }
  }
  async function revoke(k) {
    if (!confirm(`Revoke the key "${k.name}"? Programs using it stop working at once.`)) return;
    try { await api('DELETE', '/me/api-keys/' + encodeURIComponent(k.id)); await load(); say('Key revoked.'); }
    catch (e) { err.show(e.message); }
  }
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    const body = { name: form.name.value.trim(), scopes: [...form.querySelectorAll('input[name=scope]:checked')].map(i => i.value) };
    if (!body.name) return err.show('Give the key a name.');
    if (!body.scopes.length) return err.show(messages.invalid_scopes);
    if (form.expires.value) body.expiresAt = new Date(form.expires.value + 'T23:59:59').toISOString().replace(/\.\d+Z$/, 'Z');
    try {
      const r = await api('POST', '/me/api-keys', body);
      secretBox.replaceChildren(
        h('p', {}, 'Copy the key now: it is not shown again.'),
        h('code', { class: 'secret' }, r.secret));
      secretBox.hidden = false;
      form.reset();
      await load();
      say('Key created.');
    } catch (e) { err.show(messages[e.code] || e.message); }
  });
  load();
  return section;
}
