import { api, upload } from './api.js';
import { h, field, errorBox, say, fmtDate } from './dom.js';
import { apiKeysSection } from './apikeys.js';
import { mfaSection } from './mfa.js';
import { passkeysSection } from './passkeys.js';
import { identitiesSection, takeResult } from './identities.js';
import { setPasswordSection } from './emailcode.js';

const editable = ['fullName', 'email', 'sector', 'avatarUrl'];
const messages = {
  invalid_email: 'Enter a valid e-mail address.',
  invalid_url: 'The avatar URL must be an absolute http(s) URL.',
  email_taken: 'Another account uses that e-mail.',
  invalid_characters: 'Remove the invisible, control or text-direction characters.',
  wrong_password: 'The current password is wrong.',
  invalid_password: 'The new password must be 8 to 1024 characters long.',
  empty_patch: 'Nothing changed.',
  throttled: 'Too many attempts; wait and try again.',
};

export async function profilePage(main, state) {
  const u = state.user;
  const avatar = h('img', { class: 'avatar', alt: 'Your avatar', src: u.avatarUrl || false, hidden: !u.avatarUrl });

  // Profile fields (PATCH /me sends only what changed).
  const err = errorBox();
  const form = h('form', { class: 'card', 'aria-labelledby': 'p-title' },
    h('h1', { id: 'p-title' }, 'Profile'),
    h('div', { class: 'row' }, avatar, h('dl', { class: 'facts' },
      h('dt', {}, 'Role'), h('dd', {}, u.roleName),
      h('dt', {}, 'EDV'), h('dd', {}, u.edv),
      h('dt', {}, 'E-mail'), h('dd', {}, u.emailVerified ? 'confirmed' : h('span', {}, 'not confirmed ',
        h('button', { type: 'button', class: 'small', onclick: resend }, 'Send a new link'))),
      h('dt', {}, 'Member since'), h('dd', {}, fmtDate(u.createdAt)))),
    err,
    field('Full name', 'fullName', { value: u.fullName, autocomplete: 'name' }),
    field('E-mail', 'email', { type: 'email', value: u.email, autocomplete: 'email' }),
    field('Current password (optional: an e-mail change then needs no confirmation from the current address)', 'currentPassword', { type: 'password', autocomplete: 'current-password' }),
    field('Sector', 'sector', { value: u.sector || '' }),
    field('Avatar URL', 'avatarUrl', { type: 'url', value: u.avatarUrl || '' }),
    h('button', { type: 'submit' }, 'Save profile'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    const patch = {};
    for (const k of editable) {
      const v = form[k].value.trim();
      if (v !== (u[k] || '')) patch[k] = v;
    }
    if (!Object.keys(patch).length) return err.show(messages.empty_patch);
    // The current password, if given, spares the confirmation of an
    // address change from the current address.
    const proven = Boolean(patch.email && form.currentPassword.value);
    if (proven) patch.currentPassword = form.currentPassword.value;
    try {
      const r = await api('PATCH', '/me', patch);
      Object.assign(u, r.user);
      form.currentPassword.value = '';
      if (patch.email && r.user.email !== patch.email) {
        form.email.value = u.email;
        say(proven
          ? `Profile saved. A confirmation link is on its way to ${patch.email} (unless that address is already in use); the new address takes effect once you open it.`
          : `Profile saved. Confirmation links are on their way to ${u.email} and to ${patch.email} (unless that address is already in use); the new address takes effect once both are opened.`);
      } else say('Profile saved.');
      refreshAvatar();
    } catch (e) {
      err.show(e.code === 'missing_field' && e.body && e.body.field === 'currentPassword'
        ? 'Enter your current password to change the e-mail address.'
        : messages[e.code] || e.message);
    }
  });

  async function resend() {
    try { await api('POST', '/me/email/verification'); say('A new confirmation link is on its way.'); }
    catch (e) { err.show(e.code === 'mail_disabled' ? 'This platform sends no e-mail.' : e.message); }
  }

  function refreshAvatar() {
    avatar.hidden = !u.avatarUrl;
    if (u.avatarUrl) avatar.src = u.avatarUrl;
    form.avatarUrl.value = u.avatarUrl || '';
  }

  // Avatar upload: /upload/image, then PATCH /me {avatarUrl}.
  const aerr = errorBox();
  const progress = h('progress', { max: 100, value: 0, hidden: true, 'aria-label': 'Avatar upload' });
  const picker = h('input', { type: 'file', id: 'avatar-file', accept: 'image/jpeg,image/png,image/gif,image/webp' });
  const avatarForm = h('form', { class: 'card', 'aria-labelledby': 'a-title' },
    h('h2', { id: 'a-title' }, 'Avatar'), aerr,
    h('div', { class: 'field' }, h('label', { for: 'avatar-file' }, 'Image (JPEG, PNG, GIF or WebP)'), picker),
    progress, h('button', { type: 'submit' }, 'Upload avatar'));
  avatarForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    aerr.show('');
    const file = picker.files[0];
    if (!file) return aerr.show('Choose an image first.');
    progress.hidden = false;
    try {
      const r = await upload('/upload/image', file, '', (done, total) => { progress.value = Math.round(done * 100 / total); }).promise;
      const p = await api('PATCH', '/me', { avatarUrl: r.image.url });
      Object.assign(u, p.user);
      refreshAvatar();
      say('Avatar updated.');
    } catch (e) {
      aerr.show(e.body.err || e.message);
    } finally { progress.hidden = true; }
  });

  // Password change: every session ends, this one gets a new cookie.
  const perr = errorBox();
  const pform = h('form', { class: 'card', 'aria-labelledby': 'pw-title' },
    h('h2', { id: 'pw-title' }, 'Change password'), perr,
    field('Current password', 'old', { type: 'password', autocomplete: 'current-password', required: true }),
    field('New password (8 characters or more)', 'new', { type: 'password', autocomplete: 'new-password', minlength: 8, required: true }),
    field('Repeat the new password', 'again', { type: 'password', autocomplete: 'new-password', required: true }),
    h('button', { type: 'submit' }, 'Change password'));
  pform.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    perr.show('');
    if (pform.new.value !== pform.again.value) return perr.show('The new passwords differ.');
    try {
      await api('PATCH', '/me', { password: { old: pform.old.value, new: pform.new.value } });
      pform.reset();
      await loadSessions();
      say('Password changed. Your other sessions were ended.');
    } catch (e) { perr.show(messages[e.code] || e.message); }
  });

  // Own sessions. The status line is set after the list is reloaded, so what
  // it announces is already on screen.
  const serr = errorBox();
  const tbody = h('tbody');
  const sessions = h('section', { class: 'card', 'aria-labelledby': 's-title' },
    h('h2', { id: 's-title' }, 'Sessions'), serr,
    h('div', { class: 'scroll' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Device', 'Address', 'Signed in', 'Last used', ''].map(t => h('th', { scope: 'col' }, t)))),
      tbody)),
    h('button', { type: 'button', onclick: endOthers }, 'End all other sessions'));

  async function loadSessions() {
    try {
      const r = await api('GET', '/me/sessions');
      tbody.replaceChildren(...r.sessions.map(s => h('tr', {},
        h('td', {}, s.userAgent || 'unknown', s.current ? h('strong', {}, ' (this one)') : ''),
        h('td', {}, s.ip || ''),
        h('td', {}, fmtDate(s.createdAt)),
        h('td', {}, fmtDate(s.lastSeenAt)),
        h('td', {}, s.current ? '' : h('button', { type: 'button', class: 'small', onclick: () => endOne(s.id) }, 'End')))));
    } catch (e) { serr.show(e.message); }
  }
  async function endOne(id) {
    try { await api('DELETE', '/me/sessions/' + encodeURIComponent(id)); await loadSessions(); say('Session ended.'); }
    catch (e) { serr.show(e.message); }
  }
  async function endOthers() {
    try { const r = await api('DELETE', '/me/sessions'); await loadSessions(); say(`${r.ended} other session(s) ended.`); }
    catch (e) { serr.show(e.message); }
  }

  main.append(form, avatarForm, pform, mfaSection(), passkeysSection(), identitiesSection(takeResult()), sessions, apiKeysSection());
  // An account without a password (a provider's or a code's sign-up) sets
  // one, proven by a mailed code, instead of changing it.
  api('GET', '/me/mfa').then(r => {
    if (!r || r.password !== false || !pform.isConnected) return;
    const set = setPasswordSection(() => set.replaceWith(pform));
    pform.replaceWith(set);
  }).catch(() => {});
  loadSessions();
}
