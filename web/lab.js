// The race lab: asks the service to run a race, shows each answer as it
// lands (Server-Sent Events over a POST), then the outcome and the layers'
// counters, then the race's waterfall, drawn from its requests' spans.
import { api, describe, el, header, mountSession, newKey, say, session } from './api.js';
import { axis, BAR, place } from './waterfall.js';

const form = document.getElementById('race');
const runButton = document.getElementById('run');
const runOn = document.getElementById('run-on');
const msg = document.getElementById('lab-msg');
const outcome = document.getElementById('outcome');
const info = document.getElementById('run-info');
const progress = document.getElementById('progress');
const dots = document.getElementById('dots');
const tally = document.getElementById('tally');
const replicas = document.getElementById('replicas');
const replicasNote = document.getElementById('replicas-note');
const metrics = document.querySelector('#metrics tbody');
const answers = document.querySelector('#answers tbody');
const waterfall = document.getElementById('waterfall');
const wfInfo = document.getElementById('wf-info');

async function checkLab() {
  const r = await fetch('/v1/lab/stats');
  if (r.status === 404) {
    document.getElementById('lab-off').hidden = false;
    runButton.disabled = true;
  }
}

function chosen() {
  return {
    scenario: form.querySelector('input[name=scenario]:checked').value,
    size: Number(document.getElementById('size').value),
    layers_off: [...form.querySelectorAll('input[name=off]:checked')].map((c) => c.value),
  };
}

function reset(req) {
  outcome.textContent = '';
  outcome.className = 'outcome';
  delete outcome.dataset.ok;
  dots.replaceChildren(...Array.from({ length: req.size }, () => el('span')));
  tally.replaceChildren();
  replicas.replaceChildren();
  replicasNote.hidden = true;
  metrics.replaceChildren();
  answers.replaceChildren();
  progress.textContent = `0 of ${req.size} answers`;
  progress.dataset.count = '0';
  waterfall.replaceChildren();
  for (const k of Object.keys(waterfall.dataset)) delete waterfall.dataset[k];
  wfInfo.textContent = req.scenario === 'redelivery_storm'
    ? 'A redelivery storm races the consumers of events, not requests: it has no waterfall.'
    : 'The waterfall follows the outcome.';
}

// The waterfall draws at most this many rows, the first requests to
// start: beyond it a row is a few pixels high and says nothing.
const MAX_ROWS = 60;

// labels says, in words, what a row's spans say about its request.
function labels(r) {
  const out = [];
  if (r.replayed) out.push(['replay', 'replay']);
  if (r.waited) out.push(['waited', 'waited on the lock']);
  if (r.lost_at_version) out.push(['version', 'lost at version']);
  if (r.layer && !r.replayed) out.push([`stop-${r.layer}`, `stopped by ${r.layer}`]);
  return out;
}

function barTitle(b) {
  let t = `${b.kind} ${b.ms.toFixed(2)} ms`;
  if (b.result) t += `, ${b.result}`;
  if (b.tries) t += `, ${b.tries} ${b.tries === 1 ? 'try' : 'tries'}`;
  if (b.failed) t += ', rolled back';
  if (b.constraint) t += ` (${b.constraint})`;
  return t;
}

// onWaterfall draws the race's requests, one row each in start order,
// every bar on one time axis: the race's first start to its last end.
function onWaterfall(w, run) {
  const total = Math.max(w.ms, 0.001);
  const drawn = w.rows.slice(0, MAX_ROWS);
  const count = (f) => w.rows.filter(f).length;
  const stoppedBy = new Map();
  for (const r of w.rows) if (r.layer && !r.replayed) stoppedBy.set(r.layer, (stoppedBy.get(r.layer) || 0) + 1);
  const stops = [...stoppedBy.entries()].sort().map(([l, n]) => `${n} stopped by ${l}`);
  const parts = [`${count((r) => r.waited)} waited on the lock`, `${count((r) => r.lost_at_version)} lost at version`,
    `${count((r) => r.replayed)} replays`, ...stops];
  let text = `${w.rows.length} of ${w.requests} requests, ${w.spans} spans, ${w.ms.toFixed(1)} ms: ${parts.join(', ')}.`;
  if (drawn.length < w.rows.length) text += ` The first ${drawn.length} to start are drawn.`;
  if (w.rows.length < w.requests) text += ` ${w.requests - w.rows.length} requests' spans did not arrive in time.`;
  wfInfo.textContent = text;
  waterfall.replaceChildren(axis(w.ms), ...drawn.map((r) => {
    const track = el('span', { class: 'wf-track' },
      place(el('span', { class: 'wf-bar wf-req', title: `${r.route} ${r.ms.toFixed(2)} ms` }), r.start_ms, r.ms, total));
    for (const b of r.bars) {
      const cls = `wf-bar ${BAR[b.kind]}${b.result === 'busy' ? ' busy' : ''}${b.failed ? ' failed' : ''}`;
      track.append(place(el('span', { class: cls, 'data-kind': b.kind, title: barTitle(b) }), b.start_ms, b.ms, total));
    }
    for (const k of r.ticks || []) {
      track.append(place(el('span', { class: `wf-tick wf-${k.kind === 'retry' ? 'retry' : 'stop'}`, 'data-kind': k.kind,
        title: `${k.kind}${k.layer ? ` (${k.layer})` : ''} at ${k.at_ms.toFixed(2)} ms` }), k.at_ms, undefined, total));
    }
    const tags = labels(r);
    return el('div', {
      class: 'wf-row', role: 'listitem', 'data-i': String(r.i), 'data-status': String(r.status), 'data-replica': r.replica,
      'data-layer': r.layer || '', 'data-replayed': String(!!r.replayed), 'data-waited': String(!!r.waited),
      'data-version': String(!!r.lost_at_version),
    },
    el('span', { class: 'wf-label' }, `#${r.i} `, el('span', { class: `status s${String(r.status)[0]}`, text: String(r.status) }), ` ${r.replica}`),
    track,
    el('span', { class: 'wf-tags' }, ...tags.map(([cls, t]) => el('span', { class: `wf-tag t-${cls}`, text: t }))));
  }));
  waterfall.dataset.run = run;
  waterfall.dataset.requests = String(w.requests);
  waterfall.dataset.found = String(w.rows.length);
  waterfall.dataset.drawn = String(drawn.length);
}

const counts = new Map();
const byReplica = new Map();

function bump(map, key, list) {
  map.set(key, (map.get(key) || 0) + 1);
  list.replaceChildren(...[...map.entries()].sort().map(([k, n]) => el('li', { 'data-key': k }, el('span', { class: 'n', text: String(n) }), ` × ${k}`)));
}

function onAnswer(a, size) {
  const n = Number(progress.dataset.count) + 1;
  progress.dataset.count = String(n);
  progress.textContent = `${n} of ${size} answers`;
  const dot = dots.children[n - 1];
  if (dot) { dot.className = `s${String(a.status)[0]}`; dot.title = `#${a.i}: ${a.status} ${a.code || ''}`; }
  let key = String(a.status);
  if (a.code) key += ` ${a.code}`;
  if (a.replayed) key += ' (replayed)';
  bump(counts, key, tally);
  // A copy of an event names no replica; an answer that never came, '?'.
  if (a.replica || a.status === 0) bump(byReplica, a.replica || '?', replicas);
  answers.append(el('tr', {},
    el('td', { class: 'num', text: String(a.i) }),
    el('td', {}, el('span', { class: `status s${String(a.status)[0]}`, text: String(a.status) })),
    el('td', { text: a.code || '' }),
    el('td', { class: 'num', text: a.latency_ms.toFixed(1) }),
    el('td', { text: a.replica || '' })));
}

function onOutcome(o) {
  outcome.textContent = `${o.ok ? '✔' : '✘'} ${o.line}`;
  outcome.className = `outcome ${o.ok ? 'ok' : 'bad'}`;
  outcome.dataset.ok = String(o.ok);
  for (const [k, v] of Object.entries(o.facts)) outcome.dataset[k.replace(/_(.)/g, (_, c) => c.toUpperCase())] = String(v);
  if (!byReplica.size && Object.keys(o.replicas).length) {
    // Copies of events: the replicas are those whose consumers took them.
    replicasNote.hidden = false;
    replicas.replaceChildren(...Object.entries(o.replicas).sort().map(([k, n]) => el('li', { 'data-key': k }, el('span', { class: 'n', text: String(n) }), ` × ${k}`)));
  }
  const series = Object.entries(o.metrics).sort();
  metrics.replaceChildren(...(series.length ? series.map(([k, v]) => el('tr', { 'data-series': k, 'data-value': String(v) },
    el('td', {}, el('code', { text: k })), el('td', { class: 'num', text: Number.isInteger(v) ? String(v) : v.toFixed(3) })))
    : [el('tr', {}, el('td', { colspan: '2', text: 'Nothing moved.' }))]));
  document.getElementById('metrics-note').textContent =
    `As they moved during the run (${o.took_ms} ms), added up over ${o.metrics_from.join(', ')}.`;
}

// run posts the race and reads the event stream off the response body.
async function run(req) {
  runButton.disabled = true;
  runOn.disabled = true;
  counts.clear();
  byReplica.clear();
  reset(req);
  say(msg, 'Running…');
  try {
    if (!session.token) { say(msg, 'Register first (top of the page): a race is started by a user.', 'bad'); return; }
    const res = await fetch('/v1/lab/races', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${session.token}` },
      body: JSON.stringify(req),
    });
    if (!res.ok) {
      const p = await res.json().catch(() => ({}));
      say(msg, `Refused: ${res.status} ${p.code || ''} — ${p.detail || ''}`, 'bad');
      return;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let event = 'message';
        let data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('event: ')) event = line.slice(7);
          else if (line.startsWith('data: ')) data += line.slice(6);
        }
        const v = JSON.parse(data);
        if (event === 'start') {
          info.textContent = `${v.scenario.replace('_', ' ')}, ${v.size} ${v.scenario === 'redelivery_storm' ? 'copies' : 'requests'}, layers ${v.layers}, against the ${v.target} service (run ${v.run})`;
          outcome.dataset.run = v.run;
          outcome.dataset.target = v.target;
        } else if (event === 'answer') onAnswer(v, req.size);
        else if (event === 'outcome') {
          onOutcome(v);
          say(msg, '');
          if (req.scenario !== 'redelivery_storm') wfInfo.textContent = 'Reading the race\'s spans…';
        } else if (event === 'waterfall') onWaterfall(v, outcome.dataset.run);
        else if (event === 'failure') say(msg, `The run failed: ${v.detail}`, 'bad');
      }
    }
    if (req.scenario !== 'redelivery_storm' && outcome.dataset.ok !== undefined && !waterfall.dataset.run) {
      wfInfo.textContent = 'No waterfall this time: the race\'s spans could not be read.';
    }
    runOn.hidden = req.layers_off.length === 0;
  } catch (err) {
    say(msg, `The run failed: ${err}`, 'bad');
  } finally {
    runButton.disabled = false;
    runOn.disabled = false;
  }
}

form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  run(chosen());
});
runOn.addEventListener('click', () => {
  for (const c of form.querySelectorAll('input[name=off]')) c.checked = false;
  run(chosen());
});

// six is the small race the page can run itself: one intent, sent six
// times at once with one key.
async function six() {
  const list = document.getElementById('six-answers');
  const out = document.getElementById('six-outcome');
  list.replaceChildren();
  out.textContent = '';
  out.className = 'outcome';
  delete out.dataset.orders;
  if (!session.token) { say(msg, 'Register first (top of the page): the six clicks are yours.', 'bad'); return; }
  const key = newKey();
  const body = { items: [{ sku: 'STICKER-PACK', quantity: 1 }] };
  const sent = performance.now();
  const answers = await Promise.all(Array.from({ length: 6 }, async (_, i) => {
    const r = await api('POST', '/v1/orders', { body, key });
    const ms = (performance.now() - sent).toFixed(0);
    const replayed = r.headers.get('Idempotent-Replayed') === 'true';
    list.append(el('li', { 'data-status': String(r.status) }, el('span', { class: `status s${String(r.status)[0]}`, text: String(r.status) }),
      ` #${i + 1} ${r.ok ? `order …${r.data.id.slice(-8)}${replayed ? ' (replayed)' : ''}` : describe(r)} — ${ms} ms, ${r.headers.get('X-Served-By') || '?'}`));
    return r;
  }));
  const ids = new Set(answers.filter((r) => r.ok).map((r) => r.data.id));
  const mine = await api('GET', '/v1/orders?limit=100');
  const stored = mine.ok ? mine.data.items.filter((o) => ids.has(o.id)).length : 0;
  const ok = ids.size === 1 && stored === 1;
  out.dataset.orders = String(ids.size);
  out.textContent = `${ok ? '✔' : '✘'} 6 requests with one key, ${ids.size} order${ids.size === 1 ? '' : 's'} (key ${key.slice(0, 8)}…)`;
  out.className = `outcome ${ok ? 'ok' : 'bad'}`;
}
document.getElementById('six').addEventListener('click', six);

header();
mountSession(document.getElementById('session'), () => {});
checkLab();
