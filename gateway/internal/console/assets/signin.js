import { api } from './api.js';
import { h, field, errorBox, say } from './dom.js';
import { go, loadUser } from './app.js';

const messages = {
  invalid_credentials: 'The e-mail or the password is wrong.',
  invalid_email: 'Enter a valid e-mail address.',
  invalid_password: 'The password must be 8 to 1024 characters long.',
  email_unverified: 'Confirm your e-mail address first: open the link sent to it.',
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
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    const email = form.email.value.trim();
    const password = form.password.value;
    if (!email || !password) return err.show('Enter your e-mail and password.');
    button.disabled = true;
    try {
      await api('POST', '/signin', { email, password });
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
  main.append(form);
  form.email.focus();
  return () => { if (timer) clearInterval(timer); };
}
