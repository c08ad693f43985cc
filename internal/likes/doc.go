// Package likes keeps posts and their likes, and counts the likes of a
// post exactly, however hot it gets.
//
// Likes are the opposite of payments: tiny, very frequent, low value. The
// one hard part is the count. A viral post gets thousands of likes a
// second, and a count kept in one row (UPDATE posts SET like_count =
// like_count + 1) makes every one of them wait for the row lock of the
// one before, held until its commit reaches the disk. The lesson this
// package teaches: keep every layer, and still scale the hot key, in as
// few round trips as the layers allow.
//
// The flow (Service.Set; like and unlike are the same flow with another
// target state) is one function in service.go that owns its transaction
// and reads top to bottom as its layers, each step one hop from the SQL
// it runs in postgres.go. The rule is a value (SetTo(want), a Change) that
// the store applies to the like it reads:
//
//   - Layer 0, the Idempotency-Key, does not apply. PUT and DELETE name
//     the state the client wants, not a change to make: a retry asks for
//     what the first request already made true, and layer 2 answers it
//     with the current state without writing.
//   - Layer 2 first, on the like as the database shows it (Store.Look,
//     one statement that also sums the count): a like already where it
//     is asked to be is answered at once, with no lock and no write. A
//     double click whose twin is done, or a PUT sent again after a lost
//     answer, costs one round trip.
//   - Layer 1, a lock on one user's like of one post: one user's double
//     clicks on one post are serialised, so the second reads what the
//     first wrote; other users never wait on each other. The post is
//     never locked: that would queue every user of a viral post behind
//     one key. By default (SHOP_LIKE_LOCK=advisory) it is
//     pg_advisory_xact_lock on (user, post) (Store.QueueLock), taken
//     inside the like's transaction in the round trip that begins it, and
//     released at its commit: no Redis, and no round trip of its own. A
//     like's work is all in PostgreSQL, so a lock there serialises all of
//     it. The alternative (SHOP_LIKE_LOCK=redsync) is a redsync lock on
//     like:{user}:{post} around the same transaction, as the other flows
//     lock: two rounds of calls to the Redis nodes more per like. Either
//     way the wait is short (LockWait: a like is worth less than a wait)
//     and bounded; then 409 resource_busy.
//   - Layer 2 again, the like's state, unliked ⇄ liked (Like.Set), on the
//     like read under the lock (Store.QueueRead, Store.QueueMove): liking
//     a liked post, or unliking an unliked one, changes nothing.
//   - Layer 3, the version on the like row: it is written only at the
//     version read ("WHERE version = $read", Store.QueueMove), so two
//     requests that both read "unliked" cannot both count a like.
//   - Layer 4, the primary key (post_id, user_id): one like row per user
//     and post, ever, so two racing first likes cannot both insert one;
//     and a CHECK keeps every counter row at zero or more.
//
// None of it can be switched off in this package: the layer tests hand
// the service variants of its steps (LikeRows) that take one layer off,
// from harness/variants.
//
// The count is exact and scalable. It is spread over a fixed number of
// counter rows per post (post_like_shards, DefaultShards of them): a like
// adds one to a row picked at random and records that row in the like
// row; an unlike takes it back from that same row. So concurrent likes of
// one post update different rows and commit side by side, and the count
// is the sum of the rows, read in one statement. The counter row moves in
// the same statement as the like row (countAfter), by what that write
// changed in the row, not by what the request asked for: a write that
// changes nothing counts nothing, and a write that is refused (a stale
// version, a duplicate row) moves nothing. So the count can never drift
// from the like rows; the reconciler (Reconcile, every replica, and on
// demand for the admin) checks that sum(counter rows) = count(liked rows)
// for every post and reports any drift in the metrics.
//
// The round trips of a like that changes something, by default: the
// first look; then BEGIN, the lock and the read under it, sent together
// (a pgx batch); then the write and COMMIT, sent together
// (postgres.InTxBatched). Three round trips to PostgreSQL, one commit,
// none to Redis; a like that changes nothing costs the first alone.
// Under the Redis lock: the first look, two rounds to the Redis nodes,
// then BEGIN with the read, and the write with COMMIT.
package likes
