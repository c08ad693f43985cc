// Pay storm: every order is paid in a storm of clicks. Two requests with
// one Idempotency-Key go at once (a double click) together with a third
// under a fresh key (a second tab); every answer told to wait is retried
// with its key. One order in four is paid with a card that is declined,
// then cancelled.
//
// Shows: at most one charge per order, whatever the retries and replicas
// (idempotency, the order's lock, the paying state, the gateway's own
// key). Expected answers, counted not failed: 409 request_in_progress (the
// twin click), resource_busy (the other tab's payment is in flight),
// invalid_state (the order is already paid), 402 payment_declined.
// teardown reads every order and the gateway's audit
// (GET $GATEWAY_URL/v1/charges?reference=<order id>): exactly one charge,
// of the order's total, per paid order; none on an unpaid one.
//
// The rate limits must be off (SHOP_RATE_LIMIT=off): a user may pay and
// cancel only so often.
//
//   k6 run -e BASE_URL=http://localhost:8080 -e GATEWAY_URL=http://localhost:8081 \
//     -e ADMIN_TOKEN=admin-dev-token -e PAYERS=20 -e ORDERS=5 loadtest/k6/pay-storm.js
import http from 'k6/http';
import { check, fail, sleep } from 'k6';
import * as api from './lib/api.js';
import { THINK, floatEnv, intEnv, loadSku, newKey, pickScenarios, runId } from './lib/config.js';
import { classify, retrying } from './lib/outcomes.js';

const P95_MS = floatEnv('P95_MS', 3000); // a storm's p95 bound, in ms
const FLOW = 'pay-storm';
const PAYERS = intEnv('PAYERS', 20);
const ORDERS = intEnv('ORDERS', 5); // orders each payer places and pays
const PRICE = 2500;

export const options = {
  scenarios: pickScenarios({
    storm: { executor: 'per-vu-iterations', vus: PAYERS, iterations: ORDERS, maxDuration: '3m' },
  }),
  thresholds: {
    checks: ['rate==1'],
    http_req_failed: ['rate<0.01'],
    unexpected_answers: ['count==0'],
    'http_req_duration{endpoint:payments.create}': [`p(95)<${P95_MS}`],
  },
};

export function setup() {
  api.ready(FLOW);
  const sku = loadSku(`pay-${runId()}`);
  api.createProduct(FLOW, sku, PRICE, PAYERS * ORDERS * 2);
  return { sku, payers: api.registerMany(FLOW, `payer-${runId()}`, PAYERS) };
}

const PAY_OUTCOMES = ['request_in_progress', 'resource_busy', 'invalid_state', 'payment_declined'];

export default function (data) {
  const payer = data.payers[(__VU - 1) % data.payers.length];
  const placed = api.send(api.orderSpec(FLOW, payer.token, [{ sku: data.sku, quantity: 1 }], newKey()));
  if (!api.expectStatus(placed, 201, 'place order')) {
    classify(placed, FLOW, []);
    return;
  }
  const order = placed.json();
  const declined = __ITER % 4 === 3;
  const method = declined ? 'pm_card_declined' : 'pm_card_ok';

  const shared = api.paySpec(FLOW, payer.token, order.id, method, newKey());
  const other = api.paySpec(FLOW, payer.token, order.id, method, newKey());
  const answers = http.batch([shared, shared, other]).map((first, i) =>
    retrying(FLOW, () => api.send(i < 2 ? shared : other), first));
  let payments = 0;
  for (const res of answers) {
    const outcome = classify(res, FLOW, PAY_OUTCOMES);
    check(res, {
      'paid, declined, or told the order is taken': () =>
        (declined ? outcome === 'payment_declined' : outcome === 'ok' || outcome === 'invalid_state'),
    });
    if (res.status === 201 || res.status === 202) {
      payments++;
    }
  }

  const after = api.getOrder(FLOW, payer.token, order.id);
  check(after, {
    'order paid, or still payable after a decline': (r) =>
      r.status === 200 && (declined ? r.json().status === 'pending_payment' : paidStatus(r.json().status)),
  });
  if (!declined) {
    check(payments, { 'a click was answered with the payment': (n) => n >= 1 });
  } else {
    const cancelled = api.cancelOrder(FLOW, payer.token, order.id);
    check(cancelled, { 'declined order cancelled': (r) => r.status === 200 && r.json().status === 'cancelled' });
    if (cancelled.status !== 200) {
      classify(cancelled, FLOW, []);
    }
  }
  sleep(THINK);
}

export function teardown(data) {
  let paid = 0;
  let unpaid = 0;
  for (const p of data.payers) {
    for (const o of api.allOrders(FLOW, p.token)) {
      const made = api.charges(FLOW, o.id);
      const live = made.filter((c) => c.status === 'succeeded');
      if (paidStatus(o.status)) {
        paid++;
        if (made.length !== 1 || live.length !== 1 || live[0].amount_cents !== o.total_cents) {
          fail(`order ${o.id} is paid with ${made.length} charges (${JSON.stringify(made)}), want one of ${o.total_cents}`);
        }
        const ps = api.listPayments(FLOW, p.token, o.id).json().items.filter((x) => x.status === 'succeeded');
        if (ps.length !== 1 || ps[0].charge_id !== live[0].id) {
          fail(`order ${o.id}: ${ps.length} succeeded payments, want one with charge ${live[0].id}`);
        }
      } else {
        unpaid++;
        if (live.length !== 0) {
          fail(`order ${o.id} is ${o.status} with ${live.length} standing charges: ${JSON.stringify(live)}`);
        }
      }
    }
  }
  console.log(`pay storm: ${paid} orders paid with one charge each, ${unpaid} unpaid with none`);
  if (paid === 0) {
    fail('pay storm: no order was paid');
  }
}

// A paid order stays paid, or is fulfilled once the fulfilment consumer
// has shipped it (docs/DESIGN.md §9).
function paidStatus(status) {
  return status === 'paid' || status === 'fulfilled';
}
