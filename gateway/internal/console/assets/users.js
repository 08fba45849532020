import { api } from './api.js';
import { h, field, errorBox, say, fmtDate } from './dom.js';

const messages = {
  email_taken: 'Another account uses that e-mail.',
  invalid_email: 'Enter a valid e-mail address.',
  invalid_password: 'The password must be 8 to 1024 characters long.',
  cannot_demote_self: 'You cannot take the administrator role from yourself.',
  cannot_delete_self: 'You cannot delete your own account.',
  user_not_found: 'That user no longer exists.',
};
const msg = (e) => messages[e.code] || (e.body.field ? `${e.body.field}: ${e.message}` : e.message);

export function usersPage(main, state) {
  let page = 1;
  const limit = 20;
  const err = errorBox();
  const tbody = h('tbody');
  const pager = h('div', { class: 'pager' });

  async function load() {
    err.show('');
    try {
      const r = await api('GET', `/users?page=${page}&limit=${limit}`);
      tbody.replaceChildren(...r.users.flatMap(u => {
        const role = h('select', { 'aria-label': 'Role of ' + u.email },
          ['user', 'admin'].map(v => h('option', { value: v, selected: u.roleName === v }, v)));
        role.addEventListener('change', async () => {
          try {
            await api('PATCH', '/users/' + encodeURIComponent(u.id), { roleName: role.value });
            say(`${u.email} is now ${role.value}.`);
          } catch (e) { role.value = u.roleName; err.show(msg(e)); }
        });
        const del = h('button', { type: 'button', class: 'small danger', disabled: u.id === state.user.id }, 'Delete');
        del.addEventListener('click', async () => {
          if (!confirm(`Delete ${u.email}? Their sessions end at once.`)) return;
          try { await api('DELETE', '/users/' + encodeURIComponent(u.id)); await load(); say(`${u.email} deleted.`); }
          catch (e) { err.show(msg(e)); }
        });
        const reset = h('button', { type: 'button', class: 'small', 'aria-label': 'Reset the second factors of ' + u.email }, 'Reset 2FA');
        reset.addEventListener('click', async () => {
          if (!confirm(`Remove the two-step sign-in (TOTP and recovery codes) and every passkey of ${u.email}? They sign in with their password alone until they set them up again.`)) return;
          try { await api('DELETE', '/users/' + encodeURIComponent(u.id) + '/mfa'); await load(); say(`The second factors of ${u.email} were reset.`); }
          catch (e) { err.show(msg(e)); }
        });
        const detail = h('tr', { hidden: true }, h('td', { colspan: 8 }));
        const ids = h('button', { type: 'button', class: 'small', 'aria-expanded': 'false', 'aria-label': 'Sign-in providers of ' + u.email }, 'Providers');
        ids.addEventListener('click', async () => {
          const open = detail.hidden;
          detail.hidden = !open;
          ids.setAttribute('aria-expanded', String(open));
          if (open) await providersOf(u, detail.firstChild);
        });
        return [h('tr', {}, h('td', {}, u.email), h('td', {}, u.fullName), h('td', {}, u.edv),
          h('td', {}, u.sector || ''), h('td', {}, role), h('td', {}, u.mfaEnabled ? 'on' : 'off'),
          h('td', {}, fmtDate(u.createdAt)), h('td', { class: 'actions' }, ids, ' ', reset, ' ', del)), detail];
      }));
      const pages = Math.max(1, Math.ceil(r.total / limit));
      pager.replaceChildren(
        h('button', { type: 'button', disabled: page <= 1, onclick: () => { page--; load(); } }, '← Previous'),
        h('span', {}, `Page ${page} of ${pages} (${r.total} users)`),
        h('button', { type: 'button', disabled: page >= pages, onclick: () => { page++; load(); } }, 'Next →'));
    } catch (e) { err.show(msg(e)); }
  }

  // A user's linked identities and invitations: remove one, or invite the
  // user for a provider (their first sign-in there links it).
  async function providersOf(u, cell) {
    const base = '/users/' + encodeURIComponent(u.id) + '/identities';
    try {
      const [r, p] = await Promise.all([api('GET', base), api('GET', '/signin/oidc')]);
      const pick = h('select', { 'aria-label': 'Provider to invite ' + u.email + ' for' },
        (p.providers || []).map(x => h('option', { value: x.name }, x.displayName)));
      const invite = h('button', { type: 'button', class: 'small', disabled: !(p.providers || []).length }, 'Invite');
      invite.addEventListener('click', async () => {
        try { await api('POST', base, { provider: pick.value }); say(`${u.email} is invited for ${pick.value}.`); await providersOf(u, cell); }
        catch (e) { err.show(e.code === 'identity_taken' ? 'That user is invited for this provider already.' : msg(e)); }
      });
      cell.replaceChildren(
        h('ul', {}, r.identities.length ? r.identities.map(i => h('li', {},
          `${i.provider}: ${i.email || 'no address'} — ${i.pending ? 'invited, not used yet' : 'last used ' + fmtDate(i.lastUsedAt)} `,
          h('button', { type: 'button', class: 'small', onclick: async () => {
            try { await api('DELETE', base + '/' + encodeURIComponent(i.id)); say('Removed.'); await providersOf(u, cell); }
            catch (e) { err.show(msg(e)); }
          } }, i.pending ? 'Withdraw' : 'Unlink'))) : h('li', {}, 'No linked sign-in provider.')),
        h('div', { class: 'row' }, pick, ' ', invite));
    } catch (e) { err.show(msg(e)); }
  }

  const cerr = errorBox();
  const form = h('form', { class: 'card', 'aria-labelledby': 'nu-title' },
    h('h2', { id: 'nu-title' }, 'Create a user'), cerr,
    h('div', { class: 'grid' },
      field('E-mail', 'email', { type: 'email', required: true, autocomplete: 'off' }),
      field('Full name', 'fullName', { required: true }),
      field('EDV', 'edv', { required: true }),
      field('Sector (optional)', 'sector', {}),
      field('Initial password', 'password', { type: 'password', required: true, minlength: 8, autocomplete: 'new-password' }),
      field('Role', 'roleName', { options: ['user', 'admin'], value: 'user' })),
    h('button', { type: 'submit' }, 'Create user'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    cerr.show('');
    const body = {};
    for (const k of ['email', 'fullName', 'edv', 'sector', 'password', 'roleName']) {
      const v = form[k].value.trim();
      if (v) body[k] = k === 'password' ? form[k].value : v;
    }
    try {
      const r = await api('POST', '/users', body);
      form.reset();
      await load();
      say(`${r.user.email} created.`);
    } catch (e) { cerr.show(msg(e)); }
  });

  main.append(
    h('section', { class: 'card', 'aria-labelledby': 'u-title' },
      h('h1', { id: 'u-title' }, 'Users'), err,
      h('div', { class: 'scroll' }, h('table', {},
        h('thead', {}, h('tr', {}, ['E-mail', 'Name', 'EDV', 'Sector', 'Role', 'Two-step', 'Created', ''].map(t => h('th', { scope: 'col' }, t)))),
        tbody)), pager),
    form);
  load();
}
