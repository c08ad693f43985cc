// Package payments charges orders through a payment gateway reached over
// HTTP, and makes sure a customer is charged at most once per order,
// whatever the retries, replicas, crashes or timeouts.
//
// It is the project's central example. The pay flow in service.go is one
// use case in three steps, each visible there: begin (one transaction),
// charge (the gateway, no transaction open), settle (one transaction). It
// reads top to bottom as its layers (DESIGN.md §1):
//
//   - Layer 0, the client's Idempotency-Key, in atomic phases
//     (brandur/rocket-rides-atomic; idempotency.Store.Atomic on the
//     route): the transaction that opens the processing payment claims
//     the key, and the one that records the success completes it with
//     the answer, so the key and the payment commit together in each
//     phase and no bookkeeping commit is made apart from them. A retried
//     request gets the first answer back, byte for byte. A crash between
//     the phases leaves the key claimed until its lease ends; the request
//     that then takes it over finds its processing payment by (order,
//     key) and carries it on, charged under its own id: once.
//   - Layer 1, a redsync lock on "payment:{order}", held across the
//     gateway call under a watchdog: one payment of an order at a time,
//     across replicas, so a storm of clicks makes one call to the outside
//     world, not fifteen. It serialises the winner's work and is not the
//     losers' queue: a click that finds it held is refused at its first
//     attempt (LockTries) rather than spinning on Redis for the seconds
//     the winner's charge takes, with resource_busy, or, when the click
//     is a copy of the request that holds the lock (the same key),
//     request_in_progress, as on every keyed route.
//   - Layer 2, the order's state machine: a payment begins by moving its
//     order pending_payment → paying (orders.BeginPayment) in the
//     transaction that opens it, so a second payment finds the order
//     paying and the expiry job leaves it alone; it settles paying → paid
//     (orders.Pay), or back to pending_payment when declined
//     (orders.PaymentEnded). The orders store applies these rules; this
//     package names them.
//   - Layer 3, version-checked writes: the outcome and the order's move to
//     paid are written in one transaction, each row only at the version
//     read, so the request and the reconciler cannot both settle one
//     payment. The payment's own row is asked first: its version-checked
//     write is the transaction's first statement, and its row lock makes
//     any other settler wait for the answer. A settler that lost the race
//     returns the recorded outcome before it looks at the order, so it
//     can never take "the order is paid" for "the order stopped waiting"
//     and refund the charge that paid it.
//   - Layer 4, constraints: a partial unique index admits one processing-
//     or-succeeded payment per order (payments_one_active_per_order), and
//     a charge settles one payment (payments_charge_id_key).
//
// Across the network there is one more: the payment's id is the
// Idempotency-Key the gateway sees. The first request, its retries and the
// reconciler all send it, so the gateway charges once however often it is
// asked. No transaction is open while the gateway is called.
//
// When the gateway's answer is lost (a timeout, a crash between the charge
// and its record), or the outcome cannot be recorded within the request's
// budget, the payment stays processing and the request answers 202: a
// charge that may have been made is never answered with a failure. The
// reconciler (reconcile.go), run by every replica, asks the gateway again
// with the same key and records the outcome. Meanwhile the order expiry
// job leaves the order alone. If the order was cancelled while its charge
// was in flight, the charge is refunded, keyed by the payment too: never
// charged but not paid.
package payments
