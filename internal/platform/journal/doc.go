// Package journal is a provider's durable record of what it did: every
// decision about an idempotency key (a charge, a decline, a refund, a
// message sent) is one line of an append-only JSON-lines file, fsynced
// before the decision is answered and replayed when the provider starts,
// so a crash and a restart keep every answer the provider gave. `shop
// gateway` and `shop mailer`, the stand-in card processor and mail
// provider, keep their decisions in one.
//
// # Why
//
// A provider's promise, "the same key gets the same answer, and never a
// second charge", is only as good as its memory. Kept in memory alone it
// ends at the first restart, and the client that retries after the crash
// is charged twice: exactly the failure the shop's own idempotency layer
// exists to stop, moved one hop out. The stand-ins run as processes of
// their own with no database, so the memory is a file, and the file is
// written the way a database writes its log.
//
// # How
//
//   - A record counts once its whole line, newline included, is fsynced:
//     Append returns only then, and the provider answers only after
//     Append. So a last line cut short by a crash was never answered to
//     anyone, and Open drops it. A bad line anywhere else is damage, not a
//     crash, and Open refuses to start rather than forget a decision.
//   - One Apply function rebuilds the provider's index: Open calls it for
//     every line it replays, Append for every line it writes. A restart
//     therefore rebuilds exactly what the running process had, and no
//     more.
//   - Check is asked of every record on both paths: a record Apply could
//     not use is neither written nor replayed.
//   - KeyLocks sit in front of it and serialise the requests of one key,
//     each for the whole request, a held-back answer included: a second
//     request with the key waits for the first one's answer and replays
//     it, while other keys run in parallel.
//
// A Journal is not safe for concurrent use. Its provider guards the
// journal and the index with one mutex, so the order of the lines is the
// order in which decisions were made, and a decision and its line are one
// step.
package journal
