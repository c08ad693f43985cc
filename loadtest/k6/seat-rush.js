// Seat rush: fans grab overlapping pairs of seats in a small hall. A fan
// holds two adjacent seats; if the hold is granted, the fan either
// confirms it with a double click (two confirms at once, one
// Idempotency-Key) or releases it.
//
// Shows: no seat is held or booked twice (all-or-nothing holds, confirms
// that check the hold). Expected 409s, counted not failed:
// seat_unavailable (a seat of the pair is someone else's),
// request_in_progress (the twin confirm), resource_busy, hold_expired.
// Every first confirm adds one to seat_bookings{seat:<label>} for each of
// its seats, and a threshold holds each seat at one booking. teardown reads
// the event and its seats through the API and fails the run unless every
// seat is listed once and the event's available, held and booked counts
// match the seats and add up to the hall.
//
// The rate limits must be off (SHOP_RATE_LIMIT=off): registering this many
// users from one address is limited.
//
//   k6 run -e BASE_URL=http://localhost:8080 -e ADMIN_TOKEN=admin-dev-token \
//     -e FANS=50 -e ROWS=4 -e SEATS_PER_ROW=10 -e TRIES=5 loadtest/k6/seat-rush.js
import http from 'k6/http';
import { check, fail, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import * as api from './lib/api.js';
import { THINK, floatEnv, intEnv, loadTitle, newKey, pickScenarios, runId } from './lib/config.js';
import { classify, replayed, retrying } from './lib/outcomes.js';

const P95_MS = floatEnv('P95_MS', 2000); // a storm's p95 bound, in ms
const FLOW = 'seat-rush';
const FANS = intEnv('FANS', 50);
const ROWS = Math.min(intEnv('ROWS', 4), 26);
const PER_ROW = Math.max(2, Math.min(intEnv('SEATS_PER_ROW', 10), 50));
const TRIES = intEnv('TRIES', 5); // holds each fan tries
const CONFIRM_SHARE = 0.6;

const bookings = new Counter('seat_bookings');

// One threshold per seat: a seat in two bookings crosses it.
const perSeat = {};
for (const seat of api.seatLabels(ROWS, PER_ROW)) {
  perSeat[`seat_bookings{seat:${seat}}`] = ['count<=1'];
}

export const options = {
  scenarios: pickScenarios({
    rush: { executor: 'per-vu-iterations', vus: FANS, iterations: TRIES, maxDuration: '2m' },
  }),
  thresholds: Object.assign({
    checks: ['rate==1'],
    http_req_failed: ['rate<0.01'],
    unexpected_answers: ['count==0'],
    'http_req_duration{endpoint:holds.create}': [`p(95)<${P95_MS}`],
  }, perSeat),
};

export function setup() {
  api.ready(FLOW);
  const id = runId();
  const event = api.createEvent(FLOW, loadTitle(`Seat rush ${id}`), ROWS, PER_ROW);
  return { event: event.id, rows: ROWS, perRow: PER_ROW, fans: api.registerMany(FLOW, `fan-${id}`, FANS) };
}

export default function (data) {
  const fan = data.fans[(__VU - 1) % data.fans.length];
  const row = String.fromCharCode(65 + Math.floor(Math.random() * data.rows));
  const first = 1 + Math.floor(Math.random() * (data.perRow - 1));
  const seats = [`${row}${first}`, `${row}${first + 1}`];

  const holdReq = api.holdSpec(FLOW, fan.token, data.event, seats, newKey());
  const held = retrying(FLOW, () => api.send(holdReq));
  const outcome = classify(held, FLOW, ['seat_unavailable']);
  check(held, { 'seats held, or taken by someone else': () => outcome === 'ok' || outcome === 'seat_unavailable' });
  if (held.status !== 201) {
    sleep(THINK);
    return;
  }
  const hold = held.json();
  check(hold, { 'the hold has the seats asked for': (h) => h.status === 'active' && h.seats.slice().sort().join() === seats.slice().sort().join() });

  if (Math.random() < CONFIRM_SHARE) {
    const confirm = api.confirmSpec(FLOW, fan.token, hold.id, newKey());
    const answers = http.batch([confirm, confirm]).map((r) => retrying(FLOW, () => api.send(confirm), r));
    for (const res of answers) {
      const c = classify(res, FLOW, ['hold_expired']);
      check(res, { 'booking confirmed': () => c === 'ok' && res.json().status === 'confirmed' });
      if (res.status === 201 && !replayed(res)) {
        for (const seat of res.json().seats) {
          bookings.add(1, { seat });
        }
        const again = api.getBooking(FLOW, fan.token, res.json().id);
        check(again, { 'the booking reads back': (r) => r.status === 200 && r.json().seats.length === seats.length });
      }
    }
  } else {
    const released = api.releaseHold(FLOW, fan.token, hold.id);
    classify(released, FLOW, []);
    check(released, { 'hold released': (r) => r.status === 200 && r.json().status === 'released' });
  }
  sleep(THINK);
}

export function teardown(data) {
  const total = data.rows * data.perRow;
  const event = api.getEvent(FLOW, data.event);
  const seats = api.eventSeats(FLOW, data.event);
  if (event.status !== 200 || seats.status !== 200) {
    fail(`read event: ${event.status} ${event.body}; seats: ${seats.status} ${seats.body}`);
  }
  const e = event.json();
  const counts = { available: 0, held: 0, booked: 0 };
  const seen = {};
  for (const s of seats.json().items) {
    if (seen[s.seat]) {
      fail(`seat ${s.seat} is listed twice`);
    }
    seen[s.seat] = true;
    counts[s.status]++;
  }
  console.log(`seat rush: ${counts.booked} booked, ${counts.held} held, ${counts.available} available of ${total}`);
  if (Object.keys(seen).length !== total) {
    fail(`the event lists ${Object.keys(seen).length} seats, want ${total}`);
  }
  if (e.available !== counts.available || e.held !== counts.held || e.booked !== counts.booked) {
    fail(`the event counts ${JSON.stringify(e)} but its seats say ${JSON.stringify(counts)}`);
  }
  if (e.available + e.held + e.booked !== total) {
    fail(`the event's counts add up to ${e.available + e.held + e.booked}, not ${total}`);
  }
}
