// Package lock is layer 1 of the defence in depth (DESIGN.md §1, §2): a
// fine-grained distributed lock, Redlock over independent Redis nodes through
// redsync.
//
// # What the lock is for
//
// The lock is for efficiency and for serialising calls to the outside world.
// It keeps two requests for the same order from both doing the work only for
// one of them to lose at the database, and it keeps two requests from calling
// the payment gateway for the same order at the same time. It is not what
// makes the outcome correct: the state machine, the version-checked write
// and the constraints (layers 2–4) are. Every flow stays correct with the
// lock switched off (None), and that is tested.
//
// The reason is Redlock's own caveat. A lease is a promise with a clock in
// it: a holder paused for longer than the TTL (a GC pause, a slow gateway, a
// stalled VM) keeps working after its lease has gone to someone else, and if
// a majority of nodes restart empty within the TTL two clients hold the lock
// at once. Redis gives no fencing token to stop the stale holder; the version
// column in the database is that token.
//
// # Bounded waiting
//
// A waiter makes single attempts (TryLock) with short, jittered, gently
// growing pauses (5 ms growing to 50 ms) until its wait budget (2 s by
// default) is spent, then gets problem.ResourceBusy with a Retry-After. A
// lock here guards a request, not a hot product; if it stays taken for
// seconds, the client learning that and retrying beats a request sitting in
// a queue. redsync's default (32 tries, 50–250 ms apart) waits up to eight
// seconds and wakes waiters in random order, which wrecks the tail; much
// shorter pauses turn into a retry storm that starves the holder.
//
// A flow whose holder keeps the lock for long (the pay flow, across its
// gateway call) bounds its waiters by tries as well (WithTries): a loser
// that finds the key taken on every node is told resource_busy after that
// one attempt, instead of retrying for the whole budget against a holder
// that will not be done before it. Only an attempt that took some nodes
// tries again, a few milliseconds later, up to the bound: that is the
// split vote, when contenders arriving together each take a minority of
// the nodes and all fall short. shop_lock_tries counts the attempts of every
// acquisition: a tail of many tries is a queue of waiters spinning on a
// held lock, each try a SET NX on every node and a release of what it
// took.
//
// # Watchdog
//
// Work that may outlive the lease (a gateway call) runs under a watchdog that
// extends the lease every TTL/3. A short TTL means a crashed holder frees the
// resource quickly; the watchdog means a slow but live holder keeps it. When
// an extension fails the lease may already be someone else's, so the work's
// context is cancelled with cause ErrLockLost and the work should stop. If it
// writes anyway, the version check refuses the stale write.
//
// # When Redis is down
//
// An attempt where nodes did not answer and none reported another holder
// counts towards "quorum unreachable"; two such attempts settle it, so an
// outage costs milliseconds rather than the whole wait budget. Degrade mode
// (the default) then runs the work without the lock and counts it, relying on
// layers 2–4; Strict mode answers problem.Unavailable. Either way nothing is
// applied twice.
//
// Releasing runs on a context detached from the request, and a release error
// after the work committed is logged and counted, never turned into a failed
// response: the lease expires on its own.
package lock
