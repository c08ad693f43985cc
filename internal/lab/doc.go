// Package lab is the race lab behind the web page /web/lab.html: on a
// demo server (SHOP_DEMO=true) it fires N concurrent requests (10–200)
// through the public API, streams each answer to the page as Server-Sent
// Events, then checks the flow's invariant on the database and says which
// layers stopped the losers (the conflict counter and lock metrics, as
// they moved during the run).
//
// A browser opens about six HTTP/1.1 connections per origin, so a race of
// fifty cannot come from the page itself: the service runs it, as any
// client would, over HTTP to its own public address (SHOP_LAB_TARGET, the
// load balancer under compose).
//
// No run writes to the real shop. With every layer on, each request
// carries the lab's key (RouteHeader), and whichever replica the balancer
// picks serves it from its live copy: the same service, every layer and
// limit on, over the tables of the shop_lab_live schema and charging the
// lab's own gateway. The race meets the balancer, both replicas, the
// Redis quorum and PostgreSQL as a real client's would; its users,
// products and charges never reach the catalogue, the real users or the
// journal the real orders are audited against.
//
// With layers taken off, a run goes to a sandbox instead: a second copy
// of the service, built with the flows' layer switches and serving on a
// loopback port of this process, over tables of its own (the shop_lab
// schema; shop_lab_bare, without the constraints, when layer 4 is off)
// and with a payment gateway of its own. Real orders never see it, and a
// visitor sees what a missing layer lets through — oversold stock, a
// second charge, a seat held twice — next to the same run with every
// layer on.
//
// The lab is an amplifier if left open: a race is started by a
// registered user, counted against that user's limit (SHOP_RATE_LIMIT_LAB),
// N is bounded, one run at a time per replica, and it answers 404 unless
// the server is a demo.
package lab
