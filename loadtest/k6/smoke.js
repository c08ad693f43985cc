// Smoke: one user, one iteration of every flow, for a deploy check. Every
// step must answer as docs/API.md says; any failed check fails the run.
// SEATS=0 leaves the seats flow out.
//
// The rate limits may stay on for one iteration, but the other scripts
// need them off (SHOP_RATE_LIMIT=off).
//
//   k6 run -e BASE_URL=http://localhost:8080 -e GATEWAY_URL=http://localhost:8081 \
//     -e ADMIN_TOKEN=admin-dev-token loadtest/k6/smoke.js
import http from 'k6/http';
import { check, group } from 'k6';
import * as api from './lib/api.js';
import { SEATS, loadSku, loadTitle, newKey, runId } from './lib/config.js';
import { code, retrying } from './lib/outcomes.js';

const FLOW = 'smoke';

export const options = {
  scenarios: {
    smoke: { executor: 'shared-iterations', vus: 1, iterations: 1 },
  },
  thresholds: {
    checks: ['rate==1'],
    http_req_failed: ['rate==0'],
  },
};

export function setup() {
  api.ready(FLOW);
  const id = runId();
  const sku = loadSku(`smoke-${id}`);
  api.createProduct(FLOW, sku, 1200, 5);
  return { id, sku, user: api.registerMany(FLOW, `smoke-${id}`, 1)[0] };
}

export default function (data) {
  const token = data.user.token;

  group('catalogue', () => {
    const list = api.listProducts(FLOW, 100);
    check(list, { 'catalogue lists products': (r) => r.status === 200 && r.json().items.length > 0 });
    const one = api.getProduct(FLOW, data.sku);
    check(one, { 'the new product reads back': (r) => r.status === 200 && r.json().stock_available === 5 });
  });

  group('buy and pay', () => {
    const key = newKey();
    const placeReq = api.orderSpec(FLOW, token, [{ sku: data.sku, quantity: 2 }], key);
    const placed = api.send(placeReq);
    check(placed, { 'order placed': (r) => r.status === 201 && r.json().total_cents === 2400 });
    const again = api.send(placeReq);
    check(again, {
      'the same key replays the order': (r) => r.status === 201 && r.headers['Idempotent-Replayed'] === 'true' && r.json().id === placed.json().id,
    });
    const order = placed.json();
    const paid = api.send(api.paySpec(FLOW, token, order.id, 'pm_card_ok', newKey()));
    check(paid, { 'order paid': (r) => r.status === 201 && r.json().status === 'succeeded' });
    const twice = api.send(api.paySpec(FLOW, token, order.id, 'pm_card_ok', newKey()));
    check(twice, { 'a paid order is not paid again': (r) => r.status === 409 && code(r) === 'invalid_state' });
    const audit = api.charges(FLOW, order.id);
    check(audit, { 'the gateway made one charge': (c) => c.length === 1 && c[0].amount_cents === 2400 });
  });

  group('cancel', () => {
    const placed = api.send(api.orderSpec(FLOW, token, [{ sku: data.sku, quantity: 1 }], newKey()));
    check(placed, { 'second order placed': (r) => r.status === 201 });
    const cancelled = api.cancelOrder(FLOW, token, placed.json().id);
    check(cancelled, { 'order cancelled': (r) => r.status === 200 && r.json().status === 'cancelled' });
    const stock = api.getProduct(FLOW, data.sku);
    check(stock, { 'its stock came back': (r) => r.status === 200 && r.json().stock_available === 3 });
  });

  group('likes', () => {
    const post = api.createPost(FLOW, token, loadTitle(`Smoke ${data.id}`));
    const tap = api.likeSpec(FLOW, token, post.id);
    // A double tap; a tap told to wait for the other retries.
    const liked = http.batch([tap, tap]).map((first) => retrying(FLOW, () => api.send(tap), first));
    check(liked, { 'liked twice, counted once': (rs) => rs.every((r) => r.status === 200) });
    const read = api.getPost(FLOW, token, post.id);
    check(read, { 'like_count is 1': (r) => r.status === 200 && r.json().like_count === 1 && r.json().liked_by_me === true });
    const unliked = api.send(api.unlikeSpec(FLOW, token, post.id));
    check(unliked, { 'unliked': (r) => r.status === 200 && r.json().like_count === 0 });
  });

  if (SEATS) {
    group('seats', () => {
      const event = api.createEvent(FLOW, loadTitle(`Smoke ${data.id}`), 1, 4);
      const held = api.send(api.holdSpec(FLOW, token, event.id, ['A1', 'A2'], newKey()));
      check(held, { 'seats held': (r) => r.status === 201 && r.json().status === 'active' });
      const taken = api.send(api.holdSpec(FLOW, token, event.id, ['A2', 'A3'], newKey()));
      check(taken, { 'a held seat cannot be held again': (r) => r.status === 409 && code(r) === 'seat_unavailable' });
      const booked = api.send(api.confirmSpec(FLOW, token, held.json().id, newKey()));
      check(booked, { 'hold confirmed': (r) => r.status === 201 && r.json().status === 'confirmed' });
      check(api.getBooking(FLOW, token, booked.json().id), { 'the booking reads back': (r) => r.status === 200 });
      const hold2 = api.send(api.holdSpec(FLOW, token, event.id, ['A3'], newKey()));
      check(api.releaseHold(FLOW, token, hold2.json().id), { 'hold released': (r) => r.status === 200 && r.json().status === 'released' });
      check(api.getEvent(FLOW, event.id), {
        'the event counts add up': (r) => r.status === 200 && r.json().booked === 2 && r.json().held === 0 && r.json().available === 2,
      });
    });
  }
}
