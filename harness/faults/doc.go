// Package faults is the fault suite (`make faults`): every flow under
// load while a dependency or a replica misbehaves, then an audit of what
// the database and the gateway hold.
//
// Each scenario follows the same shape, the one etcd's robustness tests
// and Jepsen use: a workload (a flash sale, a pay storm, likes, a seat
// rush, a refund storm), a fault
// schedule (before, during, after), a history of every answer the clients
// saw, and the invariants checked afterwards on the stored data rather
// than on the status codes alone.
//
// The cluster is real processes, so a fault can be a real one:
//
//   - two `shop serve` replicas, built once from ./cmd/shop and started as
//     child processes (SIGKILL and SIGSTOP reach them as they would in
//     production);
//   - `shop gateway`, the stand-in card processor, also a child process
//     with its journal on disk, so a kill and restart keeps its charges;
//   - three redis-server processes of the suite's own, without
//     persistence: a killed node comes back empty, as Redlock fears;
//   - PostgreSQL: the test server (harness/testenv), one fresh
//     database per run;
//   - an in-process TCP fault proxy (toxiproxy v2, embedded) in front of
//     PostgreSQL, each Redis node and the gateway: latency, resets, black
//     holes, stops.
//
// The suite's files carry the build tag `faults`, so `make test` does not
// run them; `make faults` does, at the size CI affords (SHOP_FAULTS_SIZE=
// large for longer phases and more clients). docs/RELIABILITY.md has the
// figures of a run and what each one means for an operator.
package faults
