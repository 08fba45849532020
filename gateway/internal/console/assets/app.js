// The console's shell: hash routes, the signed-in user, the navigation.
import { api, setUnauthorizedHandler } from './api.js';
import { say } from './dom.js';
import { signinPage } from './signin.js';
import { profilePage } from './profile.js';
import { filesPage } from './files.js';
import { usersPage } from './users.js';
import { logsPage } from './logs.js';
import { forgotPage, resetPage, verifyPage, confirmEmailChangePage } from './account.js';
import { auditPage } from './audit.js';
import { emailCodePage, emailLinkPage } from './emailcode.js';

export const state = { user: null, cleanup: null };

const routes = {
  '/signin': { page: signinPage, title: 'Sign in', public: true },
  '/forgot': { page: forgotPage, title: 'Forgot password', public: true },
  '/email-code': { page: emailCodePage, title: 'Sign in with a code', public: true },
  '/signin-email': { page: emailLinkPage, title: 'Sign in with the link', public: true },
  '/reset': { page: resetPage, title: 'New password', public: true },
  '/verify': { page: verifyPage, title: 'E-mail address', any: true },
  '/confirm-email-change': { page: confirmEmailChangePage, title: 'Change of e-mail address', any: true },
  '/profile': { page: profilePage, title: 'Profile' },
  '/files': { page: filesPage, title: 'Files' },
  '/users': { page: usersPage, title: 'Users', admin: true },
  '/logs': { page: logsPage, title: 'Logs', admin: true },
  '/audit': { page: auditPage, title: 'Audit trail', admin: true },
};

export function go(path) {
  if (location.hash === '#' + path) render();
  else location.hash = '#' + path;
}

export async function loadUser() {
  try {
    const r = await api('GET', '/me');
    state.user = r.user;
  } catch (e) {
    state.user = null;
    if (e.status !== 401) say(e.message, 'error');
  }
  updateNav();
  return state.user;
}

function updateNav() {
  const nav = document.getElementById('nav');
  nav.hidden = !state.user;
  const admin = state.user && state.user.roleName === 'admin';
  nav.querySelectorAll('[data-admin]').forEach(a => { a.hidden = !admin; });
  const here = location.hash.slice(1).split('?')[0];
  nav.querySelectorAll('a').forEach(a => {
    if (a.getAttribute('href') === '#' + here) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  });
}

async function render() {
  if (state.cleanup) { state.cleanup(); state.cleanup = null; }
  const path = location.hash.slice(1).split('?')[0] || '/profile';
  const route = routes[path];
  if (!route) return go('/profile');
  if (!route.public && !route.any && !state.user) return go('/signin');
  if (route.public && state.user) return go('/profile');
  if (route.admin && state.user.roleName !== 'admin') {
    say('That page is for administrators.', 'error');
    return go('/profile');
  }
  updateNav();
  document.title = route.title + ' · ACME console';
  const main = document.getElementById('main');
  main.replaceChildren();
  state.cleanup = (await route.page(main, state)) || null;
  main.focus({ preventScroll: true });
}

document.getElementById('signout').addEventListener('click', async () => {
  try {
    await api('DELETE', '/signout');
    say('Signed out.');
  } catch (e) {
    if (e.status !== 401) return say(e.message, 'error');
  }
  state.user = null;
  updateNav();
  go('/signin');
});

setUnauthorizedHandler(() => {
  if (!state.user) return;
  state.user = null;
  updateNav();
  say('Your session has ended. Please sign in again.', 'error');
  go('/signin');
});

window.addEventListener('hashchange', render);
loadUser().then(render);
