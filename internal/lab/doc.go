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
// With layers taken off, a run goes to a sandbox instead: a second copy
// of the service, built with the flows' layer switches and serving on a
// loopback port of this process, over tables of its own (the shop_lab
// schema; shop_lab_bare, without the constraints, when layer 4 is off)
// and with a payment gateway of its own. Real orders never see it, and a
// visitor sees what a missing layer lets through — oversold stock, a
// second charge, a seat held twice — next to the same run with every
// layer on.
//
// The lab is an amplifier if left open: N is bounded, one run at a time
// per replica, and it answers 404 unless the server is a demo.
package lab
