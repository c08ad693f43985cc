// Package seats sells the seats of events: holds of 1–10 seats, all or
// nothing, that expire, and bookings that sell a seat once, ever.
//
// It is the classic race of ticketing: many fans, overlapping seat sets,
// holds that expire while someone pays. The lesson this package teaches:
// a multi-resource claim is all-or-nothing in one transaction, its locks
// are taken in one global order, and the database decides what the locks
// only make cheap.
//
// Each use case is one function in service.go (Service.Hold, Confirm,
// Release; Service.ExpireDue in expiry.go) that opens its transaction
// itself and reads top to bottom in layer order, each step one call to
// the store (holdtx.go), whose SQL sits beside it. A hold:
//
//   - Layer 0, the Idempotency-Key on POST …/holds and …/confirm: one
//     request is one hold, however often it is sent. The key's record is
//     claimed first and completed last in the hold's own transaction
//     (idempotency.Store.Atomic), so the hold and the answer that replays
//     it commit together; the hold's row carries the key too
//     (holds_user_request_key), for a try whose record is gone.
//   - First, one read outside any transaction (Store.Glance): a hold of
//     seats the database already shows taken is refused at once, 409
//     seat_unavailable, before it takes a lock or a transaction. It is
//     layer 2 asked early, of a snapshot; the transaction asks again.
//   - Layer 1, pg_advisory_xact_lock per seat, taken in seat order (A1,
//     A2, …, B1) inside the hold's transaction (Store.QueueLocks), so two
//     holds that overlap queue on their first common seat and cannot
//     deadlock; holds of other seats never wait, and a waiter is woken by
//     the holder's commit. SHOP_SEAT_LOCK=redsync takes a redsync lock per
//     seat, seat:{event}:{seat}, in the same order before the transaction,
//     and none takes no seat lock; docs/DESIGN.md says why the default is
//     the first, from what `shop bench seats` and `shop bench strategies`
//     measured (with a lock per section, too, the bench's variant).
//   - Layer 2, the states: a seat available → held → booked (held →
//     available on release or expiry); a hold active → confirmed |
//     released | expired. The rules are pure and in seats.go
//     (CheckAvailable, Confirm, Release); the use case names them and the
//     store applies them to what it read.
//   - Layer 3, the version: each seat is written only while it is
//     available at the version its transaction read (WHERE status =
//     'available' AND version = $read), and a hold is moved only at the
//     version read, so of two holds that read the same available seat, or
//     a confirm and the expiry job on the same hold, one writes and the
//     other reads again (ErrSeatMoved, ErrHoldMoved).
//   - Layer 4, the constraints: hold_seats_one_active_per_seat admits one
//     active hold per seat, tickets_one_per_seat one ticket per seat ever,
//     bookings_one_per_hold one booking per hold, holdings_within_caps a
//     user's holds on an event within the caps.
//
// The caps (Caps.Admit) bound what one user holds of one event: seats per
// hold, active holds and held seats. They hold without any lock: the
// user's holds on the event are counted in one row (holdings), which
// every hold counts itself up in and every confirm, release and expiry
// counts down in, and whose CHECK, holdings_within_caps, refuses a count
// past the caps. A hold reads that row and asks the caps' rule of it
// after taking pg_advisory_xact_lock on (user, event), part of layer 1,
// so two holds by one user take turns and the second is refused with
// what the user holds; without the lock, the second counts past a cap at
// its commit, rolls back, reads again and is refused the same.
//
// The hold's transaction is three round trips to PostgreSQL: BEGIN with
// the idempotency claim; the locks, the reads and the hold's row; the
// seats' write and the hold's count with the key's answer and COMMIT. A
// confirm or a release is two. Statements that do not wait on each
// other's answers travel together (pgx.Batch); the rules run in Go
// between the round trips. COMMIT travels with the writes, so a write
// that reaches fewer rows than asked fails in its own statement: the
// rows after it take a value from each row it reached into a NOT NULL
// column, and WriteError reads that refusal as the layer-3 refusal it
// stands for (holdtx.go says how).
//
// Expiry (ExpireDue) runs in every replica: FOR UPDATE SKIP LOCKED shares
// the due holds between them, the status check and version bump make a
// racing confirm either win (and book) or find its own hold expired when
// it re-reads (hold_expired), never both. A user's next hold on an event
// expires their holds on it whose time is up, so those no longer count
// against the caps before the job reaches them.
//
// The layers come off in the tests, not here: harness/variants has the
// store's steps without a layer (no locks in the transaction, the rules
// applied blind, the writes without their version), plugged in through
// Config.Holds.
package seats
