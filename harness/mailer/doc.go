// Package mailer is `shop mailer`: a stand-in for a mail provider, run as
// its own process on its own port and reached only over HTTP, so the
// shop's consumer of receipts, tickets and refund mails meets the
// failures it would meet in production: a 5xx, an answer that arrives
// after the client gave up, and a provider that forgets its idempotency
// keys.
//
// # What it promises
//
//   - The same Idempotency-Key gives the same answer, and never a second
//     message, for as long as the key is remembered: a message is
//     remembered under its key and replayed (200, Idempotent-Replayed:
//     true). A key sent again with another request is refused with 422
//     idempotency_key_reused.
//   - Keys are remembered for KeyTTL (DefaultKeyTTL, 24 hours), counted
//     from the message the key sent, and then forgotten, as real providers
//     forget them (Stripe after 24 hours): a request whose key is older is
//     a new request and sends a second message. This is deliberate. The
//     provider's key is a guard against a retry within minutes, not a
//     record of what was ever sent; that is why the shop's consumers keep
//     an inbox of the events they have handled, and a redelivery days
//     later is stopped there, not here.
//   - Requests with one key are serialised (the second waits for the
//     first's answer, hold-back included, and replays it); requests with
//     different keys run in parallel.
//   - Nothing is answered before it is durable. Every message is one line
//     of an append-only JSON-lines journal, written and fsynced before the
//     answer is sent; on start the journal is replayed, so messages and
//     the keys that sent them survive a restart.
//
// # Faults
//
// For tests and demos, set at start (Options.FailRate, Options.Delay) and
// changed at run time with PUT /v1/faults; they are not journaled, so a
// restart goes back to the options:
//
//	fail_rate  that fraction of requests with a new key answer 503
//	           unavailable, decided before anything is recorded: nothing
//	           was sent, and a retry with the same key may send it. A
//	           replay is never failed.
//	delay_ms   every message's answer (new or replayed) is held back that
//	           long after the message is journaled: the ambiguous case,
//	           "sent, but the answer is late". A request that ends during
//	           the hold-back hears nothing; its message stays sent.
//
// # Layers
//
// One mutex guards the in-memory index, the journal file and the faults
// together, so the order of the lines is the order in which messages were
// decided, and a decision (is this key remembered? does this attempt
// fail?) and its line are one step. The per-key lock sits in front of it
// and spans the whole request, hold-back included. The index is rebuilt by
// the same apply function at start and at run time, so a restart cannot
// rebuild anything the running process did not have. The journal and the
// per-key lock are internal/platform/journal's, shared with shop gateway.
package mailer
