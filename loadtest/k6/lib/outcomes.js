// How the scripts read an answer. The 409s below, and a refund's 422, are
// the service's layers doing their job under contention, not failures:
// each is counted in a Counter of its own (conflict_<code>), and only an
// answer no flow expects counts in unexpected_answers, which every script
// holds at zero.
import { sleep } from 'k6';
import { Counter } from 'k6/metrics';
import { RETRY_WAIT_MAX } from './config.js';

const conflicts = {
  // out of stock: the stock guard refused to oversell
  out_of_stock: new Counter('conflict_out_of_stock'),
  // the same Idempotency-Key is still being processed (a double click)
  request_in_progress: new Counter('conflict_request_in_progress'),
  // the resource's lock stayed taken past the wait budget
  resource_busy: new Counter('conflict_resource_busy'),
  // illegal in the resource's state (paying a paid order, ...)
  invalid_state: new Counter('conflict_invalid_state'),
  // a seat is held or booked by someone else
  seat_unavailable: new Counter('conflict_seat_unavailable'),
  // confirming a hold that expired
  hold_expired: new Counter('conflict_hold_expired'),
  // (422) a refund of more than the order has left to refund
  refund_exceeds_remaining: new Counter('conflict_refund_exceeds_remaining'),
};

export const declined = new Counter('payment_declined');
export const replays = new Counter('idempotent_replays');
export const unexpected = new Counter('unexpected_answers');

// code is the problem code of an error answer, or ''.
export function code(res) {
  if (res.status < 400 || !res.body) {
    return '';
  }
  try {
    return res.json().code || '';
  } catch (e) {
    return '';
  }
}

export function replayed(res) {
  return res.headers['Idempotent-Replayed'] === 'true';
}

// classify counts res as an outcome of flow. expected lists the problem
// codes that are outcomes here (a 409's code, or payment_declined).
// It returns 'ok' for a 2xx, the code for an expected problem, and
// 'unexpected' for anything else.
export function classify(res, flow, expected) {
  if (res.status >= 200 && res.status < 300) {
    if (replayed(res)) {
      replays.add(1, { flow });
    }
    return 'ok';
  }
  const c = code(res);
  if (expected.indexOf(c) >= 0) {
    if (conflicts[c]) {
      conflicts[c].add(1, { flow });
    } else if (c === 'payment_declined') {
      declined.add(1, { flow });
    }
    return c;
  }
  unexpected.add(1, { flow, status: String(res.status), code: c });
  console.warn(`${flow}: unexpected ${res.request.method} ${res.url}: ${res.status} ${res.error || res.body}`);
  return 'unexpected';
}

// retrying sends a request again while the service says to wait (409
// request_in_progress or resource_busy, with Retry-After), at most tries
// times, waiting Retry-After capped at RETRY_WAIT_MAX. send sends it and
// returns the response; first, if given, is an answer already had (one
// of a batch). The waits' answers are classified as outcomes of flow; the
// answer returned is left to the caller.
export function retrying(flow, send, first = null, tries = 5) {
  let res = first || send();
  for (let i = 1; i < tries; i++) {
    const c = code(res);
    if (res.status !== 409 || (c !== 'request_in_progress' && c !== 'resource_busy')) {
      break;
    }
    classify(res, flow, [c]);
    const after = parseFloat(res.headers['Retry-After']) || 1;
    sleep(Math.min(after, RETRY_WAIT_MAX));
    res = send();
  }
  return res;
}
