// Pages reached without a session: asking for a password reset link, and
// the links sent by mail (#/reset?token=..., #/verify?token=...,
// #/confirm-email-change?token=...). The token is in the URL fragment,
// which browsers never send to a server.
import { api, apiResponse } from './api.js';
import { h, field, errorBox, say } from './dom.js';
import { go, loadUser } from './app.js';

function tokenFromHash() {
  const q = location.hash.split('?')[1] || '';
  return new URLSearchParams(q).get('token') || '';
}

const messages = {
  invalid_email: 'Enter a valid e-mail address.',
  invalid_password: 'The new password must be 8 to 1024 characters long.',
  invalid_token: 'This link is invalid, has expired or was already used. Ask for a new one.',
  missing_field: 'This link is incomplete. Open it again from the message.',
  mail_disabled: 'This platform sends no e-mail. Ask an administrator to reset your password.',
  email_taken: 'Another account now uses that address.',
};

export function forgotPage(main) {
  const err = errorBox();
  const done = h('p', { class: 'note', hidden: true });
  const button = h('button', { type: 'submit' }, 'Send me a link');
  const form = h('form', { class: 'card narrow', 'aria-labelledby': 'forgot-title', novalidate: true },
    h('h1', { id: 'forgot-title' }, 'Forgot your password?'),
    h('p', {}, 'Enter the e-mail address of your account. If it belongs to one, a link to choose a new password is sent to it; it works for 30 minutes, once.'),
    err, done,
    field('E-mail', 'email', { type: 'email', autocomplete: 'username', required: true }),
    button,
    h('p', {}, h('a', { href: '#/signin' }, 'Back to sign-in')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    const email = form.email.value.trim();
    if (!email) return err.show('Enter your e-mail address.');
    button.disabled = true;
    try {
      await api('POST', '/password/forgot', { email });
      done.textContent = 'If the address belongs to an account, the link is on its way. Check your mail.';
      done.hidden = false;
      say('Link requested.');
    } catch (e) {
      if (e.status === 429) err.show(`Too many requests. Try again in ${Math.ceil((e.retryAfter || 60) / 60)} minute(s).`);
      else err.show(messages[e.code] || e.message);
    } finally { button.disabled = false; }
  });
  main.append(form);
  form.email.focus();
}

export function resetPage(main) {
  const token = tokenFromHash();
  const err = errorBox();
  const button = h('button', { type: 'submit' }, 'Set the new password');
  const form = h('form', { class: 'card narrow', 'aria-labelledby': 'reset-title', novalidate: true },
    h('h1', { id: 'reset-title' }, 'Choose a new password'),
    h('p', {}, 'Every session of your account ends; sign in again with the new password.'),
    err,
    field('New password (8 characters or more)', 'password', { type: 'password', autocomplete: 'new-password', minlength: 8, required: true }),
    field('Repeat the new password', 'again', { type: 'password', autocomplete: 'new-password', required: true }),
    button);
  if (!token) err.show(messages.missing_field);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    if (form.password.value !== form.again.value) return err.show('The passwords differ.');
    button.disabled = true;
    try {
      await api('POST', '/password/reset', { token, password: form.password.value });
      say('Password changed. Sign in with the new password.');
      go('/signin');
    } catch (e) {
      err.show(messages[e.code] || e.message);
      button.disabled = false;
    }
  });
  main.append(form);
  form.password.focus();
}

export async function verifyPage(main, state) {
  const token = tokenFromHash();
  const status = h('p', { role: 'status' }, 'Confirming your e-mail address…');
  const card = h('section', { class: 'card narrow', 'aria-labelledby': 'verify-title' },
    h('h1', { id: 'verify-title' }, 'E-mail address'), status,
    h('p', {}, h('a', { href: state.user ? '#/profile' : '#/signin' }, state.user ? 'To your profile' : 'To sign-in')));
  main.append(card);
  if (!token) { status.textContent = messages.missing_field; return; }
  try {
    const r = await apiResponse('POST', '/email/verify', { token });
    if (r.status === 202) {
      status.textContent = 'This address is confirmed. The change takes effect once you also open the link sent to your current address.';
      return;
    }
    status.textContent = 'Your e-mail address is confirmed.';
    if (state.user) await loadUser();
    say('E-mail address confirmed.');
  } catch (e) {
    status.textContent = messages[e.code] || e.message;
  }
}

// The link mailed to the current address of an address change asked for
// without the password. Nothing is sent until the user presses the button:
// a mail scanner that opens the link spends nothing.
export function confirmEmailChangePage(main, state) {
  const token = tokenFromHash();
  const err = errorBox();
  const status = h('p', { role: 'status' }, 'Someone signed in to your account asked to change its e-mail address (the mail names the new one). Confirm only if it was you; otherwise close this page and change your password.');
  const button = h('button', { type: 'submit' }, 'Confirm the change');
  const form = h('form', { class: 'card narrow', 'aria-labelledby': 'confirm-title' },
    h('h1', { id: 'confirm-title' }, 'Change of e-mail address'), err, status, button,
    h('p', {}, h('a', { href: state.user ? '#/profile' : '#/signin' }, state.user ? 'To your profile' : 'To sign-in')));
  if (!token) { err.show(messages.missing_field); button.disabled = true; }
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    button.disabled = true;
    try {
      const r = await apiResponse('POST', '/email/change/confirm', { token });
      if (r.status === 202) {
        status.textContent = 'Confirmed from this address. The change takes effect once the link sent to the new address is opened too.';
      } else {
        status.textContent = 'Your e-mail address is changed.';
        if (state.user) await loadUser();
        say('E-mail address changed.');
      }
      button.hidden = true;
    } catch (e) {
      err.show(messages[e.code] || e.message);
    }
  });
  main.append(form);
}
