// The trace page: one trace from Jaeger's query API, read through the load
// balancer (/jaeger/api/… is Jaeger's /api/…, deploy/nginx.conf), drawn
// as a waterfall the way the race lab draws a race: a row per span,
// parents before their children, every bar on the trace's time axis,
// the lock, the transactions and the card processor in the lab's colours,
// and the layer that stopped a request. Without an id, the latest API
// requests a service traced, each a link to its waterfall.
import { el, header, say } from './api.js';
import { axis, BAR, barKind, place } from './waterfall.js';

const JAEGER = '/jaeger/api';
const form = document.getElementById('open');
const idInput = document.getElementById('trace-id');
const msg = document.getElementById('trace-msg');
const recentCard = document.getElementById('recent-card');
const recentForm = document.getElementById('recent-form');
const serviceSelect = document.getElementById('service');
const recent = document.querySelector('#recent tbody');
const wfCard = document.getElementById('wf-card');
const wfInfo = document.getElementById('wf-info');
const waterfall = document.getElementById('waterfall');
const detail = document.getElementById('span-detail');
const detailHint = document.getElementById('span-hint');

// Spans reach Jaeger in batches, seconds after the request: a trace not
// found yet is asked for again, this often, for this long.
const RETRY_MS = 1000;
const WAIT_MS = 15000;

const NO_STORE = 'No trace store answers here: Jaeger runs only with make up-observability '
  + '(docs/OPERATIONS.md, "Traces"), and the replicas send it their spans only then.';

// jaeger asks the query API; {status, data}, data null unless JSON came back.
async function jaeger(path) {
  let res;
  try {
    res = await fetch(`${JAEGER}${path}`);
  } catch (err) {
    return { status: 0, data: null, error: String(err) };
  }
  let data = null;
  if ((res.headers.get('Content-Type') || '').includes('json')) data = await res.json().catch(() => null);
  return { status: res.status, data };
}

const unavailable = (r) => r.status === 0 || r.status === 502 || r.status === 503 || r.status === 504;

// attrs turns Jaeger's [{key, type, value}] into an object.
function attrs(list) {
  const out = {};
  for (const t of list || []) out[t.key] = t.value;
  return out;
}

function failed(a) {
  return a.error === true || a['otel.status_code'] === 'ERROR';
}

// rowsOf orders a trace's spans for drawing: each root (a span whose
// parent is not in the trace) by start, each span followed by its
// children by start, with its depth.
function rowsOf(trace) {
  const byID = new Map(trace.spans.map((s) => [s.spanID, s]));
  const children = new Map();
  const roots = [];
  for (const s of trace.spans) {
    const ref = (s.references || []).find((r) => r.traceID === s.traceID && byID.has(r.spanID));
    if (!ref) { roots.push(s); continue; }
    if (!children.has(ref.spanID)) children.set(ref.spanID, []);
    children.get(ref.spanID).push(s);
  }
  const byStart = (a, b) => a.startTime - b.startTime;
  const rows = [];
  const walk = (s, depth) => {
    rows.push({ span: s, depth });
    for (const c of (children.get(s.spanID) || []).sort(byStart)) walk(c, depth + 1);
  };
  for (const r of roots.sort(byStart)) walk(r, 0);
  return rows;
}

function tagsOf(a) {
  const out = [];
  const status = a['http.response.status_code'];
  if (status !== undefined) out.push(['status', String(status)]);
  if (a['shop.idempotency.replayed'] === true) out.push(['replay', 'replay']);
  if (a['shop.layer']) out.push([`stop-${a['shop.layer']}`, `stopped by ${a['shop.layer']}`]);
  if (a['shop.lock.result'] && a['shop.lock.result'] !== 'acquired') out.push(['waited', `lock ${a['shop.lock.result']}`]);
  if (a['shop.constraint']) out.push(['version', a['shop.constraint']]);
  return out;
}

function showSpan(row, service) {
  const s = row.span;
  const a = attrs(s.tags);
  const items = [['service', service], ['span', s.operationName], ['span id', s.spanID],
    ['duration', `${(s.duration / 1000).toFixed(3)} ms`], ...Object.entries(a).sort().map(([k, v]) => [k, String(v)])];
  for (const l of s.logs || []) {
    const f = attrs(l.fields);
    const rest = Object.entries(f).filter(([k]) => k !== 'event').map(([k, v]) => `${k}=${v}`).join(', ');
    items.push([`event ${f.event || ''}`, rest || '—']);
  }
  detail.replaceChildren(...items.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })]));
  detail.dataset.span = s.spanID;
  detailHint.hidden = true;
}

// draw renders the trace; the page's dataset says what it drew, for
// the browser test.
function draw(trace) {
  const rows = rowsOf(trace);
  const t0 = Math.min(...trace.spans.map((s) => s.startTime));
  const t1 = Math.max(...trace.spans.map((s) => s.startTime + s.duration));
  const ms = (t1 - t0) / 1000;
  const total = Math.max(ms, 0.001);
  const service = (s) => (trace.processes[s.processID] || {}).serviceName || '?';
  const services = [...new Set(trace.spans.map(service))].sort();
  const root = rows[0].span;
  const ra = attrs(root.tags);
  const stops = rows.map((r) => attrs(r.span.tags)['shop.layer']).filter(Boolean);
  let text = `${root.operationName} on ${service(root)}: ${trace.spans.length} spans from ${services.join(', ')}, ${ms.toFixed(1)} ms`;
  if (ra['http.response.status_code'] !== undefined) text += `, answered ${ra['http.response.status_code']}`;
  if (stops.length) text += `; stopped by ${[...new Set(stops)].join(', ')}`;
  wfInfo.textContent = `${text}.`;
  waterfall.replaceChildren(axis(ms), ...rows.map((row) => {
    const s = row.span;
    const a = attrs(s.tags);
    const kind = barKind(s.operationName);
    const start = (s.startTime - t0) / 1000;
    const dur = s.duration / 1000;
    const cls = `wf-bar ${kind ? BAR[kind] : 'wf-req'}${a['shop.lock.result'] === 'busy' ? ' busy' : ''}${failed(a) ? ' failed' : ''}`;
    const track = el('span', { class: 'wf-track' },
      place(el('span', { class: cls, 'data-kind': kind || 'span', title: `${s.operationName} ${dur.toFixed(2)} ms` }), start, dur, total));
    for (const l of s.logs || []) {
      const ev = attrs(l.fields).event;
      if (ev !== 'retry' && ev !== 'stopped') continue;
      const layer = attrs(l.fields)['shop.layer'];
      track.append(place(el('span', { class: `wf-tick wf-${ev === 'retry' ? 'retry' : 'stop'}`, 'data-kind': ev,
        title: `${ev}${layer ? ` (${layer})` : ''} at ${((l.timestamp - t0) / 1000).toFixed(2)} ms` }), (l.timestamp - t0) / 1000, undefined, total));
    }
    const name = el('button', { type: 'button', class: 'link wf-name',
      title: `${service(s)}: ${s.operationName}`, onclick: () => showSpan(row, service(s)) },
    el('span', { class: 'wf-service', text: service(s) }), ` ${s.operationName}`);
    // Through the CSSOM: the pages' policy refuses style attributes.
    name.style.paddingLeft = `${row.depth * 0.75}rem`;
    return el('div', { class: 'wf-row', role: 'listitem', 'data-span': s.spanID, 'data-name': s.operationName,
      'data-service': service(s), 'data-depth': String(row.depth), 'data-kind': kind || 'span', 'data-failed': String(failed(a)) },
    el('span', { class: 'wf-label' }, name),
    track,
    el('span', { class: 'wf-tags' }, ...tagsOf(a).map(([c, t]) => el('span', { class: `wf-tag t-${c}`, text: t }))));
  }));
  waterfall.dataset.trace = trace.traceID;
  waterfall.dataset.spans = String(trace.spans.length);
  wfCard.hidden = false;
  showSpan(rows[0], service(root));
}

async function show(id) {
  idInput.value = id;
  recentCard.hidden = true;
  wfCard.hidden = true;
  say(msg, `Reading trace ${id}…`);
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const r = await jaeger(`/traces/${encodeURIComponent(id)}`);
    if (unavailable(r)) { say(msg, NO_STORE, 'bad'); msg.dataset.state = 'no-store'; return; }
    const trace = r.status === 200 && r.data && r.data.data && r.data.data[0];
    if (trace && trace.spans && trace.spans.length) {
      say(msg, '');
      msg.dataset.state = 'drawn';
      draw(trace);
      return;
    }
    if (r.status !== 404 && r.status !== 200) {
      say(msg, `Jaeger answered ${r.status} for trace ${id}.`, 'bad');
      msg.dataset.state = 'error';
      return;
    }
    if (Date.now() > deadline) {
      say(msg, `Jaeger has no trace ${id}: it keeps the spans it got since it started, in memory, and they arrive `
        + 'seconds after the request; a trace from before that, or from a stack without make up-observability, is not there.', 'bad');
      msg.dataset.state = 'not-found';
      return;
    }
    say(msg, `Trace ${id} is not in Jaeger yet; asking again (spans arrive seconds after the request)…`);
    await new Promise((ok) => { setTimeout(ok, RETRY_MS); });
  }
}

// An API request's trace: the background jobs, the health checks and the
// pages' own files make traces too, which the list leaves out.
const apiRequest = /^(GET|POST|PUT|PATCH|DELETE) \/v1\//;

async function listRecent(service) {
  const r = await jaeger(`/traces?service=${encodeURIComponent(service)}&limit=200&lookback=1h`);
  if (unavailable(r)) { say(msg, NO_STORE, 'bad'); msg.dataset.state = 'no-store'; return; }
  const traces = (r.data && r.data.data) || [];
  const rows = traces.map((t) => {
    const first = rowsOf(t)[0].span;
    const a = attrs(first.tags);
    const status = a['http.response.status_code'];
    const t0 = Math.min(...t.spans.map((s) => s.startTime));
    const t1 = Math.max(...t.spans.map((s) => s.startTime + s.duration));
    return { t, first, status, t0, ms: (t1 - t0) / 1000 };
  }).filter((x) => apiRequest.test(x.first.operationName)).sort((a, b) => b.t0 - a.t0).slice(0, 20);
  recent.replaceChildren(...(rows.length ? rows.map((x) => el('tr', { 'data-trace': x.t.traceID },
    el('td', {}, el('a', { href: `?id=${encodeURIComponent(x.t.traceID)}`, text: x.first.operationName })),
    el('td', { text: new Date(x.t0 / 1000).toLocaleTimeString() }),
    el('td', { class: 'num', text: x.ms.toFixed(1) }),
    el('td', { class: 'num', text: String(x.t.spans.length) }),
    el('td', {}, x.status === undefined ? '—' : el('span', { class: `status s${String(x.status)[0]}`, text: String(x.status) }))))
    : [el('tr', {}, el('td', { colspan: '5', text: `No API request of ${service} traced in the last hour.` }))]));
  recentCard.hidden = false;
}

async function start() {
  const id = new URLSearchParams(location.search).get('id');
  if (id) { await show(id.trim().toLowerCase()); return; }
  const r = await jaeger('/services');
  if (unavailable(r)) { say(msg, NO_STORE, 'bad'); msg.dataset.state = 'no-store'; return; }
  const services = ((r.data && r.data.data) || []).filter((s) => !s.startsWith('jaeger')).sort();
  if (!services.length) { say(msg, 'Jaeger has no spans yet: use the shop, then come back.'); msg.dataset.state = 'empty'; return; }
  serviceSelect.replaceChildren(...services.map((s) => el('option', { value: s, text: s })));
  serviceSelect.value = services.includes('shop') ? 'shop' : services[0];
  msg.dataset.state = 'list';
  await listRecent(serviceSelect.value);
}

form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const id = idInput.value.trim().toLowerCase();
  if (!id) return;
  history.pushState(null, '', `?id=${encodeURIComponent(id)}`);
  show(id);
});
recentForm.addEventListener('submit', (ev) => { ev.preventDefault(); listRecent(serviceSelect.value); });

header();
start();
