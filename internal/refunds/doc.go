// Package refunds gives money back: all of what an order was charged, or
// part of it, as often as a client, an agent or the admin asks, and
// never more than was captured, whatever the clicks, the agents and the
// replicas racing each other. A refund may return units too: their
// stock comes back once, when the refund succeeds.
//
// The check-then-act that loses money in real payment systems is this:
// read what was refunded, compare, call the processor. Two refunds of 60
// of a 100 that read at once both pass, and the processor takes both,
// since its own bound is the charge's whole amount
// (juspay/hyperswitch#13182). The flow in service.go is that same
// check, made safe by the layers every flow here stacks (DESIGN.md §1),
// with the amount as the invariant:
//
//   - Layer 0, the client's Idempotency-Key, in atomic phases
//     (idempotency.Store.Atomic on the route): the transaction that
//     begins the refund claims the key, the one that records its success
//     completes it with the answer. Behind it, the refund's row carries
//     the key (refunds_order_request_key), and it is read under the
//     lock: a copy of the request that got past the claim, or a retry
//     after a crash, finds its refund and carries it on, refunded once.
//   - Layer 1, pg_advisory_xact_lock on the order, taken with the begin's
//     BEGIN and held to its COMMIT: the refunds of one order begin one
//     at a time, each reading what the one before held. Not the Redis
//     lock of the pay flow: the lock's scope is a database write (the
//     design note's own choice for such a lock, and what its example,
//     a refund, uses), it costs no round trip of its own, and nothing
//     needs to hold it across the processor's call, because the begin
//     holds the refund's amount on the order before the call. A Redis
//     lock held across the call would only queue legitimate partial
//     refunds behind a slow processor.
//   - Layer 2, the order's rule (orders.Refund): a paid or fulfilled
//     order of the refunder's, for at most what it has left, returns of
//     what it holds; the order holds the amount (refunded_cents, those
//     in flight included) so the next refund is measured against what is
//     left. A refund moves processing → succeeded or failed once.
//   - Layer 3, the version: the order is written at the version read,
//     and what its refunds hold moves by the refund's amount, never to a
//     value read before; the settle writes the refund's own row at its
//     version first, so the request and the reconciler cannot both
//     settle one refund, and the order's row at its version, so two
//     refunds that settle at once decide in turn whether the order is
//     refunded.
//   - Layer 4, constraints: orders_refunded_within_total (an order's
//     refunds never hold more than its total),
//     order_items_returned_within_quantity, refunds_order_request_key,
//     refunds_processor_refund_id_key.
//
// Across the network there is one more: the refund's id is the
// Idempotency-Key the processor sees. The request, its retries and the
// reconciler all send it, so the processor refunds once however often it
// is asked. No transaction is open while the processor is called, and the
// call is made only once the refund's own row says processing.
//
// When the processor's answer is lost, or the outcome cannot be recorded
// within the budget, the refund stays processing and the request answers
// 202: the amount stays held on the order, so no other refund can take
// it meanwhile. The reconciler (reconcile.go), run by every replica, asks
// the processor again with the same key and records the outcome. A
// refund the processor refuses fails, and the order gets back what it
// held.
//
// After the commit: a refund that succeeded writes order.refunded (its
// subject the refund's id) into the outbox in its settle's transaction,
// for the consumers that act on it.
package refunds
