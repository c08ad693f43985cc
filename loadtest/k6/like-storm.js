// Like storm: one hot post, every user liking and unliking it, each
// change sent twice at once (a double tap), told-to-wait taps retried.
//
// Shows: like_count stays exact under contention (one like row per user
// and post, the count kept in sharded counter rows in the same
// transaction, a per-user lock). PUT and DELETE name a state, so no
// Idempotency-Key is needed: the twin tap asks for what the first made
// true. Expected 409, counted not failed: resource_busy (the same user's
// other tap still held the lock). teardown asks every user whether they
// like the post (liked_by_me) and fails the run unless like_count is the
// number that do, and unless the admin's reconciliation finds no drift.
//
// The rate limits must be off (SHOP_RATE_LIMIT=off): likes are limited per
// user, and registering this many users from one address is too.
//
//   k6 run -e BASE_URL=http://localhost:8080 -e ADMIN_TOKEN=admin-dev-token \
//     -e LIKERS=50 -e TOGGLES=10 loadtest/k6/like-storm.js
import http from 'k6/http';
import { check, fail, sleep } from 'k6';
import * as api from './lib/api.js';
import { THINK, floatEnv, intEnv, loadTitle, pickScenarios, runId } from './lib/config.js';
import { classify, retrying } from './lib/outcomes.js';

const P95_MS = floatEnv('P95_MS', 2000); // a storm's p95 bound, in ms
const FLOW = 'like-storm';
const LIKERS = intEnv('LIKERS', 50);
const TOGGLES = intEnv('TOGGLES', 10); // likes or unlikes each user sends

export const options = {
  scenarios: pickScenarios({
    storm: { executor: 'per-vu-iterations', vus: LIKERS, iterations: TOGGLES, maxDuration: '2m' },
  }),
  thresholds: {
    checks: ['rate==1'],
    http_req_failed: ['rate<0.01'],
    unexpected_answers: ['count==0'],
    'http_req_duration{endpoint:posts.like}': [`p(95)<${P95_MS}`],
  },
};

export function setup() {
  api.ready(FLOW);
  const id = runId();
  const author = api.registerMany(FLOW, `author-${id}`, 1)[0];
  const post = api.createPost(FLOW, author.token, loadTitle(`Hot post ${id}`));
  return { post: post.id, author: author.token, likers: api.registerMany(FLOW, `liker-${id}`, LIKERS) };
}

export default function (data) {
  const liker = data.likers[(__VU - 1) % data.likers.length];
  // Mostly likes, so the count ends well above zero.
  const like = Math.random() < 0.65;
  const tap = like ? api.likeSpec(FLOW, liker.token, data.post) : api.unlikeSpec(FLOW, liker.token, data.post);
  const answers = http.batch([tap, tap]).map((first) => retrying(FLOW, () => api.send(tap), first));
  for (const res of answers) {
    classify(res, FLOW, ['resource_busy']);
    check(res, {
      'the tap is applied': (r) => r.status === 200 && r.json().liked === like && r.json().post_id === data.post,
    });
  }
  const mine = api.getPost(FLOW, liker.token, data.post);
  check(mine, { 'the user reads their own tap': (r) => r.status === 200 && r.json().liked_by_me === like });
  sleep(THINK);
}

export function teardown(data) {
  let liking = 0;
  for (const u of data.likers) {
    const res = api.getPost(FLOW, u.token, data.post);
    if (res.status !== 200) {
      fail(`read post as ${u.name}: ${res.status} ${res.body}`);
    }
    if (res.json().liked_by_me) {
      liking++;
    }
  }
  const count = api.getPost(FLOW, data.author, data.post).json().like_count;
  console.log(`like storm: like_count ${count}, ${liking} of ${data.likers.length} users like the post`);
  if (count !== liking) {
    fail(`like_count is ${count} but ${liking} users like the post`);
  }
  const rec = api.reconciliation(FLOW);
  if (rec.status !== 200) {
    fail(`reconciliation: ${rec.status} ${rec.body}`);
  }
  const drifted = rec.json().drifted.filter((d) => d.post_id === data.post);
  if (drifted.length > 0) {
    fail(`reconciliation: the post drifted: ${JSON.stringify(drifted)}`);
  }
}
