// Package apptest is the one harness of the tests that run the whole
// service: replicas of it on one test database and the Redis lock quorum,
// as docker compose runs them, with a payment gateway reached over HTTP,
// one clock shared by every replica, and a direct pool for checking
// invariants on the database afterwards (New, Env). Each replica's
// requests (Replica.Do) are checked against docs/openapi.yaml on the way.
//
// The flow tests of package app, which race several flows, and each
// flow's own tests over HTTP (internal/seats, internal/likes) use it as
// it is; Start puts
// a round-robin balancer in front of the same replicas for a test that
// talks to the stack only as a client outside would (the k6 scripts'
// runner), and StartWith adds what the race lab and the pages need
// (StackOptions: replica names, the lab's own gateway; the lab's live
// runs come back in through the balancer), as the browser tests run the
// compose stack. A replica of a demo server (SHOP_DEMO=true) has the race
// lab attached, as `shop serve` attaches it (lab.Attach).
package apptest
