// Passkeys (WebAuthn): the profile's list, "Add a passkey", and the
// sign-in page's "Sign in with a passkey". The API sends the publicKey
// options as JSON with binary members in base64url; navigator.credentials
// wants ArrayBuffers, and the answer goes back as JSON in base64url again.
import { api } from './api.js';
import { h, field, errorBox, say, fmtDate } from './dom.js';

const messages = {
  invalid_ceremony: 'That took too long. Try again.',
  passkey_unknown: 'This passkey is not registered here (it may have been removed). Sign in with your password.',
  passkey_cloned: 'This passkey was refused: its counter went backwards, so a copy of it may exist. Sign in another way and remove it.',
  passkey_exists: 'This passkey is already registered.',
  too_many_passkeys: 'You have the most passkeys allowed. Remove one first.',
  passkeys_disabled: 'Passkeys are not available on this platform.',
  throttled: 'Too many failed attempts. Wait a minute and try again.',
  email_unverified: 'Confirm your e-mail address first: open the link sent to it.',
};

export const passkeysSupported = () => !!(window.PublicKeyCredential && navigator.credentials);

export function passkeyMessage(e) {
  if (e && e.name === 'NotAllowedError') return 'No passkey was used (cancelled or timed out).';
  if (e && e.name === 'InvalidStateError') return 'This device already holds a passkey for your account.';
  if (e && e.name === 'SecurityError') return 'Passkeys do not work at this address (ask an administrator: AUTH_WEBAUTHN_RP_ID and AUTH_WEBAUTHN_ORIGINS).';
  return (e && messages[e.code]) || (e && e.message) || String(e);
}

function fromB64u(s) {
  const b64 = s.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((s.length + 3) % 4);
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out.buffer;
}

function toB64u(buf) {
  const bytes = new Uint8Array(buf);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

const withIds = (list) => (list || []).map(c => ({ ...c, id: fromB64u(c.id) }));

function creationOptions(pk) {
  return { ...pk, challenge: fromB64u(pk.challenge), user: { ...pk.user, id: fromB64u(pk.user.id) },
    excludeCredentials: withIds(pk.excludeCredentials) };
}

function requestOptions(pk) {
  return { ...pk, challenge: fromB64u(pk.challenge), allowCredentials: withIds(pk.allowCredentials) };
}

// credentialJSON is PublicKeyCredential.toJSON(), written out for browsers
// that lack it.
function credentialJSON(cred) {
  const r = cred.response;
  const response = { clientDataJSON: toB64u(r.clientDataJSON) };
  if (r.attestationObject) {
    response.attestationObject = toB64u(r.attestationObject);
    if (r.getTransports) response.transports = r.getTransports();
  } else {
    response.authenticatorData = toB64u(r.authenticatorData);
    response.signature = toB64u(r.signature);
    if (r.userHandle) response.userHandle = toB64u(r.userHandle);
  }
  return {
    id: cred.id, rawId: toB64u(cred.rawId), type: cred.type, response,
    authenticatorAttachment: cred.authenticatorAttachment || undefined,
    clientExtensionResults: cred.getClientExtensionResults(),
  };
}

// signInWithPasskey runs the discoverable sign-in; the session cookie is
// set when it resolves.
export async function signInWithPasskey() {
  const begin = await api('POST', '/signin/passkey/begin');
  const cred = await navigator.credentials.get({ publicKey: requestOptions(begin.publicKey) });
  await api('POST', '/signin/passkey/finish', { ceremony: begin.ceremony, credential: credentialJSON(cred) });
}

export function passkeysSection() {
  const err = errorBox();
  const tbody = h('tbody');
  const form = h('form', { 'aria-label': 'Add a passkey', novalidate: true },
    field('Name for the new passkey (optional)', 'passkeyName', { maxlength: 64, autocomplete: 'off' }),
    h('button', { type: 'submit' }, 'Add a passkey'));
  const section = h('section', { class: 'card', 'aria-labelledby': 'pk-title' },
    h('h2', { id: 'pk-title' }, 'Passkeys'),
    h('p', {}, 'A passkey signs you in without a password: your device checks your fingerprint, face or PIN. It counts as two-step sign-in.'),
    err,
    h('div', { class: 'scroll' }, h('table', { 'aria-label': 'Your passkeys' },
      h('thead', {}, h('tr', {}, ['Name', 'Added', 'Last used', ''].map(t => h('th', { scope: 'col' }, t)))),
      tbody)),
    form);

  async function load() {
    try {
      const r = await api('GET', '/me/passkeys');
      tbody.replaceChildren(...(r.passkeys.length ? r.passkeys.map(p => h('tr', {},
        h('td', {}, p.name, p.cloneWarning ? h('strong', { class: 'warning' }, ' (possible copy: remove it)') : ''),
        h('td', {}, fmtDate(p.createdAt)),
        h('td', {}, p.lastUsedAt ? fmtDate(p.lastUsedAt) : 'never'),
        h('td', {}, h('button', { type: 'button', class: 'small danger', 'aria-label': 'Remove passkey ' + p.name, onclick: () => remove(p) }, 'Remove'))))
        : [h('tr', {}, h('td', { colspan: 4 }, 'No passkeys yet.'))]));
    } catch (e) { err.show(passkeyMessage(e)); }
  }

  async function remove(p) {
    if (!confirm(`Remove the passkey “${p.name}”? It no longer signs you in.`)) return;
    err.show('');
    try { await api('DELETE', '/me/passkeys/' + encodeURIComponent(p.id)); await load(); say('Passkey removed.'); }
    catch (e) { err.show(passkeyMessage(e)); }
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.show('');
    if (!passkeysSupported()) return err.show('This browser does not support passkeys.');
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      const begin = await api('POST', '/me/passkeys/begin');
      const cred = await navigator.credentials.create({ publicKey: creationOptions(begin.publicKey) });
      const body = { ceremony: begin.ceremony, credential: credentialJSON(cred) };
      const name = form.passkeyName.value.trim();
      if (name) body.name = name;
      const r = await api('POST', '/me/passkeys/finish', body);
      form.reset();
      await load();
      say(`Passkey “${r.passkey.name}” added.`);
    } catch (e) { err.show(passkeyMessage(e)); }
    button.disabled = false;
  });

  load();
  return section;
}
