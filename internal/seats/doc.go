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
//     request is one hold, however often it is sent.
//   - Layer 1, a redsync lock per seat, seat:{event}:{seat}, taken in
//     seat order (A1, A2, …, B1) and released in reverse, so two holds
//     that overlap queue on their first common seat and cannot deadlock;
//     holds of other seats never wait. SHOP_SEAT_LOCK=advisory takes
//     pg_advisory_xact_lock per seat inside the transaction instead (same
//     order), and none takes no lock; docs/DESIGN.md compares them, and a
//     lock per section, measured by `shop bench seats`.
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
// Expiry (ExpireDue) runs in every replica: FOR UPDATE SKIP LOCKED shares
// the due holds between them, the status check and version bump make a
// racing confirm either win (and book) or find its own hold expired when
// it re-reads (hold_expired), never both.
package seats
