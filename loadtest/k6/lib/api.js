// The shop's REST API (docs/API.md) as request specs and calls. Each spec
// is [method, url, body, params], what http.batch takes, so a script can
// send the same request twice at once: a double click. Every request is
// tagged with its flow and endpoint (also its name, so URLs with ids group
// into one), which is what the thresholds select on.
import http from 'k6/http';
import { check, fail } from 'k6';
import { ADMIN_TOKEN, BASE_URL, GATEWAY_URL } from './config.js';

// The 402 and 409 answers are outcomes that the scripts classify
// (outcomes.js), not failed requests.
http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 402, 409));

function params(flow, endpoint, token, key) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) {
    headers.Authorization = `Bearer ${token}`;
  }
  if (key) {
    headers['Idempotency-Key'] = key;
  }
  return { headers, tags: { flow, endpoint, name: endpoint } };
}

function spec(method, path, body, p) {
  return [method, BASE_URL + path, body === null ? null : JSON.stringify(body), p];
}

// send sends one spec.
export function send(s) {
  return http.request(s[0], s[1], s[2], s[3]);
}

// ready fails setup unless the service answers /readyz.
export function ready(flow) {
  const res = http.get(`${BASE_URL}/readyz`, { tags: { flow, endpoint: 'readyz', name: 'readyz' } });
  if (res.status !== 200) {
    fail(`${BASE_URL}/readyz answered ${res.status} ${res.error || res.body}: is the stack up?`);
  }
}

// Users

export const registerSpec = (flow, name) => spec('POST', '/v1/users', { name }, params(flow, 'users.create'));

// registerMany creates n users named prefix-1..n, ten at a time, and
// returns [{id, name, token}]; setup fails if one cannot be made.
export function registerMany(flow, prefix, n) {
  const users = [];
  for (let i = 0; i < n; i += 10) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + 10); j++) {
      batch.push(registerSpec(flow, `${prefix}-${j + 1}`));
    }
    for (const res of http.batch(batch)) {
      if (res.status !== 201) {
        fail(`register: ${res.status} ${res.body} (are the rate limits off? SHOP_RATE_LIMIT=off)`);
      }
      users.push(res.json());
    }
  }
  return users;
}

// Products (admin creates them)

export function createProduct(flow, sku, priceCents, stock) {
  const res = send(spec('POST', '/v1/products', { sku, name: `Load test ${sku}`, price_cents: priceCents, stock },
    params(flow, 'products.create', ADMIN_TOKEN)));
  if (res.status !== 201) {
    fail(`create product ${sku}: ${res.status} ${res.body} (is ADMIN_TOKEN the service's SHOP_ADMIN_TOKEN?)`);
  }
  return res.json();
}

export const getProduct = (flow, sku) => send(spec('GET', `/v1/products/${sku}`, null, params(flow, 'products.get')));
export const listProducts = (flow, limit) => send(spec('GET', `/v1/products?limit=${limit}`, null, params(flow, 'products.list')));

// Orders and payments

export const orderSpec = (flow, token, items, key) => spec('POST', '/v1/orders', { items }, params(flow, 'orders.create', token, key));
export const getOrder = (flow, token, id) => send(spec('GET', `/v1/orders/${id}`, null, params(flow, 'orders.get', token)));
export const cancelOrder = (flow, token, id) => send(spec('POST', `/v1/orders/${id}/cancel`, null, params(flow, 'orders.cancel', token)));
export const paySpec = (flow, token, orderId, method, key) =>
  spec('POST', `/v1/orders/${orderId}/payments`, { payment_method: method }, params(flow, 'payments.create', token, key));
export const listPayments = (flow, token, orderId) =>
  send(spec('GET', `/v1/orders/${orderId}/payments`, null, params(flow, 'payments.list', token)));

// Refunds (the order's owner or the admin). A refund of more than the
// order has left is refused with 422 refund_exceeds_remaining: an outcome
// the scripts classify, not a failed request.
const refundAnswers = http.expectedStatuses({ min: 200, max: 299 }, 409, 422);

export function refundSpec(flow, token, orderId, body, key) {
  const p = params(flow, 'refunds.create', token, key);
  p.responseCallback = refundAnswers;
  return spec('POST', `/v1/orders/${orderId}/refunds`, body, p);
}
export const listRefunds = (flow, token, orderId) =>
  send(spec('GET', `/v1/orders/${orderId}/refunds`, null, params(flow, 'refunds.list', token)));

// allOrders pages through GET /v1/orders for the user.
export function allOrders(flow, token) {
  const out = [];
  let cursor = '';
  for (let page = 0; page < 100; page++) {
    const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
    const res = send(spec('GET', `/v1/orders?limit=100${q}`, null, params(flow, 'orders.list', token)));
    if (res.status !== 200) {
      fail(`list orders: ${res.status} ${res.body}`);
    }
    const body = res.json();
    out.push(...body.items);
    if (!body.next_cursor) {
      return out;
    }
    cursor = body.next_cursor;
  }
  fail('list orders: more than 100 pages');
}

// charges reads the payment gateway's audit of an order's charges.
export function charges(flow, orderId) {
  const res = http.get(`${GATEWAY_URL}/v1/charges?reference=${orderId}`,
    { tags: { flow, endpoint: 'gateway.charges', name: 'gateway.charges' } });
  if (res.status !== 200) {
    fail(`gateway audit for ${orderId}: ${res.status} ${res.error || res.body} (is GATEWAY_URL the gateway?)`);
  }
  return res.json().items;
}

// Likes

export function createPost(flow, token, title) {
  const res = send(spec('POST', '/v1/posts', { title }, params(flow, 'posts.create', token)));
  if (res.status !== 201) {
    fail(`create post: ${res.status} ${res.body}`);
  }
  return res.json();
}

export const getPost = (flow, token, id) => send(spec('GET', `/v1/posts/${id}`, null, params(flow, 'posts.get', token)));
export const likeSpec = (flow, token, id) => spec('PUT', `/v1/posts/${id}/like`, null, params(flow, 'posts.like', token));
export const unlikeSpec = (flow, token, id) => spec('DELETE', `/v1/posts/${id}/like`, null, params(flow, 'posts.unlike', token));
export const reconciliation = (flow) => send(spec('GET', '/v1/likes/reconciliation', null, params(flow, 'likes.reconciliation', ADMIN_TOKEN)));

// Seats

export function createEvent(flow, name, rows, seatsPerRow) {
  const res = send(spec('POST', '/v1/events', { name, rows, seats_per_row: seatsPerRow }, params(flow, 'events.create', ADMIN_TOKEN)));
  if (res.status !== 201) {
    fail(`create event: ${res.status} ${res.body} (does the service serve the seats flow? SEATS=0 leaves it out)`);
  }
  return res.json();
}

export const getEvent = (flow, id) => send(spec('GET', `/v1/events/${id}`, null, params(flow, 'events.get')));
export const eventSeats = (flow, id) => send(spec('GET', `/v1/events/${id}/seats`, null, params(flow, 'events.seats')));
export const holdSpec = (flow, token, eventId, seats, key) =>
  spec('POST', `/v1/events/${eventId}/holds`, { seats }, params(flow, 'holds.create', token, key));
export const releaseHold = (flow, token, id) => send(spec('DELETE', `/v1/holds/${id}`, null, params(flow, 'holds.release', token)));
export const confirmSpec = (flow, token, holdId, key) => spec('POST', `/v1/holds/${holdId}/confirm`, null, params(flow, 'holds.confirm', token, key));
export const getBooking = (flow, token, id) => send(spec('GET', `/v1/bookings/${id}`, null, params(flow, 'bookings.get', token)));

// seatLabels names the seats of an event: A1.., rows A-Z.
export function seatLabels(rows, seatsPerRow) {
  const out = [];
  for (let r = 0; r < rows; r++) {
    for (let s = 1; s <= seatsPerRow; s++) {
      out.push(String.fromCharCode(65 + r) + s);
    }
  }
  return out;
}

// expectStatus is a check that names the request when it fails.
export function expectStatus(res, status, what) {
  return check(res, { [`${what}: ${status}`]: (r) => r.status === status });
}
