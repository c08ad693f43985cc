// Refund storm: support agents (the admin token) refund parts of paid
// orders, SHARE agents on each order at once. Each agent asks two refunds
// of its order together: PART % of the total, sent twice at once with one
// Idempotency-Key (a double click), and the rest of it (100 − PART %)
// under a key of its own, racing the other agents for the order's
// remainder; then it sends the first again with its key, as a client
// retrying a lost answer would. setup places and pays the orders through
// the API.
//
// Shows: money back once, never more than was captured (the key, the
// order's advisory lock, the refund rule, the order written at its
// version, orders_refunded_within_total; the processor's own key).
// Expected answers, counted not failed: 422 refund_exceeds_remaining (the
// order has less left than asked), 409 invalid_state (all of it was
// refunded already), request_in_progress (the twin click, retried with
// its key). teardown reads every order, its refunds and the gateway's
// audit of its charge (GET $GATEWAY_URL/v1/charges?reference=<order id>),
// and fails the run unless, per order: the refunds the shop recorded as
// succeeded are the refunds the processor made, amount for amount; they
// add up to at most what was captured; the order's refunded_cents is what
// its refunds not failed add up to; and the order is refunded exactly
// when they cover its total. A refund still processing is waited for
// (SETTLE_WAIT seconds) and fails the run if it never settles.
//
// The rate limits must be off (SHOP_RATE_LIMIT=off): setup registers the
// buyers from one address, and each places and pays several orders.
//
//   k6 run -e BASE_URL=http://localhost:8080 -e GATEWAY_URL=http://localhost:8081 \
//     -e ADMIN_TOKEN=admin-dev-token -e AGENTS=20 -e SHARE=4 -e ROUNDS=5 loadtest/k6/refund-storm.js
import http from 'k6/http';
import { check, fail, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import * as api from './lib/api.js';
import { ADMIN_TOKEN, THINK, floatEnv, intEnv, loadSku, newKey, pickScenarios, runId } from './lib/config.js';
import { classify, retrying } from './lib/outcomes.js';

const P95_MS = floatEnv('P95_MS', 3000); // a storm's p95 bound, in ms
const FLOW = 'refund-storm';
const AGENTS = intEnv('AGENTS', 20);
const SHARE = intEnv('SHARE', 4); // agents on one order at once
const ROUNDS = intEnv('ROUNDS', 5); // orders each agent refunds
const PART = Math.min(intEnv('PART', 40), 99); // % of the total the double click asks
const SETTLE_WAIT = floatEnv('SETTLE_WAIT', 45); // s teardown waits for refunds in flight
const UNITS = 4;
const PRICE = 2500; // so an order's total is 10000 cents

// The orders: SHARE agents on each in every round.
const GROUPS = Math.ceil(AGENTS / SHARE);
const ORDERS = GROUPS * ROUNDS;

const refunds = new Counter('refunds_created');
const refundedCents = new Counter('refunded_cents');
const serverErrors = new Counter('server_errors');

export const options = {
  scenarios: pickScenarios({
    storm: { executor: 'per-vu-iterations', vus: AGENTS, iterations: ROUNDS, maxDuration: '3m' },
  }),
  // teardown may wait SETTLE_WAIT for a refund in flight, then reads
  // every order.
  teardownTimeout: `${Math.ceil(SETTLE_WAIT) + 60}s`,
  thresholds: {
    checks: ['rate==1'],
    http_req_failed: ['rate<0.01'],
    unexpected_answers: ['count==0'],
    server_errors: ['count==0'],
    'http_req_duration{endpoint:refunds.create}': [`p(95)<${P95_MS}`],
  },
};

export function setup() {
  api.ready(FLOW);
  const sku = loadSku(`refund-${runId()}`);
  api.createProduct(FLOW, sku, PRICE, ORDERS * UNITS);
  const buyers = api.registerMany(FLOW, `refund-buyer-${runId()}`, Math.min(ORDERS, 10));
  const orders = [];
  for (let i = 0; i < ORDERS; i += 10) {
    const owners = [];
    const placing = [];
    for (let j = i; j < Math.min(ORDERS, i + 10); j++) {
      owners.push(buyers[j % buyers.length]);
      placing.push(api.orderSpec(FLOW, owners[owners.length - 1].token, [{ sku, quantity: UNITS }], newKey()));
    }
    const placed = http.batch(placing).map((res) => {
      if (res.status !== 201) {
        fail(`place order: ${res.status} ${res.body}`);
      }
      return res.json();
    });
    const paying = placed.map((o, j) => api.paySpec(FLOW, owners[j].token, o.id, 'pm_card_ok', newKey()));
    http.batch(paying).forEach((res, j) => {
      if (res.status !== 201 && res.status !== 202) {
        fail(`pay order ${placed[j].id}: ${res.status} ${res.body}`);
      }
      paid(owners[j].token, placed[j].id);
      orders.push({ id: placed[j].id, token: owners[j].token, total: placed[j].total_cents });
    });
  }
  return { sku, orders };
}

// paid waits until the order is paid: a payment answered 202 is settled by
// the reconciler.
function paid(token, id) {
  for (let i = 0; i < 60; i++) {
    const res = api.getOrder(FLOW, token, id);
    if (res.status === 200 && (res.json().status === 'paid' || res.json().status === 'fulfilled')) {
      return;
    }
    sleep(1);
  }
  fail(`order ${id} was not paid within 60 s`);
}

const REFUND_OUTCOMES = ['refund_exceeds_remaining', 'invalid_state'];

export default function (data) {
  const order = data.orders[(__ITER * GROUPS + Math.floor((__VU - 1) / SHARE)) % data.orders.length];
  const part = Math.floor((order.total * PART) / 100);
  const clicked = api.refundSpec(FLOW, ADMIN_TOKEN, order.id, { amount_cents: part, reason: 'load test: a part' }, newKey());
  const rest = api.refundSpec(FLOW, ADMIN_TOKEN, order.id, { amount_cents: order.total - part, reason: 'load test: the rest' }, newKey());
  // The twin click waits for the first with its key as long as it runs.
  const answers = http.batch([clicked, clicked, rest]).map((first, i) =>
    retrying(FLOW, () => api.send(i < 2 ? clicked : rest), first, TWIN_TRIES));

  // One key, one refund: if either twin click was answered with a
  // refund, both were, with the same one; or both were refused.
  const [a, b] = answers;
  check(answers, {
    'a double click answers one refund': () => (ok(a) || ok(b) ? ok(a) && ok(b) && a.json().id === b.json().id : true),
  });

  // The first refund asked again with its key, after its answer: the
  // same refund, never a second.
  if (ok(a)) {
    const again = retrying(FLOW, () => api.send(clicked), null, TWIN_TRIES);
    answers.push(again);
    check(again, { 'a retry with the key answers its refund': (r) => ok(r) && r.json().id === a.json().id });
  }

  const made = new Map();
  for (const res of answers) {
    if (res.status >= 500) {
      serverErrors.add(1, { flow: FLOW });
    }
    const outcome = classify(res, FLOW, REFUND_OUTCOMES);
    check(res, { 'refunded, or refused for what is left': () => outcome !== 'unexpected' });
    if (ok(res)) {
      made.set(res.json().id, res.json().amount_cents);
    }
  }
  for (const amount of made.values()) {
    refunds.add(1, { flow: FLOW });
    refundedCents.add(amount, { flow: FLOW });
  }
  sleep(THINK);
}

// TWIN_TRIES bounds how often a click told request_in_progress asks again.
const TWIN_TRIES = 20;

const ok = (res) => res.status === 201 || res.status === 202;

export function teardown(data) {
  let refunded = 0;
  let whole = 0;
  let given = 0;
  for (const o of data.orders) {
    const mine = settled(o.id);
    const order = api.getOrder(FLOW, o.token, o.id);
    if (order.status !== 200) {
      fail(`order ${o.id}: ${order.status} ${order.body}`);
    }
    const ord = order.json();
    const made = api.charges(FLOW, o.id);
    if (made.length !== 1) {
      fail(`order ${o.id} has ${made.length} charges at the gateway, want 1: ${JSON.stringify(made)}`);
    }
    const charge = made[0];
    const atProcessor = charge.refunds.map((r) => r.amount_cents);
    const recorded = mine.filter((r) => r.status === 'succeeded').map((r) => r.amount_cents);
    const sum = (xs) => xs.reduce((s, x) => s + x, 0);
    const byAmount = (xs) => JSON.stringify(xs.slice().sort((x, y) => x - y));
    if (byAmount(atProcessor) !== byAmount(recorded)) {
      fail(`order ${o.id}: the processor made refunds of ${byAmount(atProcessor)}, the shop recorded ${byAmount(recorded)}`);
    }
    if (sum(atProcessor) > charge.amount_cents || charge.refunded_cents !== sum(atProcessor)) {
      fail(`order ${o.id}: the processor gave back ${sum(atProcessor)} (refunded_cents ${charge.refunded_cents}) of a charge of ${charge.amount_cents}`);
    }
    const held = sum(mine.filter((r) => r.status !== 'failed').map((r) => r.amount_cents));
    if (ord.refunded_cents !== held) {
      fail(`order ${o.id}: refunded_cents ${ord.refunded_cents}, its refunds not failed add up to ${held}`);
    }
    if ((ord.status === 'refunded') !== (sum(recorded) === ord.total_cents)) {
      fail(`order ${o.id} is ${ord.status} with ${sum(recorded)} of ${ord.total_cents} refunded`);
    }
    refunded += recorded.length;
    given += sum(recorded);
    if (ord.status === 'refunded') {
      whole++;
    }
  }
  console.log(`refund storm: ${data.orders.length} orders, ${refunded} refunds of ${given} cents, each at the processor once; ${whole} orders refunded whole; none beyond what was captured`);
  if (refunded === 0) {
    fail('refund storm: nothing was refunded');
  }
}

// settled returns the order's refunds once none is processing, waiting up
// to SETTLE_WAIT seconds for the reconciler.
function settled(id) {
  for (let waited = 0; ; waited += 1) {
    const res = api.listRefunds(FLOW, ADMIN_TOKEN, id);
    if (res.status !== 200) {
      fail(`refunds of order ${id}: ${res.status} ${res.body}`);
    }
    const items = res.json().items;
    if (!items.some((r) => r.status === 'processing')) {
      return items;
    }
    if (waited >= SETTLE_WAIT) {
      fail(`order ${id}: a refund still processing after ${SETTLE_WAIT} s: ${JSON.stringify(items)}`);
    }
    sleep(1);
  }
}
