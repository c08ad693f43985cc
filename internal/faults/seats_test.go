//go:build faults

package faults

// SEATS HOOK: the seat rush runs (workload.seatRush, in every scenario of
// all flows and in scenario 4) and check audits one ticket per seat. What
// is missing is the porcupine check of its history under faults 1, 2 and
// 4. The seat map's model lives in internal/app's
// seats_linearizability_test.go (TestSeats_Linearizable), which a test of
// another package cannot import. To add it:
//
//   - move the model (input, output, Step, partition per event) into a
//     package both tests can use;
//   - in seatRush, record every hold, confirm and release as a porcupine
//     Operation with call and return times from one monotonic base, a
//     unique hold key per request, and for a request without an answer
//     Return = the end of the run (as etcd does), plus reads of the seat
//     map;
//   - after scenarios 1, 2 and 4, check the history with a time limit and
//     count Unknown as a failure;
//   - keep SHOP_SEAT_HOLD_TTL longer than a scenario (the default 5 min
//     is), so that hold expiry, which the model does not see, cannot
//     happen during a checked run.
