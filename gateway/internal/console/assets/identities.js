// Sign-in with identity providers (OpenID Connect, GitHub): the buttons on
// the sign-in page, what the provider's answer came back with, and the
// linked identities on the profile page.
import { api } from './api.js';
import { h, errorBox, say, fmtDate } from './dom.js';

// The sentence for each code the service sends the browser back with.
export const providerMessages = {
  unknown_provider: 'That sign-in provider is not configured here.',
  invalid_state: 'The sign-in did not start in this browser, took too long or was already finished. Start again.',
  provider_refused: 'The sign-in was cancelled or refused at the provider.',
  missing_code: 'The provider sent no answer. Start again.',
  code_rejected: 'The provider did not accept the sign-in (it expired or was already used). Start again.',
  invalid_id_token: 'The provider\'s answer could not be verified. Ask an administrator.',
  provider_unavailable: 'The sign-in provider cannot be reached. Try again later.',
  identity_not_linked: 'No account is linked to that identity. Sign in with your password and link the provider from your profile, or ask an administrator.',
  identity_unverified: 'The provider has not confirmed your e-mail address, so no account can be made with it.',
  identity_domain: 'Accounts cannot be made for that e-mail domain.',
  identity_email_taken: 'An account with that e-mail address exists already. Sign in to it and link the provider from your profile.',
  identity_taken: 'That identity is linked to another account.',
  email_unverified: 'Confirm your e-mail address first: open the link sent to it.',
  throttled: 'Too many sign-in attempts from this address. Wait a minute and try again.',
  unavailable: 'The platform is busy. Try again shortly.',
  internal: 'The sign-in failed. Try again.',
};

export function providerMessage(code) {
  return providerMessages[code] || providerMessages.internal;
}

// takeResult reads and removes what a provider's answer left in the page's
// address (#/page?error=... or ?challenge=... or ?linked=...).
export function takeResult() {
  const [path, query] = location.hash.slice(1).split('?');
  if (!query) return {};
  const q = new URLSearchParams(query);
  history.replaceState(null, '', '#' + path);
  return { error: q.get('error'), challenge: q.get('challenge'), linked: q.get('linked') };
}

// providerButtons is one link per configured provider; empty when none.
export function providerButtons() {
  const box = h('div', { class: 'providers' });
  api('GET', '/signin/oidc').then(r => {
    box.replaceChildren(...(r.providers || []).map(p =>
      h('a', { class: 'button secondary', href: '/signin/oidc/' + encodeURIComponent(p.name) }, 'Sign in with ' + p.displayName)));
  }).catch(() => {});
  return box;
}

// identitiesSection lists the caller's linked identities with a button to
// link each provider and one to unlink each identity.
export function identitiesSection(result) {
  const err = errorBox();
  const list = h('ul', { class: 'plain' });
  const links = h('div', { class: 'row' });
  const section = h('section', { class: 'card', 'aria-labelledby': 'id-title', hidden: true },
    h('h2', { id: 'id-title' }, 'Sign-in providers'), err, list, links);
  async function load() {
    try {
      const r = await api('GET', '/me/identities');
      section.hidden = !(r.providers || []).length && !(r.identities || []).length;
      const names = Object.fromEntries((r.providers || []).map(p => [p.name, p.displayName]));
      list.replaceChildren(...r.identities.map(i => h('li', {},
        `${names[i.provider] || i.provider}: ${i.email || 'no address'} (linked ${fmtDate(i.createdAt)}, last used ${fmtDate(i.lastUsedAt)}) `,
        h('button', { type: 'button', class: 'small', onclick: () => unlink(i) }, 'Unlink'))));
      if (!r.identities.length) list.append(h('li', {}, 'No provider is linked.'));
      links.replaceChildren(...(r.providers || []).map(p =>
        h('button', { type: 'button', class: 'secondary', onclick: () => link(p.name) }, 'Link ' + p.displayName)));
    } catch (e) { err.show(e.message); }
  }
  async function link(name) {
    err.show('');
    try {
      const r = await api('POST', '/me/identities/' + encodeURIComponent(name) + '/link');
      location.assign(r.url);
    } catch (e) { err.show(e.message); }
  }
  async function unlink(i) {
    err.show('');
    try {
      await api('DELETE', '/me/identities/' + encodeURIComponent(i.id));
      await load();
      say('Provider unlinked.');
    } catch (e) {
      err.show(e.code === 'last_sign_in_method' ? 'This is your only way to sign in: set a password or add a passkey first.' : e.message);
    }
  }
  if (result && result.error) err.show(providerMessage(result.error));
  if (result && result.linked) say('Provider linked.');
  load();
  return section;
}
