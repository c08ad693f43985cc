// Package ratelimit bounds how fast one client may call the service: the
// abuse limits of API.md (429 rate_limited). It is not a defence layer of
// DESIGN.md §1 — correctness never depends on it — but it keeps one client
// from taking what belongs to everyone: a script registering thousands of
// accounts, or one user reserving a product's whole stock for the order
// TTL in a few seconds.
//
// # The pattern
//
// Each limit is a Policy: a name, a Rate ("30/h") and whom it counts
// against. Counting happens in Redis with GCRA (the generic cell rate
// algorithm, github.com/go-redis/redis_rate): one key per client holds the
// theoretical arrival time of its next request, so a limit is one round
// trip and one small key, and every replica that asks the same Redis shares
// the count. A rate of N per period allows a burst of N, then one request
// every period/N; a refused request consumes nothing. The time is the Redis
// server's, so replicas whose clocks disagree still agree on the limit.
//
// Who a request counts against:
//
//   - PerAddress: the client's address (c.RealIP(), which believes
//     X-Forwarded-For only from SHOP_TRUSTED_PROXIES). An IPv6 client is
//     counted by its /64, since one host is routinely given a whole /64
//     and could otherwise step through addresses. Used on registration
//     and the other routes that need no token.
//   - PerUser: the authenticated user. Used on a user's writes, so the
//     middleware runs after the auth middleware and needs its principal.
//
// # Where it sits
//
// A limit is echo middleware listed where the route is registered, so the
// layers read in one line:
//
//	g.POST("/orders", h.create, guard.User, guard.OrderLimit, guard.Idempotency)
//
// After auth, because a per-user limit needs to know the user (and a
// request with a bad token should not spend that user's quota). Before
// idempotency, so every attempt counts, replays included: a replay is
// cheap but not free, a well-behaved client retries a handful of times
// (well inside the burst), and a client replaying in a loop is exactly
// what a limit is for. It also means a refused request never claims or
// stores an Idempotency-Key: the 429 happens before the key is looked at,
// and the same key works once the client may send again. (Package
// idempotency would not store a 429 anyway.)
//
// # Answers
//
// A limited route answers RateLimit-Policy and RateLimit headers
// (draft-ietf-httpapi-ratelimit-headers): `"orders";q=30;w=3600` and
// `"orders";r=29;t=120`, where r is the requests left in the burst and t
// the seconds until the full burst is back. A refusal is 429 rate_limited
// with Retry-After: the whole seconds until one request is allowed again.
//
// # When Redis does not answer
//
// The limiter fails open: the request goes on unlimited, and
// shop_rate_limit_fail_open_total counts it. A limit guards capacity and
// fairness, not correctness, so refusing every request because the
// limiter's store is down would turn a Redis outage into a full outage.
// Each call is bounded (Options.Timeout, 100 ms by default) and the Redis
// client honours that deadline (redisx.ClientWithin: ContextTimeoutEnabled),
// so a dead or unanswering node costs a request at most that. Under a
// starved CPU the bound can pass too: then some requests go uncounted,
// which is the same trade, made for the same reason.
//
// Which Redis: one node, not the lock quorum. A limit is a counter, not a
// mutual exclusion; a lost node loses some counts, and the limits are off
// until it answers again, which is a weaker shop for a while, never a
// wrong one. By default it is the first lock node (SHOP_RATE_LIMIT_REDIS
// moves it elsewhere): no extra server to run, at the price of sharing
// that server's CPU with the locks. The limiter has a client of its own,
// so it never waits for a lock's connection, nor a lock for its.
package ratelimit
