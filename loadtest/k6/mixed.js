// Mixed: a soak of every flow at once, at constant arrival rates, as real
// traffic is: shoppers browse, buy, pay or cancel, fans hold and book seats,
// readers like posts. Thresholds hold the error rate under 1% and p95/p99
// of each endpoint under P95_MS/P99_MS.
//
// Expected 409s, counted not failed: out_of_stock, request_in_progress,
// resource_busy, invalid_state, seat_unavailable, hold_expired. teardown
// checks the likes reconciliation finds no drift.
//
// The rate limits must be off (SHOP_RATE_LIMIT=off): a soak sends each
// user's writes far faster than the limits allow. SEATS=0 leaves the
// seats flow out.
//
//   k6 run -e BASE_URL=http://localhost:8080 -e ADMIN_TOKEN=admin-dev-token \
//     -e RATE=20 -e DURATION=5m -e USERS=50 loadtest/k6/mixed.js
import { check, fail, group, sleep } from 'k6';
import * as api from './lib/api.js';
import { SEATS, THINK, floatEnv, intEnv, loadSku, loadTitle, newKey, pickScenarios, runId } from './lib/config.js';
import { classify, retrying } from './lib/outcomes.js';

const FLOW = 'mixed';
const RATE = intEnv('RATE', 20); // browse iterations a second; the other flows get a share of it
const DURATION = __ENV.DURATION || '5m';
const USERS = intEnv('USERS', 50);
const P95 = floatEnv('P95_MS', 300);
const P99 = floatEnv('P99_MS', 1000);

function arrivals(exec, rate) {
  return {
    executor: 'constant-arrival-rate', exec, rate: Math.max(1, Math.round(rate)), timeUnit: '1s',
    duration: DURATION, preAllocatedVUs: Math.max(2, Math.round(rate)), maxVUs: Math.max(4, 4 * Math.round(rate)),
  };
}

const all = {
  browse: arrivals('browse', RATE),
  buy: arrivals('buy', RATE / 4),
  like: arrivals('like', RATE / 2),
};
if (SEATS) {
  all.seats = arrivals('seats', RATE / 4);
}

const endpoints = ['products.list', 'products.get', 'orders.create', 'payments.create', 'orders.cancel', 'posts.like', 'posts.unlike'];
if (SEATS) {
  endpoints.push('holds.create', 'holds.confirm', 'holds.release');
}
const latency = {};
for (const e of endpoints) {
  latency[`http_req_duration{endpoint:${e}}`] = [`p(95)<${P95}`, `p(99)<${P99}`];
}

export const options = {
  scenarios: pickScenarios(all),
  thresholds: Object.assign({
    http_req_failed: ['rate<0.01'],
    checks: ['rate>0.99'],
    unexpected_answers: ['count<1'],
  }, latency),
};

export function setup() {
  api.ready(FLOW);
  const id = runId();
  const skus = [];
  for (let i = 0; i < 5; i++) {
    skus.push(api.createProduct(FLOW, loadSku(`mixed-${id}-${i}`), 500 + 100 * i, 1000000).sku);
  }
  const users = api.registerMany(FLOW, `shopper-${id}`, USERS);
  const posts = [];
  for (let i = 0; i < 3; i++) {
    posts.push(api.createPost(FLOW, users[i % users.length].token, loadTitle(`Mixed ${id} ${i}`)).id);
  }
  const data = { skus, users, posts, event: '' };
  if (SEATS) {
    data.event = api.createEvent(FLOW, loadTitle(`Mixed ${id}`), 20, 50).id;
  }
  return data;
}

function any(list) {
  return list[Math.floor(Math.random() * list.length)];
}

export function browse(data) {
  group('browse', () => {
    const list = api.listProducts(FLOW, 20);
    check(list, { 'catalogue listed': (r) => r.status === 200 && Array.isArray(r.json().items) });
    const one = api.getProduct(FLOW, any(data.skus));
    check(one, { 'product read': (r) => r.status === 200 && r.headers.Etag !== undefined });
  });
  sleep(THINK);
}

export function buy(data) {
  const user = any(data.users);
  group('buy', () => {
    const placeReq = api.orderSpec(FLOW, user.token, [{ sku: any(data.skus), quantity: 1 }], newKey());
    const placed = retrying(FLOW, () => api.send(placeReq));
    const c = classify(placed, FLOW, ['out_of_stock', 'resource_busy']);
    check(placed, { 'order placed': () => c !== 'unexpected' });
    if (placed.status !== 201) {
      return;
    }
    const order = placed.json();
    sleep(THINK);
    if (Math.random() < 0.7) {
      const payReq = api.paySpec(FLOW, user.token, order.id, 'pm_card_ok', newKey());
      const paid = retrying(FLOW, () => api.send(payReq));
      const p = classify(paid, FLOW, ['resource_busy', 'request_in_progress']);
      check(paid, { 'order paid': () => p !== 'unexpected' });
    } else {
      const cancelled = api.cancelOrder(FLOW, user.token, order.id);
      const k = classify(cancelled, FLOW, ['invalid_state', 'resource_busy']);
      check(cancelled, { 'order cancelled': () => k !== 'unexpected' });
    }
  });
}

export function like(data) {
  const user = any(data.users);
  const post = any(data.posts);
  group('like', () => {
    const spec = Math.random() < 0.7 ? api.likeSpec(FLOW, user.token, post) : api.unlikeSpec(FLOW, user.token, post);
    const res = retrying(FLOW, () => api.send(spec));
    const c = classify(res, FLOW, ['resource_busy']);
    check(res, { 'like applied': () => c !== 'unexpected' });
  });
}

export function seats(data) {
  const user = any(data.users);
  group('seats', () => {
    const row = String.fromCharCode(65 + Math.floor(Math.random() * 20));
    const seat = `${row}${1 + Math.floor(Math.random() * 50)}`;
    const holdReq = api.holdSpec(FLOW, user.token, data.event, [seat], newKey());
    const held = retrying(FLOW, () => api.send(holdReq));
    const c = classify(held, FLOW, ['seat_unavailable']);
    check(held, { 'seat held or taken': () => c !== 'unexpected' });
    if (held.status !== 201) {
      return;
    }
    const hold = held.json();
    sleep(THINK);
    if (Math.random() < 0.5) {
      const confirmReq = api.confirmSpec(FLOW, user.token, hold.id, newKey());
      const booked = retrying(FLOW, () => api.send(confirmReq));
      const b = classify(booked, FLOW, ['hold_expired']);
      check(booked, { 'seat booked': () => b !== 'unexpected' });
    } else {
      const released = api.releaseHold(FLOW, user.token, hold.id);
      check(released, { 'hold released': (r) => r.status === 200 });
    }
  });
}

export function teardown() {
  const rec = api.reconciliation(FLOW);
  if (rec.status !== 200) {
    fail(`reconciliation: ${rec.status} ${rec.body}`);
  }
  if (rec.json().drifted_posts !== 0) {
    fail(`likes drifted: ${rec.body}`);
  }
}
