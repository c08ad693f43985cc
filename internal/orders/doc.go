// Package orders places, cancels and expires orders, reserving stock from
// package inventory, and ships each paid order once.
//
// It is the worked example of defence in depth (DESIGN.md §1). Each use
// case in service.go (Create, Cancel), expiry.go (ExpireDue) and
// fulfil.go (Fulfil) is one function that owns its transaction and reads
// top to bottom as its layers:
//
//   - Layer 0, the Idempotency-Key. Create runs under
//     platform/idempotency's atomic phases (Store.Atomic on the route): the
//     order's transaction claims the key in its first round trip (with
//     BEGIN) and completes it in its last (with the order's insert and
//     COMMIT), so the order and the answer that replays it commit
//     together. The fulfilment's is its inbox row.
//   - Layer 1, a lock keyed on the business request ("order:{user}:{key}")
//     or on the order ("order:{id}"). It saves wasted work; it is not what
//     makes the result correct. For create through HTTP, the claim's
//     pg_try_advisory_xact_lock on that same (user, key), inside the
//     transaction, is the lock; other callers, and cancel, take a redsync
//     lock over the Redis quorum.
//   - Layer 2, the state machine in orders.go: each move is a Change
//     (Cancel, BeginPayment, Pay, PaymentEnded, Expire, Fulfil), a pure
//     rule that says whether the order as read may make the move, and
//     makes it. pending_payment can become paying (a payment in flight),
//     cancelled or expired; paying can become paid, cancelled, or
//     pending_payment again; paid can become fulfilled; nothing else
//     moves.
//   - Layer 3, the version column: the store applies a Change to the
//     order it read and writes it "WHERE id = $1 AND version = $2"
//     (Store.Update, Store.QueueMove), so a writer that read a stale order
//     (a slow replica, a lock that expired under it) changes nothing. For
//     stock, a counter, the equivalent is the atomic conditional decrement
//     (inventory.Store.Take).
//   - Layer 4, constraints: UNIQUE (user_id, request_key) admits one order
//     per request; CHECK (stock_available >= 0) admits no oversell; the
//     primary key of stock_releases admits one return of stock per order,
//     and that of fulfilments one shipment.
//
// A paid order is refunded, in parts, by package refunds: the rules of
// what a refund may take of an order are here (orders.go: Refund,
// RefundSucceeded, RefundFailed), written by the same Store.QueueMove at
// the order's version, what its refunds hold moved by the amount; the
// flow that calls the processor is there.
//
// Any one layer can fail alone (Redis down, a lease expiring in a GC pause,
// a client that sends no key) and the outcome stays correct. The tests
// show it by taking the layers off one by one: a layer lives in a step the
// service takes as an interface (OrderRows, Stock, the fulfilment's
// outbox.Inbox) or in its lock, and a test hands in a variant of that step
// with the layer taken off (harness/variants). The production code has no
// switch.
//
// The expiry job runs in every replica. It claims due orders with
// FOR UPDATE SKIP LOCKED, so concurrent runs split the work instead of
// repeating it, and its move goes through the same version-checked write
// as a user's cancel, so whichever commits first wins and the other changes
// nothing. An order being paid (paying) is not pending and is not
// expired: its payment began in time, and it settles the order either way.
// The order says so itself; this package reads no other package's tables.
package orders
