// Sign-in by a code mailed to the address: the button on the sign-in page
// (shown only when GET /signin/email says the method is on), the page that
// asks for the address and then the code (#/email-code), the mailed link's
// landing (#/signin-email?token=...), and the profile's "set a password"
// for an account without one, proven by a fresh code.
import { api, apiResponse } from './api.js';
import { h, field, errorBox, say } from './dom.js';
import { go, loadUser } from './app.js';

export const codeMessages = {
  invalid_email: 'Enter a valid e-mail address.',
  invalid_code_format: 'Enter the digits from the message.',
  code_void: 'That code no longer works: it expired, was used, was replaced by a newer one or was tried too often. Ask for a new one.',
  invalid_token: 'This link no longer works: it expired, was used, was replaced by a newer one or its code was tried too often. Ask for a new code.',
  missing_field: 'This link is incomplete. Open it again from the message.',
  email_signin_disabled: 'Sign-in by e-mail code is turned off here.',
  mail_disabled: 'This platform sends no e-mail.',
  invalid_password: 'The new password must be 8 to 1024 characters long.',
  password_set: 'Your account has a password already.',
  busy: 'Too many messages are waiting to be sent. Try again shortly.',
};

function codeError(e) {
  if (e.code === 'invalid_code') {
    const left = e.body.triesLeft;
    if (left === 0) return 'The code is wrong, and it was the last try: ask for a new code.';
    return `The code is wrong. ${left} ${left === 1 ? 'try' : 'tries'} left.`;
  }
  if (e.status === 429) return `Too many attempts. Try again in ${Math.max(1, Math.ceil((e.retryAfter || 60) / 60))} minute(s).`;
  return codeMessages[e.code] || e.message;
}

// The sign-in is complete (200), or the account asks for its TOTP code
// (202): the sign-in page's second step takes over.
async function signedIn(r) {
  if (r.data && r.data.mfaRequired) return go('/signin?challenge=' + encodeURIComponent(r.data.challenge));
  await loadUser();
  say('Signed in.');
  go('/profile');
}

// emailCodeButton is a link to the code page, shown once the settings say
// the method is on.
export function emailCodeButton() {
  const a = h('a', { class: 'button secondary', href: '#/email-code', hidden: true }, 'E-mail me a code');
  api('GET', '/signin/email').then(r => { a.hidden = !(r && r.enabled); }).catch(() => {});
  return a;
}

export function emailCodePage(main) {
  const err = errorBox();
  const sendButton = h('button', { type: 'submit' }, 'Send me a code');
  const form = h('form', { class: 'card narrow', 'aria-labelledby': 'ec-title', novalidate: true },
    h('h1', { id: 'ec-title' }, 'Sign in with a code'),
    h('p', {}, 'Enter the e-mail address of your account. We send it a code and a link that sign you in, without your password.'),
    err,
    field('E-mail', 'email', { type: 'email', autocomplete: 'username', required: true }),
    sendButton,
    h('p', {}, h('a', { href: '#/signin' }, 'Back to sign-in')));
  let digits = 6;
  api('GET', '/signin/email').then(r => { if (r && r.codeLength) digits = r.codeLength; }).catch(() => {});

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    const email = form.email.value.trim();
    if (!email) return err.show('Enter your e-mail address.');
    sendButton.disabled = true;
    try {
      await api('POST', '/signin/email', { email });
      codeStep(email);
    } catch (e) {
      err.show(codeError(e));
      sendButton.disabled = false;
    }
  });

  function codeStep(email) {
    const cerr = errorBox();
    const button = h('button', { type: 'submit' }, 'Sign in');
    const again = h('button', { type: 'button', class: 'secondary' }, 'Send a new code');
    const cform = h('form', { class: 'card narrow', 'aria-labelledby': 'ecc-title', novalidate: true },
      h('h1', { id: 'ecc-title' }, 'Enter the code'),
      h('p', { role: 'status' }, `If ${email} can sign in here, a code is on its way to it. Enter the code, or open the link in the message.`),
      cerr,
      field('Code', 'code', { autocomplete: 'one-time-code', inputmode: 'numeric', maxlength: digits + 4, required: true }),
      button, again,
      h('p', {}, h('a', { href: '#/signin' }, 'Back to sign-in')));
    cform.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      cerr.show('');
      const code = cform.code.value.trim();
      if (!code) return cerr.show('Enter the code.');
      button.disabled = true;
      try {
        await signedIn(await apiResponse('POST', '/signin/email/verify', { email, code }));
      } catch (e) {
        button.disabled = false;
        cerr.show(codeError(e));
        cform.code.select();
      }
    });
    again.addEventListener('click', async () => {
      cerr.show('');
      again.disabled = true;
      try {
        await api('POST', '/signin/email', { email });
        cform.code.value = '';
        say('A new code is on its way; the previous one no longer works.');
      } catch (e) { cerr.show(codeError(e)); } finally { again.disabled = false; }
    });
    form.replaceWith(cform);
    cform.code.focus();
  }

  main.append(form);
  form.email.focus();
}

// The mailed link. Nothing is sent until the user presses the button: a
// mail scanner that opens the link spends nothing.
export function emailLinkPage(main) {
  const q = location.hash.split('?')[1] || '';
  const token = new URLSearchParams(q).get('token') || '';
  const err = errorBox();
  const button = h('button', { type: 'submit' }, 'Sign in');
  const form = h('form', { class: 'card narrow', 'aria-labelledby': 'el-title' },
    h('h1', { id: 'el-title' }, 'Sign in with the link'),
    h('p', {}, 'Press the button to sign in on this device. The link works once.'),
    err, button,
    h('p', {}, h('a', { href: '#/email-code' }, 'Ask for a new code')));
  if (!token) { err.show(codeMessages.missing_field); button.disabled = true; }
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    button.disabled = true;
    try {
      await signedIn(await apiResponse('POST', '/signin/email/verify', { token }));
    } catch (e) {
      err.show(codeError(e));
    }
  });
  main.append(form);
  button.focus();
}

// setPasswordSection replaces "Change password" for an account without a
// password: a fresh code mailed to the account's address proves the
// mailbox, so a session alone does not add a way in.
export function setPasswordSection(onSet) {
  const err = errorBox();
  const ask = h('button', { type: 'button' }, 'E-mail me a code');
  const submit = h('button', { type: 'submit', hidden: true }, 'Set the password');
  const codeField = field('Code from the message', 'code', { autocomplete: 'one-time-code', inputmode: 'numeric', required: true });
  const pw = field('New password (8 characters or more)', 'new', { type: 'password', autocomplete: 'new-password', minlength: 8, required: true });
  const again = field('Repeat the new password', 'again', { type: 'password', autocomplete: 'new-password', required: true });
  for (const f of [codeField, pw, again]) f.hidden = true;
  const form = h('form', { class: 'card', 'aria-labelledby': 'spw-title', novalidate: true },
    h('h2', { id: 'spw-title' }, 'Set a password'),
    h('p', {}, 'Your account has no password: you sign in another way. To add one, confirm it is you with a code sent to your e-mail address.'),
    err, ask, codeField, pw, again, submit);
  ask.addEventListener('click', async () => {
    err.show('');
    ask.disabled = true;
    try {
      await api('POST', '/me/password/code');
      for (const f of [codeField, pw, again, submit]) f.hidden = false;
      ask.textContent = 'Send a new code';
      say('A code is on its way to your e-mail address.');
      form.code.focus();
    } catch (e) { err.show(codeError(e)); } finally { ask.disabled = false; }
  });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    if (form.new.value !== form.again.value) return err.show('The new passwords differ.');
    submit.disabled = true;
    try {
      await api('POST', '/me/password', { code: form.code.value.trim(), password: form.new.value });
      say('Password set. You can now sign in with it too.');
      onSet();
    } catch (e) {
      err.show(codeError(e));
      submit.disabled = false;
    }
  });
  return form;
}
