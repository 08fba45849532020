import { api } from './api.js';
import { h, field, errorBox, say } from './dom.js';
import { go, loadUser } from './app.js';
import { signInWithPasskey, passkeyMessage, passkeysSupported } from './passkeys.js';
import { providerButtons, providerMessage, takeResult } from './identities.js';
import { emailCodeButton } from './emailcode.js';

const messages = {
  invalid_credentials: 'The e-mail or the password is wrong.',
  invalid_email: 'Enter a valid e-mail address.',
  invalid_password: 'The password must be 8 to 1024 characters long.',
  email_unverified: 'Confirm your e-mail address first: open the link sent to it.',
  invalid_code: 'The code is wrong or was already used.',
};

export function signinPage(main) {
  const err = errorBox();
  const button = h('button', { type: 'submit' }, 'Sign in');
  let timer = null;
  const form = h('form', { class: 'card narrow', 'aria-labelledby': 'signin-title', novalidate: true },
    h('h1', { id: 'signin-title' }, 'Sign in'),
    err,
    field('E-mail', 'email', { type: 'email', autocomplete: 'username', required: true }),
    field('Password', 'password', { type: 'password', autocomplete: 'current-password', required: true }),
    button,
    h('p', {}, h('a', { href: '#/forgot' }, 'Forgot your password?')));
  const pkButton = h('button', { type: 'button', class: 'secondary' }, 'Sign in with a passkey');
  pkButton.addEventListener('click', async () => {
    err.show('');
    if (!passkeysSupported()) return err.show('This browser does not support passkeys.');
    pkButton.disabled = true;
    try {
      await signInWithPasskey();
      await loadUser();
      say('Signed in.');
      go('/profile');
    } catch (e) {
      err.show(passkeyMessage(e));
      pkButton.disabled = false;
    }
  });
  form.append(h('p', { class: 'or' }, 'or'), pkButton, emailCodeButton(), providerButtons());
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    const email = form.email.value.trim();
    const password = form.password.value;
    if (!email || !password) return err.show('Enter your e-mail and password.');
    button.disabled = true;
    try {
      const r = await api('POST', '/signin', { email, password });
      if (r && r.mfaRequired) return codeStep(r.challenge);
      await loadUser();
      say('Signed in.');
      go('/profile');
    } catch (e) {
      if (e.code === 'throttled' || e.status === 429) {
        let left = Math.max(1, Math.ceil(e.retryAfter || 60));
        const tick = () => {
          err.show(`Too many failed attempts. Try again in ${left} second${left === 1 ? '' : 's'}.`);
          if (left-- <= 0) { clearInterval(timer); timer = null; err.show(''); button.disabled = false; }
        };
        tick();
        timer = setInterval(tick, 1000);
        return;
      }
      err.show(messages[e.code] || e.message);
      button.disabled = false;
      form.password.focus();
    }
  });
  // The second step: a code for the challenge the password earned.
  function codeStep(challenge) {
    const cerr = errorBox();
    const cbutton = h('button', { type: 'submit' }, 'Verify');
    const cform = h('form', { class: 'card narrow', 'aria-labelledby': 'code-title', novalidate: true },
      h('h1', { id: 'code-title' }, 'Enter your code'),
      h('p', {}, 'Enter the code your authenticator app shows, or one of your recovery codes.'),
      cerr,
      field('Code', 'code', { autocomplete: 'one-time-code', required: true }),
      cbutton);
    cform.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      cerr.show('');
      const code = cform.code.value.trim();
      if (!code) return cerr.show('Enter the code.');
      cbutton.disabled = true;
      try {
        await api('POST', '/signin/mfa', { challenge, code });
        await loadUser();
        say('Signed in.');
        go('/profile');
      } catch (e) {
        cbutton.disabled = false;
        if (e.code === 'invalid_challenge') {
          cform.replaceWith(form);
          button.disabled = false;
          form.password.value = '';
          err.show('The sign-in took too long. Enter your password again.');
          return form.password.focus();
        }
        cerr.show(e.code === 'throttled' ? 'Too many wrong codes. Wait a minute and try again.' : (messages[e.code] || e.message));
        cform.code.select();
      }
    });
    form.replaceWith(cform);
    cform.code.focus();
  }

  main.append(form);
  form.email.focus();
  // Back from an identity provider: refused, or asked for a second factor.
  const result = takeResult();
  if (result.error) err.show(providerMessage(result.error));
  if (result.challenge) codeStep(result.challenge);
  return () => { if (timer) clearInterval(timer); };
}
