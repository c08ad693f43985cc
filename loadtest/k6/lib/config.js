// Settings every script reads from __ENV (k6 run -e NAME=value), with the
// defaults of `docker compose up` on this machine.

function trimSlash(url) {
  return url.replace(/\/+$/, '');
}

export const BASE_URL = trimSlash(__ENV.BASE_URL || 'http://localhost:8080');
export const GATEWAY_URL = trimSlash(__ENV.GATEWAY_URL || 'http://localhost:8081');
export const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || 'admin-dev-token';

// SEATS=0 leaves the seats flow out of smoke.js and mixed.js, for a
// service that does not serve /v1/events.
export const SEATS = __ENV.SEATS !== '0';

// THINK is the pause between two steps of a user, in seconds.
export const THINK = floatEnv('THINK', 0.2);

// RETRY_WAIT_MAX caps how long a client waits on a Retry-After before it
// retries (seconds).
export const RETRY_WAIT_MAX = floatEnv('RETRY_WAIT_MAX', 2);

// intEnv reads a positive integer size, such as BUYERS.
export function intEnv(name, fallback) {
  const v = parseInt(__ENV[name], 10);
  return Number.isFinite(v) && v > 0 ? v : fallback;
}

export function floatEnv(name, fallback) {
  const v = parseFloat(__ENV[name]);
  return Number.isFinite(v) && v >= 0 ? v : fallback;
}

// What a script creates is tagged, so that the shop's pages leave it out
// (web/shop.js, web/posts.js; docs/LOADTEST.md): a product's SKU starts
// with LOAD-, a post's title and an event's name with "Load test: ".
export const loadSku = (name) => `LOAD-${name}`;
export const loadTitle = (text) => `Load test: ${text}`;

// runId makes the names of a run's data (SKUs, user names) unique, so a
// script can run again against the same database.
export function runId() {
  return Date.now().toString(36) + Math.floor(Math.random() * 1e9).toString(36);
}

// newKey is a fresh Idempotency-Key.
export function newKey() {
  return `k6-${__VU}-${__ITER}-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
}

// pickScenarios keeps the scenario named by __ENV.SCENARIO, or all of
// them: `k6 run -e SCENARIO=smoke flash-sale.js`.
export function pickScenarios(all) {
  const name = __ENV.SCENARIO;
  if (!name) {
    return all;
  }
  if (!all[name]) {
    throw new Error(`SCENARIO=${name}: this script has ${Object.keys(all).join(', ')}`);
  }
  return { [name]: all[name] };
}
