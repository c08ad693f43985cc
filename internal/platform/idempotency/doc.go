// Package idempotency is layer 0 of the defence in depth (DESIGN.md §1, §3):
// the Idempotency-Key header, as in the IETF httpapi draft and Stripe's API.
// A client that did not hear the answer to a POST (a timeout, a dropped
// connection) sends the same request again with the same key, and gets the
// first answer back instead of a second order, payment or booking.
//
// # The state of a key
//
// A key belongs to a principal (a user, or the admin), so two users may use
// the same key independently. In the idempotency_keys table it is:
//
//	absent ──claim──▶ claimed (owner token, lease until locked_until)
//	                    │ the flow answered 2xx–4xx
//	                    ├──complete──▶ completed (status, headers, body)
//	                    │ it answered 5xx or "try later"
//	                    └──release───▶ absent
//
// Of any number of concurrent requests with one key exactly one becomes
// the owner. The others are told one of three things: the key was used
// for a different request (422 idempotency_key_reused; the fingerprint is
// method, path and canonical body), the first request is still running
// (409 request_in_progress with Retry-After), or here is the stored
// answer, replayed byte for byte with Idempotent-Replayed: true.
//
// # The atomic phases
//
// Store.Atomic, the atomic phases of brandur/rocket-rides-atomic, holds
// the key on every keyed route (create order, restock, pay, hold seats,
// confirm a hold): the flow writes its record in its own transaction(s).
// The middleware touches no database before the handler; it puts a
// *Record on the request's context (RecordFrom), and the flow's
// transaction claims the key (Record.Claim, or Record.QueueClaim in the
// batch that begins it) and completes it as its last statement
// (Record.Complete, Record.QueueComplete):
//
//	BEGIN + claim; the flow's statements; complete + COMMIT
//
// The claim, the effect and the stored answer commit together or not at
// all. A crash or a rollback leaves neither the claim nor the effect: the
// key is simply absent again, so nothing needs releasing. A COMMIT whose
// answer was lost leaves the completed key, and the retry's claim replays
// it. A two-phase flow (a payment: claim and recovery point committed, the
// call outside, then settle and complete) leaves a committed claim
// between its phases; if it fails there, the middleware releases the
// claim; if it crashes there, the key is in progress until its lease ends
// and then taken over (below).
//
// The claim is one statement. It first takes pg_try_advisory_xact_lock on
// (principal, key): a second request of the key is refused at once,
// 409 request_in_progress, instead of waiting inside PostgreSQL on the
// first one's uncommitted row with a pool connection held; with a pool of
// eight connections, 49 waiting copies of one request would stall every
// other user (TestAtomic_DuplicatesDoNotStallThePool). Then, in the same
// statement, the INSERT … ON CONFLICT of the claim, which returns the row
// as it is when the key is not this request's: the flow rolls back and
// returns the *Refusal, and the middleware answers it. The advisory lock
// also serialises one (principal, key) inside PostgreSQL, so a flow under
// Atomic needs no Redis lock on the same key.
//
// A refusal the flow answers before its transaction or after a rollback
// (400 invalid_request, 409 out_of_stock) is stored by the middleware in
// one statement of its own, under the key's advisory lock too, so it never
// overwrites what another request of the key is writing; if that other
// request holds or completed the key, the client is answered with the
// key's state instead. The handler holds its answer back until then. An
// answer after a committed phase (a payment's 202) completes the
// request's own claim, and waits for the key's lock as a completion in
// the flow's transaction does: a copy being refused holds it for a
// moment, and is not the key's owner (TestAtomic_StoreWaitsForTheKeysLock).
//
// # Takeover and the owner token
//
// A claim is a lease. If its owner crashed, the key would otherwise stay
// claimed for ever; once locked_until has passed, the same claim statement
// takes the key over (only for the same fingerprint) and the request runs
// again. That re-run is safe because the flow's own layers (lock, state
// machine, version check, unique constraint) turn a repeated side effect
// into the same result. A slow owner that comes back after losing its lease
// must not overwrite the new owner's answer: completion and release are
// fenced by the random owner token written at claim time, so the stale
// owner's UPDATE matches no row. A later phase of a two-phase flow begins
// with Claim again, which finds this request's own claim or refuses the
// phase when the key was taken over, so the stale phase stops before it
// acts on anything (the loser asks its own row first); Complete's fence
// stays behind it (it then reports false). Either way the stale owner's
// client is answered with the key's state. The handler's context is also
// bounded by the lease, so a live owner normally gives up before it can be
// taken over.
//
// # What is not stored
//
// A 5xx, a 429 and any refusal that carries a Retry-After (409
// request_in_progress, 409 resource_busy, 503 unavailable) ask the client to
// try again. Storing them would turn a passing failure into a permanent one
// for that key, so nothing is stored: the claim rolled back with the flow,
// or, when a committed phase left it, the middleware releases it; and a
// retry runs the handler again. (Stripe stores its 500s; here a 5xx usually means a
// dependency failed, the flows' own layers make the retry safe, and a retry
// that can succeed is worth more to the client than a stored failure.) A
// 4xx that answers the request itself (invalid_request, out_of_stock,
// invalid_state, payment_declined) is stored and replayed: running it again
// could give another answer to the same request, which is what the key
// rules out. An answer larger than 1 MiB is not stored either (a claim a
// committed phase left is released).
//
// # Commits
//
// A request makes one commit, its flow's own (two for a two-phase flow):
// the key costs one statement in the first round trip of the transaction
// (with BEGIN) and one in the last (with COMMIT, through
// postgres.InTxBatched), no round trip and no commit of its own.
//
// What runs on the store's own pool, apart from the flow, is one
// statement each, with a commit of its own: a refusal stored after a
// rollback or before the transaction (400 invalid_request, 409
// out_of_stock), the release of a claim a committed phase left, and
// Sweep. The service gives the store a pool of its own (so these never
// wait behind the flows for a connection) whose commits are as durable
// as the flows': with a synchronous standby, each waits for the standby
// too. Then a client that got an answer gets the same one when it
// retries with its key, after a crash or a failover as before it.
//
// SHOP_IDEMPOTENCY_ASYNC_COMMIT gives the store a pool whose sessions
// have synchronous_commit off (postgres.SecondPool): a stored refusal
// then waits for no WAL flush of its own. A crash or a failover may lose
// such a commit, which loses no effect but breaks the promise above: a
// lost refusal leaves the key absent, and a retry runs the flow again
// (it committed nothing the first time; it may now get another answer,
// if the stock changed meanwhile); a lost release leaves the claim, and
// a retry is told request_in_progress until the lease ends. The fault
// suite's failover row shows both (docs/RELIABILITY.md).
//
// The statements after the handler run on a context detached from the
// request: a client hanging up must not leave its key claimed until the
// lease ends. For the same reason, a release that fails (the database
// slow, its pool full, a connection cut) is tried once more in the
// background after the answer has gone out; the owner token fences that
// late try like the first, and Store.Wait lets a stopping replica wait for
// it. An answer that fails to be stored is not sent, since a retry with
// the key would not get it back: the request is answered 503 unavailable
// with Retry-After instead, its claim is freed, and a retry runs the flow
// again, which committed nothing the first time
// (TestAtomic_UnstoredAnswerNotSent).
//
// Keys are kept for Options.Retention (at least 24 h) and then deleted by
// Sweep, which any number of replicas may run at once.
//
// # Key schemes
//
// A record's name, and the scheme it was written under, come from
// Options.Scheme (package keyscheme, DESIGN.md §8): scheme 1 names it by
// the client's key, scheme 2 by the key and its operation. Replicas of
// both run side by side during a rollout; every statement that finds a
// key's record looks under both names, under the key's advisory lock
// (which is on the client's key under every scheme), takes the scheme-1
// name should both exist, and claims, completes and releases the record
// under the name it has. Record.name is that name once claimed.
package idempotency
