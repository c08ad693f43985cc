// Package gateway is `shop gateway`: a stand-in for a card processor, run as
// its own process on its own port and reached only over HTTP, so the shop's
// payment client meets the same failures it would meet in production: a
// decline, a 5xx, an answer that arrives after the client gave up.
//
// # What it promises
//
//   - The same Idempotency-Key gives the same answer, and never a second
//     charge: a charge, a decline or a refund is remembered under its key
//     and replayed with Idempotent-Replayed: true. A key sent again with
//     another request (another body or another route) is refused with 422
//     idempotency_key_reused.
//   - A refund gives back all of a charge or a part (amount_cents), keyed
//     like a charge; like a real processor's, the refunds of one charge
//     never give back more than it took: past what is left is 422
//     refund_exceeds_remaining, a charge given back whole 409 invalid_state
//     (processor_code charge_already_refunded). Options.NoRefundLimit
//     (SHOP_GATEWAY_REFUND_LIMIT=off) turns that check off, so a test can
//     show the shop's own layers hold without it. GET /v1/charges lists
//     each charge's refunded_cents and its refunds.
//   - Requests with one key are serialised (the second waits for the first
//     and replays its answer); requests with different keys run in parallel.
//   - Nothing is answered before it is durable. Every decision is one line
//     of an append-only JSON-lines journal, written and fsynced before the
//     answer is sent; on start the journal is replayed, so charges, refunds,
//     remembered declines and failed attempts survive a restart.
//
// # Test payment methods
//
//	pm_card_ok        succeeds (201)
//	pm_card_declined  402 payment_declined, remembered under the key
//	pm_card_slow      charged at once, but no answer for its key (first or
//	                  replay) before created_at + SlowDelay: the ambiguous case
//	pm_card_flaky     503 and no charge on the first attempt for a key
//	                  (journaled, so it stays first across a restart); the
//	                  next attempt charges
//
// Any other method is a bad request (400 invalid_request), refused before
// anything is remembered under the key: nothing was charged or declined.
//
// # Layers
//
// One mutex guards the in-memory index and the journal file together, so
// the order of the lines is the order in which decisions were made, and a
// decision (is this charge refunded yet?) and its line are one step. The
// per-key lock sits in front of it and spans the whole request, hold-back
// included, which is what makes a second request with the same key wait
// for the first one's answer. The state is rebuilt by the same apply
// function at start and at run time, so a restart cannot rebuild anything
// the running process did not have. The journal and the per-key lock are
// internal/platform/journal's, shared with shop mailer.
package gateway
