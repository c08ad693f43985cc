// Package seats sells the seats of events: holds of 1–10 seats, all or
// nothing, that expire, and bookings that sell a seat once, ever.
//
// It is the classic race of ticketing: many fans, overlapping seat sets,
// holds that expire while someone pays. The lesson this package teaches:
// a multi-resource claim is all-or-nothing in one transaction, its locks
// are taken in one global order, and the database decides what the locks
// only make cheap.
//
// A hold (Service.Hold) reads top to bottom in service.go as its layers:
//
//   - Layer 0, the Idempotency-Key on POST …/holds and …/confirm: one
//     request is one hold, however often it is sent. The key's record is
//     claimed first and completed last in the hold's own transaction
//     (idempotency.Store.Atomic), so the hold and the answer that replays
//     it commit together.
//   - First, one read outside any transaction (Store.Glance): a hold of
//     seats the database already shows taken is refused at once, 409
//     seat_unavailable, before it takes a lock or a transaction. It is
//     layer 2 asked early, of a snapshot; the transaction asks again.
//   - Layer 1, pg_advisory_xact_lock per seat, taken in seat order (A1,
//     A2, …, B1) inside the hold's transaction, so two holds that overlap
//     queue on their first common seat and cannot deadlock; holds of
//     other seats never wait, and a waiter is woken by the holder's
//     commit. SHOP_SEAT_LOCK=redsync takes a redsync lock per seat,
//     seat:{event}:{seat}, in the same order before the transaction, and
//     none takes no lock; docs/DESIGN.md says why the default is the
//     first, from what `shop bench seats` and `shop bench strategies`
//     measured (with a lock per section, too).
//   - Layer 2, the states: a seat available → held → booked (held →
//     available on release or expiry); a hold active → confirmed |
//     released | expired (CheckAvailable, Hold.Confirm, Hold.Release).
//   - Layer 3, the version: each seat is written only while it is
//     available at the version its transaction read (WHERE status =
//     'available' AND version = $read), and a hold is moved only at the version read, so
//     of two holds that read the same available seat, or a confirm and
//     the expiry job on the same hold, one writes and the other re-reads.
//   - Layer 4, the constraints: hold_seats_one_active_per_seat admits one
//     active hold per seat, tickets_one_per_seat one ticket per seat ever,
//     bookings_one_per_hold one booking per hold.
//
// The caps (Caps.Admit) bound what one user holds of one event: seats per
// hold, active holds and held seats. The hold's transaction counts the
// user's active holds after taking pg_advisory_xact_lock on (user, event),
// part of layer 1, so two holds by one user cannot both pass the count.
//
// The hold's transaction is three round trips to PostgreSQL (holdtx.go):
// BEGIN with the idempotency claim; the locks, the reads and the hold's
// row; the seats' write with the key's answer and COMMIT. A confirm or a
// release is two. Statements that do not wait on each other's answers
// travel together (pgx.Batch); the rules run in Go between the round
// trips, and each write checks in its own statement what it reached, so
// COMMIT can travel with it.
//
// Expiry (ExpireDue) runs in every replica: FOR UPDATE SKIP LOCKED shares
// the due holds between them, the status check and version bump make a
// racing confirm either win (and book) or find its own hold expired when
// it re-reads (hold_expired), never both.
package seats
