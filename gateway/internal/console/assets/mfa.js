// Two-step sign-in (TOTP) on the profile page: enrol (QR code, then a
// first code; the recovery codes are shown once), status, disable.
import { api } from './api.js';
import { h, field, errorBox, say } from './dom.js';

const messages = {
  invalid_code: 'The code is wrong or was already used.',
  wrong_password: 'The password is wrong.',
  mfa_enabled: 'Two-step sign-in is already on.',
  no_enrolment: 'Start the set-up again.',
  throttled: 'Too many wrong attempts; wait and try again.',
  mfa_disabled: 'Two-step sign-in is not available on this platform.',
};

export function mfaSection() {
  const err = errorBox();
  const body = h('div');
  const section = h('section', { class: 'card', 'aria-labelledby': 'm-title' },
    h('h2', { id: 'm-title' }, 'Two-step sign-in'), err, body);

  async function load() {
    try {
      const st = await api('GET', '/me/mfa');
      body.replaceChildren(...(st.totp ? enabledView(st) : disabledView(st)));
    } catch (e) { err.show(messages[e.code] || e.message); }
  }

  function disabledView(st) {
    return [
      h('p', {}, st.required
        ? 'Administrators must use two-step sign-in or a passkey: until you set one up (and sign in with it) you act as a plain user.'
        : 'Off. With it on, signing in asks for a code from an authenticator app after your password.'),
      h('button', { type: 'button', onclick: start }, 'Set up two-step sign-in'),
    ];
  }

  function enabledView(st) {
    const form = h('form', { 'aria-label': 'Turn off two-step sign-in', novalidate: true },
      field('Password', 'password', { type: 'password', autocomplete: 'current-password', required: true }),
      field('Code or recovery code', 'code', { autocomplete: 'one-time-code', required: true }),
      h('button', { type: 'submit' }, 'Turn off two-step sign-in'));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      err.show('');
      try {
        await api('POST', '/me/mfa/totp/disable', { password: form.password.value, code: form.code.value.trim() });
        say('Two-step sign-in is off.');
        await load();
      } catch (e) { err.show(messages[e.code] || e.message); }
    });
    return [h('p', {}, `On. ${st.recoveryCodesLeft} recovery code${st.recoveryCodesLeft === 1 ? '' : 's'} left.`), form];
  }

  async function start() {
    err.show('');
    let e;
    try { e = await api('POST', '/me/mfa/totp'); }
    catch (x) { return err.show(messages[x.code] || x.message); }
    const form = h('form', { 'aria-label': 'Confirm two-step sign-in', novalidate: true },
      field('Code from the app', 'code', { autocomplete: 'one-time-code', inputmode: 'numeric', required: true }),
      h('button', { type: 'submit' }, 'Turn on'));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      err.show('');
      try {
        const r = await api('POST', '/me/mfa/totp/confirm', { code: form.code.value.trim() });
        body.replaceChildren(
          h('p', { role: 'status' }, 'Two-step sign-in is on. Keep these recovery codes somewhere safe: each works once in place of a code, and they are not shown again.'),
          h('ul', { class: 'recovery', 'aria-label': 'Recovery codes' }, r.recoveryCodes.map(c => h('li', {}, h('code', {}, c)))),
          h('button', { type: 'button', onclick: load }, 'Done'));
        say('Two-step sign-in is on.');
      } catch (x) { err.show(messages[x.code] || x.message); }
    });
    body.replaceChildren(
      h('p', {}, 'Scan this code with an authenticator app, or type the key in, then enter the code the app shows.'),
      h('img', { src: e.qrCode, alt: 'QR code for your authenticator app', width: 240, height: 240 }),
      h('p', {}, 'Key: ', h('code', { class: 'totp-secret' }, e.secret)),
      form);
    form.code.focus();
  }

  load();
  return section;
}
