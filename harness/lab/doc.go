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
// A lab schema keeps a window of runs, not all of them (sweep.go): before
// a run starts, the rows of earlier runs go once the schema holds more
// than keepUsers users, unless a run on some replica is using it.
//
// With layers taken off, a run goes to a sandbox instead: a second copy
// of the service, built with the variants that take those layers off
// (harness/variants) and serving on a loopback port of this process, over tables of its own (the shop_lab
// schema; shop_lab_bare, without the constraints, when layer 4 is off)
// and with a payment gateway of its own, whose own check of refunds is
// off. Real orders never see it, and a visitor sees what a missing layer
// lets through — oversold stock, a second charge, a seat held twice,
// money given back beyond what was captured — next to the same run with
// every layer on.
//
// The refund storm (refund.go) pays N/10 orders through the API, then
// sends ten support agents (the copy's admin token, a key each) at each
// one, all refunding 60 % of it at once. Its check is the books' for
// refunds, read from the copy's tables and its gateway's audit: per
// order, what the processor gave back against what it captured, its
// refunds against those the shop recorded as succeeded (by the
// processor's refund id), and what the order holds against its refunds
// not failed. A sandbox's processor refunds whatever it is asked, as
// one whose bound is the charge would refund parts that fit in it, so
// what the shop's layers fail to stop is given back and counted.
//
// One race is not made of requests: the redelivery storm races the
// consumers of events (package outbox). Its setup pays N/10 orders
// through the API; its N "requests" are ten copies of each order's
// order.paid, as the copy's outbox holds it, written into the copy's
// stream in one transaction (Broker), so that the consumers find them
// there together, as they find what a broker hands out again after a
// consumer crashed or Redis failed over, before any copy was handled.
// The run waits until every consumer has acknowledged every copy, then
// counts each order's fulfilments in the database and its receipts at
// the copy's mail provider. The copies run the shop's consumers, the
// fulfilment (the inbox, the order's lock, the state rule, the version,
// fulfilments_pkey) and the mail (the inbox, the state rule, the
// provider's key), on streams and with a mail provider of the lab's own
// (MailReplayed counts what the provider's key stopped), so no lab event
// reaches the shop's consumers and no lab receipt its provider. In a
// sandbox the idempotency layer is the consumers' inbox and the
// provider's memory of keys: with it off, copies are mailed again; with
// only the state rule on, copies that read an order paid at once each
// fulfil it.
//
// After the outcome, a race of requests is drawn as a waterfall, from the
// spans its requests made in the copies that served them (package
// tracing), with no tracing backend: each request carries its run and
// number (RunHeader) beside the lab's key, and the copy that serves it,
// on whichever replica, marks its context (MarkRuns) before the copy's
// tracing middleware, so that a copy's tracer provider records the
// race's spans and only those (Traced as its Keep), even with nothing
// exported. The Recorder, a span processor of every copy in the process,
// never holds a request up: it queues each span (dropping, and counting,
// what a full queue cannot take) and writes them in batches, at most
// MaxRunSpans of a run, to lab_spans in the live copy's schema, which
// both replicas share (SpanStore). The replica that ran the race waits
// until a span of every answered request is there, or two seconds, and
// streams the rows: a request's start, length, status and replica, the
// lock's wait and hold, its transactions, the card processor's call, the
// races it lost and tried again, the layer that stopped it, and whether
// it was a replay. The store keeps the last minutes' races.
//
// The lab is no part of the shop: app.New builds the shop alone, and the
// lab attaches itself to a built replica from outside (Attach), adding
// its routes and, before routing, the live copy's; `shop serve` attaches
// it on a demo server, and so do the test stacks (harness/apptest). Its
// copies of the service (copies.go) are app.New's too, on the lab's
// schemas, gateways, mail providers and streams.
//
// The lab is an amplifier if left open: a race is started by a
// registered user, counted against that user's limit (SHOP_RATE_LIMIT_LAB),
// N is bounded, one run at a time per replica, and it answers 404 unless
// the server is a demo.
package lab
