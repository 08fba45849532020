// Small DOM helpers: elements are built with textContent only (never
// innerHTML), so nothing the API returns is ever parsed as markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// field builds a labelled input; the input gets an id from name.
export function field(label, name, attrs = {}) {
  const id = 'f-' + name + '-' + Math.random().toString(36).slice(2, 7);
  const { options, ...rest } = attrs;
  const input = options
    ? h('select', { id, name, ...rest }, options.map(o => h('option', { value: o.value ?? o, selected: (o.value ?? o) === rest.value }, o.label ?? o)))
    : h('input', { id, name, ...rest });
  return h('div', { class: 'field' }, h('label', { for: id }, label), input);
}

export function fmtDate(s) {
  if (!s) return '';
  const d = new Date(s);
  return isNaN(d) ? String(s) : d.toLocaleString();
}

export function fmtSize(n) {
  if (n < 1024) return n + ' B';
  const u = ['KiB', 'MiB', 'GiB', 'TiB'];
  let i = -1;
  do { n /= 1024; i++; } while (n >= 1024 && i < u.length - 1);
  return n.toFixed(n < 10 ? 1 : 0) + ' ' + u[i];
}

let statusTimer;
// say announces a message in the live region (screen readers hear it).
export function say(msg, kind = 'info') {
  const s = document.getElementById('status');
  s.textContent = msg;
  s.dataset.kind = kind;
  clearTimeout(statusTimer);
  if (kind !== 'error') statusTimer = setTimeout(() => { s.textContent = ''; }, 6000);
}

// errorBox is an alert shown inside a form.
export function errorBox() {
  const el = h('p', { class: 'error', role: 'alert', hidden: true });
  el.show = (msg) => { el.textContent = msg; el.hidden = !msg; };
  return el;
}
