// Seats: an event's seat map, coloured by state and re-read every two
// seconds; select seats, hold them (one Idempotency-Key per intent, shown),
// watch the hold count down to its expiry, confirm or release it.
import { api, describe, el, header, mountSession, newKey, say, session } from './api.js';

const MAX = 10;
const POLL_MS = 2000;

const form = document.getElementById('pick-event');
const input = document.getElementById('event-id');
const eventMsg = document.getElementById('event-msg');
const mapCard = document.getElementById('map-card');
const map = document.getElementById('seatmap');
const selectionLine = document.getElementById('selection');
const holdButton = document.getElementById('hold');
const clearButton = document.getElementById('clear');
const seatMsg = document.getElementById('seat-msg');
const holdCard = document.getElementById('hold-card');
const holdMsg = document.getElementById('hold-msg');
const countdown = document.getElementById('countdown');
const confirmButton = document.getElementById('confirm');
const releaseButton = document.getElementById('release');

let eventId = '';
let seats = []; // [{seat, status}] as last read
const selected = new Set();
let holdKey = ''; // the key of the current hold intent (this selection)
let hold = null; // the hold this page made, while it is active
let confirmKey = '';
let polling = false;
let timer = 0;

// A seat is its row letter and number: order A1, A2, …, A10, B1.
const row = (s) => s.replace(/\d+$/, '');
const num = (s) => Number(s.slice(row(s).length));
const bySeat = (a, b) => (row(a) === row(b) ? num(a) - num(b) : row(a) < row(b) ? -1 : 1);

function selectionChanged() {
  holdKey = ''; // a new selection is a new intent
  const list = [...selected].sort(bySeat);
  selectionLine.textContent = list.length ? `Selected (${list.length} of at most ${MAX}): ${list.join(', ')}` : 'No seats selected.';
  holdButton.disabled = list.length === 0 || !session.token;
  clearButton.disabled = list.length === 0;
}

function toggle(seat, status) {
  if (selected.has(seat)) selected.delete(seat);
  else if (status !== 'available') { say(seatMsg, `${seat} is ${status}.`, 'bad'); return; }
  else if (selected.size >= MAX) { say(seatMsg, `At most ${MAX} seats per hold.`, 'bad'); return; }
  else selected.add(seat);
  say(seatMsg, '');
  selectionChanged();
  paint();
}

// paint draws the map from the last read, without losing focus.
function paint() {
  const mine = new Set(hold ? hold.seats : []);
  const rows = new Map();
  for (const s of seats) {
    const r = row(s.seat);
    if (!rows.has(r)) rows.set(r, []);
    rows.get(r).push(s);
  }
  const focused = document.activeElement?.dataset?.seat;
  const lines = [];
  for (const [r, list] of rows) {
    const buttons = list.map((s) => {
      const on = selected.has(s.seat);
      const yours = mine.has(s.seat);
      const cls = ['seat', s.status, on ? 'selected' : '', yours ? 'mine' : ''].filter(Boolean).join(' ');
      return el('button', {
        type: 'button', class: cls, 'data-seat': s.seat, 'data-status': s.status,
        'aria-pressed': String(on),
        'aria-label': `${s.seat}, ${s.status}${yours ? ', your hold' : ''}${on ? ', selected' : ''}`,
        'aria-disabled': s.status !== 'available' && !on ? 'true' : undefined,
        onclick: () => toggle(s.seat, s.status),
      }, String(num(s.seat)));
    });
    lines.push(el('div', { class: 'seatrow', role: 'group', 'aria-label': `Row ${r}` },
      el('span', { class: 'rowname', 'aria-hidden': 'true', text: r }), ...buttons));
  }
  map.replaceChildren(...lines);
  if (focused) map.querySelector(`[data-seat="${focused}"]`)?.focus();
}

// load reads the event (its counts, one snapshot) and its seat map.
async function load() {
  if (!eventId || polling) return;
  polling = true;
  try {
    const [ev, sm] = await Promise.all([
      api('GET', `/v1/events/${encodeURIComponent(eventId)}`, { auth: false }),
      api('GET', `/v1/events/${encodeURIComponent(eventId)}/seats`, { auth: false }),
    ]);
    if (!ev.ok || !sm.ok) {
      say(eventMsg, `Could not read the event: ${describe(ev.ok ? sm : ev)}`, 'bad', ev.ok ? sm : ev);
      if (ev.status === 404) { mapCard.hidden = true; stop(); }
      return;
    }
    say(eventMsg, '');
    mapCard.hidden = false;
    const e = ev.data;
    document.getElementById('event-name').textContent = `: ${e.name}`;
    for (const k of ['available', 'held', 'booked']) document.getElementById(`count-${k}`).textContent = String(e[k]);
    document.getElementById('count-total').textContent = String(e.available + e.held + e.booked);
    document.getElementById('counts').dataset.read = String(Date.now());
    seats = sm.data.items;
    paint();
  } finally {
    polling = false;
  }
}

function stop() { clearInterval(timer); timer = 0; }

function open(id) {
  eventId = id.trim();
  selected.clear();
  selectionChanged();
  stop();
  if (!eventId) return;
  input.value = eventId;
  const u = new URL(location.href);
  u.searchParams.set('event', eventId);
  history.replaceState(null, '', u);
  load();
  timer = setInterval(() => { if (!document.hidden) load(); }, POLL_MS);
}

form.addEventListener('submit', (ev) => { ev.preventDefault(); open(input.value); });
clearButton.addEventListener('click', () => { selected.clear(); say(seatMsg, ''); selectionChanged(); paint(); });

holdButton.addEventListener('click', async () => {
  if (!session.token) { say(seatMsg, 'Register first.', 'bad'); return; }
  const list = [...selected].sort(bySeat);
  if (list.length === 0) return;
  if (!holdKey) holdKey = newKey(); // sending the same selection again reuses it
  const key = holdKey;
  holdButton.disabled = true;
  const r = await api('POST', `/v1/events/${encodeURIComponent(eventId)}/holds`, { body: { seats: list }, key });
  holdButton.disabled = selected.size === 0;
  if (r.status === 409 && r.data?.code === 'seat_unavailable') {
    const taken = r.data.seats || [];
    for (const s of taken) selected.delete(s);
    selectionChanged();
    say(seatMsg, `Not held: taken meanwhile — ${taken.join(', ')}. Nothing was held; pick others.`, 'bad');
    seatMsg.dataset.taken = taken.join(',');
    await load();
    return;
  }
  if (!r.ok) { say(seatMsg, `Not held: ${describe(r)} (key ${key})`, 'bad', r); return; }
  say(seatMsg, '');
  selected.clear();
  selectionChanged();
  showHold(r.data, key);
  await load();
});

function showHold(h, key) {
  hold = h;
  confirmKey = '';
  holdCard.hidden = false;
  document.getElementById('hold-id').textContent = h.id;
  document.getElementById('hold-seats').textContent = h.seats.join(', ');
  document.getElementById('hold-key').textContent = key;
  document.getElementById('expires-at').textContent = `(at ${new Date(h.expires_at).toLocaleTimeString()})`;
  const status = document.getElementById('hold-status');
  status.textContent = `Held ${h.seats.length} seat${h.seats.length === 1 ? '' : 's'} for you.`;
  status.dataset.state = 'active';
  say(holdMsg, '');
  confirmButton.disabled = false;
  releaseButton.disabled = false;
  tick();
}

function finish(state, text, kind) {
  const status = document.getElementById('hold-status');
  status.textContent = text;
  status.dataset.state = state;
  confirmButton.disabled = true;
  releaseButton.disabled = true;
  countdown.textContent = '—';
  countdown.dataset.remaining = '0';
  hold = null;
  say(holdMsg, '', kind);
  paint();
}

// tick counts down to the hold's expires_at (the service's clock).
function tick() {
  if (!hold) return;
  const left = Math.max(0, Math.floor((Date.parse(hold.expires_at) - Date.now()) / 1000));
  countdown.textContent = `${Math.floor(left / 60)}:${String(left % 60).padStart(2, '0')}`;
  countdown.dataset.remaining = String(left);
  if (left === 0) { finish('expired', 'Expired: the seats are free again and the hold cannot be confirmed.', 'bad'); load(); return; }
  setTimeout(tick, 250);
}

confirmButton.addEventListener('click', async () => {
  if (!hold) return;
  if (!confirmKey) confirmKey = newKey();
  const h = hold;
  confirmButton.disabled = true;
  const r = await api('POST', `/v1/holds/${h.id}/confirm`, { key: confirmKey });
  if (!r.ok) {
    if (r.data?.code === 'hold_expired') finish('expired', 'Expired before the confirm: nothing was booked.', 'bad');
    else { confirmButton.disabled = false; say(holdMsg, `Not confirmed: ${describe(r)} (key ${confirmKey})`, 'bad', r); }
    await load();
    return;
  }
  finish('booked', `Booked ${r.data.seats.join(', ')}: booking ${r.data.id}.`);
  say(holdMsg, `Confirmed with Idempotency-Key ${confirmKey}.`, 'ok');
  await load();
});

releaseButton.addEventListener('click', async () => {
  if (!hold) return;
  const h = hold;
  releaseButton.disabled = true;
  const r = await api('DELETE', `/v1/holds/${h.id}`);
  if (!r.ok) {
    if (r.data?.code === 'hold_expired') finish('expired', 'Already expired: the seats are free again.', 'bad');
    else { releaseButton.disabled = false; say(holdMsg, `Not released: ${describe(r)}`, 'bad', r); }
    await load();
    return;
  }
  finish('released', `Released ${h.seats.join(', ')}.`);
  await load();
});

header();
mountSession(document.getElementById('session'), () => { selectionChanged(); paint(); });
const fromURL = new URLSearchParams(location.search).get('event');
if (fromURL) open(fromURL);
