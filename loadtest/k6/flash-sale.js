// Flash sale: many buyers, few units. Every buyer double-clicks "buy" (two
// identical requests at once, one Idempotency-Key), then clicks again a
// few times with the same key, as a client retrying a lost answer would.
//
// Shows: no oversell (the stock guard: lock, conditional update, CHECK
// constraint) and one order per key (idempotency). Expected 409s, counted
// not failed: out_of_stock (sold out), request_in_progress (the twin click
// while the first runs), resource_busy (the product's lock past its wait).
// teardown reads the product and every buyer's orders through the API and
// fails the run on an oversell, a lost unit or a second order for one key.
//
// The rate limits must be off (SHOP_RATE_LIMIT=off): they would refuse
// registering this many users from one address.
//
//   k6 run -e BASE_URL=http://localhost:8080 -e ADMIN_TOKEN=admin-dev-token \
//     -e BUYERS=50 -e STOCK=10 -e CLICKS=3 loadtest/k6/flash-sale.js
import http from 'k6/http';
import { check, fail, sleep } from 'k6';
import { Counter } from 'k6/metrics';
import * as api from './lib/api.js';
import { THINK, floatEnv, intEnv, loadSku, newKey, pickScenarios, runId } from './lib/config.js';
import { classify, replayed, retrying } from './lib/outcomes.js';

const P95_MS = floatEnv('P95_MS', 2000); // a storm's p95 bound, in ms
const FLOW = 'flash-sale';
const BUYERS = intEnv('BUYERS', 50);
const STOCK = intEnv('STOCK', 10);
const CLICKS = intEnv('CLICKS', 3); // rounds of clicks per buyer, one key throughout

const created = new Counter('flash_sale_orders_created');

export const options = {
  scenarios: pickScenarios({
    rush: { executor: 'per-vu-iterations', vus: BUYERS, iterations: CLICKS, maxDuration: '2m' },
  }),
  thresholds: {
    checks: ['rate==1'],
    http_req_failed: ['rate<0.01'],
    unexpected_answers: ['count==0'],
    // each order takes one unit: more orders than units is an oversell
    flash_sale_orders_created: [`count<=${STOCK}`],
    'http_req_duration{endpoint:orders.create}': [`p(95)<${P95_MS}`],
  },
};

// One buyer per VU, one key per buyer: every click of this VU is the same
// purchase.
const KEY = newKey();
let myOrder = '';

export function setup() {
  api.ready(FLOW);
  const sku = loadSku(`flash-${runId()}`);
  api.createProduct(FLOW, sku, 1999, STOCK);
  return { sku, stock: STOCK, buyers: api.registerMany(FLOW, `buyer-${runId()}`, BUYERS) };
}

const EXPECTED = ['out_of_stock', 'request_in_progress', 'resource_busy'];

export default function (data) {
  const buyer = data.buyers[(__VU - 1) % data.buyers.length];
  const order = api.orderSpec(FLOW, buyer.token, [{ sku: data.sku, quantity: 1 }], KEY);
  // The double click: both requests at once.
  // The double click, both requests at once; a click told to wait retries.
  const answers = http.batch([order, order]).map((first) => retrying(FLOW, () => api.send(order), first));
  for (const res of answers) {
    const outcome = classify(res, FLOW, EXPECTED);
    check(res, { 'order placed or sold out': () => outcome === 'ok' || outcome === 'out_of_stock' });
    if (res.status !== 201) {
      continue;
    }
    const o = res.json();
    if (!replayed(res)) {
      created.add(1);
    }
    check(o, {
      'one unit of the sale item': (x) => x.items.length === 1 && x.items[0].sku === data.sku && x.items[0].quantity === 1,
      'the same order for every click': (x) => myOrder === '' || x.id === myOrder,
    });
    myOrder = o.id;
  }
  sleep(THINK);
}

export function teardown(data) {
  const res = api.getProduct(FLOW, data.sku);
  if (res.status !== 200) {
    fail(`read ${data.sku}: ${res.status} ${res.body}`);
  }
  const left = res.json().stock_available;
  let sold = 0;
  for (const b of data.buyers) {
    const mine = api.allOrders(FLOW, b.token).filter((o) => o.items.some((i) => i.sku === data.sku));
    if (mine.length > 1) {
      fail(`duplicate order: ${b.name} clicked with one key and has ${mine.length} orders: ${mine.map((o) => o.id).join(', ')}`);
    }
    for (const o of mine) {
      if (o.status !== 'cancelled' && o.status !== 'expired') {
        sold += o.items[0].quantity;
      }
    }
  }
  console.log(`flash sale: ${sold} of ${data.stock} units sold to ${data.buyers.length} buyers, ${left} left`);
  if (sold > data.stock) {
    fail(`oversold: ${sold} units in orders, ${data.stock} in stock`);
  }
  if (sold + left !== data.stock) {
    fail(`stock does not add up: ${sold} in orders + ${left} available != ${data.stock}`);
  }
}
