//go:build faults

package faults

// SEATS HOOK: the seat rush is not in the suite yet, because the seats
// flow (holds, confirm, the porcupine seat-history checker) has not
// landed on main. When it does, the suite needs:
//
//   - a flow constant flowSeats = "seat rush", added to allFlows and to
//     the flows of scenario 4, and a workload step (workload.seatRush)
//     in which several clients hold and confirm overlapping seats of one
//     event across both replicas, with a unique hold id per request so an
//     unknown outcome can be resolved by a read;
//   - every request and its answer recorded as a porcupine Operation
//     (call and return times from one monotonic base; a request without
//     an answer gets Return = the end of the run, as etcd does), then
//     checked with the seats package's model, partitioned per event,
//     under a time limit, with Unknown counted as a failure — in
//     scenarios 1, 2 and 4;
//   - in check: one confirmed booking per seat, in SQL
//     (no seat with two confirmed bookings, no confirmed booking without
//     its hold), next to the orders, books and likes audits;
//   - SHOP_SEAT_HOLD_TTL longer than a scenario, so hold expiry (which the
//     model does not see) cannot happen during a checked run.
