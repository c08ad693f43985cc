// Package variants is the one catalogue of the flows without some of
// their layers: what the ablation tests, the race lab's sandboxes and the
// bench's naive strategies run in place of a production step.
//
// The production code has no switch. Each flow takes the steps a layer
// lives in as small interfaces (orders.OrderRows, orders.Stock, …) and
// its lock as a layers.Locker; a variant is the production step with one
// layer taken off, handed in from outside (app.Variants):
//
//   - the idempotency layer: the keyed routes' middleware left out (Keys),
//     a consumer's inbox that has seen nothing (Inbox);
//   - the lock: a Locker that takes none (Locker); an advisory lock's
//     statements left out of the flow's batch (UnlockedLikes);
//   - the state rule: the flow's rule applied as code without it would,
//     moving the row from whatever state it is in (Blind);
//   - the version check: the production statement with its version
//     condition cut out, on a transaction that rewrites it (Rewrite);
//   - the constraints: dropped from the test's schema (app.Layer4), not
//     here.
//
// A switch must switch something: each variant tells the row's
// layers.Probe when it took its layer off during a race (a rewrite that
// matched, a move the rule refused and the variant made, a lock not
// taken), and the ablation matrix fails a row whose layers were never
// taken off while it ran.
package variants
