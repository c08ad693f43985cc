// The public REST API (docs/API.md), as the pages use it, and the bits
// every page shares: the session, the header, messages.

const TOKEN = 'shop.token';
const NAME = 'shop.name';

// The token lives in sessionStorage: gone when the tab closes, never sent
// anywhere but the Authorization header.
export const session = {
  get token() { return sessionStorage.getItem(TOKEN); },
  get name() { return sessionStorage.getItem(NAME); },
  set(name, token) { sessionStorage.setItem(NAME, name); sessionStorage.setItem(TOKEN, token); },
  clear() { sessionStorage.removeItem(NAME); sessionStorage.removeItem(TOKEN); },
};

// newKey is an Idempotency-Key: one per intent of the user (a click on
// Buy), reused if that same intent is sent again.
export function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// api sends one request and returns {status, ok, data, headers}; data is
// the JSON body (a problem document for an error), or null.
export async function api(method, path, { body, key, auth = true } = {}) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (key) headers['Idempotency-Key'] = key;
  if (auth && session.token) headers.Authorization = `Bearer ${session.token}`;
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    return { status: 0, ok: false, data: { code: 'network_error', detail: String(err) }, headers: new Headers() };
  }
  let data = null;
  const type = res.headers.get('Content-Type') || '';
  if (type.includes('json')) data = await res.json();
  return { status: res.status, ok: res.ok, data, headers: res.headers };
}

// describe says what an answer was, for a message line.
export function describe(r) {
  if (r.ok) return `${r.status}`;
  const d = r.data || {};
  return `${r.status} ${d.code || ''}${d.detail ? ` — ${d.detail}` : ''}`;
}

export function cents(n) {
  return `$${(n / 100).toFixed(2)}`;
}

// el builds an element: el('td', {class: 'num'}, 'text', child…).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) e.append(c);
  return e;
}

// traceLink links the trace of an answer that names one (a problem
// document's trace_id, when the stack traces) to the trace page, or is
// null.
export function traceLink(r) {
  const id = r && r.data && r.data.trace_id;
  if (!id) return null;
  return el('a', { class: 'trace-link', href: `/web/trace.html?id=${encodeURIComponent(id)}`, 'data-trace': id, text: `trace ${id.slice(0, 8)}…` });
}

// say shows a message; with an answer r that names its trace, a link to it.
export function say(node, text, kind = '', r = undefined) {
  node.textContent = text;
  node.className = `msg ${kind}`;
  const link = traceLink(r);
  if (link) node.append(' — ', link);
}

// header marks the current page in the navigation and shows who is
// signed in.
export function header() {
  const here = location.pathname === '/' ? '/' : location.pathname;
  for (const a of document.querySelectorAll('header.top nav a')) {
    if (a.getAttribute('href') === here) a.setAttribute('aria-current', 'page');
  }
  const who = document.getElementById('who');
  if (who) who.textContent = session.name ? `Signed in as ${session.name}` : 'Not signed in';
}

// mountSession fills a section with the register form, or with who is
// signed in and a sign-out button; onChange runs after either.
export function mountSession(box, onChange) {
  box.replaceChildren();
  box.append(el('h2', { text: 'You' }));
  if (session.token) {
    box.append(
      el('p', {}, 'Signed in as ', el('strong', { id: 'signed-in', text: session.name })),
      el('button', { type: 'button', class: 'secondary', onclick: () => { session.clear(); header(); mountSession(box, onChange); onChange(); } }, 'Sign out'),
    );
    return;
  }
  const input = el('input', { type: 'text', id: 'reg-name', name: 'name', required: true, maxlength: '100', autocomplete: 'nickname' });
  const msg = el('p', { class: 'msg', role: 'status' });
  const form = el('form', { class: 'inline', id: 'register' },
    el('div', {}, el('label', { for: 'reg-name', text: 'Your name' }), input),
    el('button', { type: 'submit' }, 'Register'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const r = await api('POST', '/v1/users', { body: { name: input.value }, auth: false });
    if (!r.ok) { say(msg, `Could not register: ${describe(r)}`, 'bad', r); return; }
    session.set(r.data.name, r.data.token);
    header();
    mountSession(box, onChange);
    onChange();
  });
  box.append(el('p', { class: 'hint', text: 'Registering gives you a token, kept in this tab only (sessionStorage).' }), form, msg);
}
