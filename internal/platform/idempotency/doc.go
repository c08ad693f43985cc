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
//	                    │ handler answered 2xx–4xx
//	                    ├──complete──▶ completed (status, headers, body)
//	                    │ handler answered 5xx or "try later"
//	                    └──release───▶ absent
//
// The claim is one INSERT … ON CONFLICT DO UPDATE, so of any number of
// concurrent requests with one key exactly one becomes the owner. The others
// read the row and are told one of three things: the key was used for a
// different request (422 idempotency_key_reused; the fingerprint is method,
// path and canonical body), the first request is still running (409
// request_in_progress with Retry-After), or here is the stored answer,
// replayed byte for byte with Idempotent-Replayed: true.
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
// owner's UPDATE matches no row. The handler's context is also bounded by
// the lease, so a live owner normally gives up before it can be taken over.
//
// # What is not stored
//
// A 5xx, a 429 and any refusal that carries a Retry-After (409
// request_in_progress, 409 resource_busy, 503 unavailable) ask the client to
// try again. Storing them would turn a passing failure into a permanent one
// for that key, so the claim is released and a retry runs the handler again. (Stripe stores its 500s; here a 5xx usually means a
// dependency failed, the flows' own layers make the retry safe, and a retry
// that can succeed is worth more to the client than a stored failure.) A
// 4xx that answers the request itself (invalid_request, out_of_stock,
// invalid_state, payment_declined) is stored and replayed: running it again
// could give another answer to the same request, which is what the key
// rules out. An answer the handler broke off after it had started writing,
// or one larger than 1 MiB, is not stored either; the key is released.
//
// # Commits
//
// The claim, the completion and the release are one statement each, one
// round trip, and they run on a pool whose sessions have synchronous_commit
// off (postgres.AsyncCommitPool). A request already pays one durable commit
// (about a millisecond of fsync on the reference machine) for the flow's own
// transaction; two more for bookkeeping would triple that. Losing them in a database crash is
// harmless: a lost claim or completion leaves the key claimable again, and
// the re-run is made safe by layers 1–4, which return the same result. WAL
// is flushed in order, so when the flow commits durably the claim before it
// becomes durable too; what a crash can lose is mostly a completion or a
// release, either of which only means the key can be claimed again once
// its lease has passed.
//
// Completion and release run on a context detached from the request: a
// client hanging up must not leave its key claimed until the lease ends.
// For the same reason, one that fails (the database slow, its pool full, a
// connection cut) is tried once more in the background after the answer
// has gone out; the owner token fences that late try like the first, and
// Store.Wait lets a stopping replica wait for it.
//
// Keys are kept for Options.Retention (at least 24 h) and then deleted by
// Sweep, which any number of replicas may run at once.
package idempotency
