package outbox

// The relay reads the outbox in the order of its rows' transactions
// (transaction_id, then offset) and remembers how far it got. A row of a
// transaction still in flight is invisible; if the relay moved past it,
// it would skip the row once that transaction committed. So it reads only
// rows of transactions older than a horizon, the oldest transaction that
// may still commit a row.
//
// watermill-sql's PostgreSQL schema, whose tables the relay uses, takes
// the snapshot's xmin as the horizon: the oldest transaction in flight
// anywhere on the server. Any
// transaction holding a transaction id, in any database of the cluster (a
// migration, a batch job, a backup's bookkeeping), then stops the relay
// for as long as it stays open. Transaction ids are the cluster's, but a
// transaction in another database cannot write to this one's outbox:
// sqlHorizon leaves out the transactions that pg_stat_activity shows
// running in another database. A transaction it cannot place (one that
// ended meanwhile, a prepared one, a background worker's) still holds the
// horizon back, as before: a doubt costs a delay, never a skipped row.
//
// What is left: a transaction in this database that holds an id holds the
// relay back until it ends, whatever it wrote. The shop's own transactions
// are short; the redelivery (Relay.Redeliver) publishes from the table
// whatever a consumer has not recorded after RedeliverAfter, gate or no
// gate, so a long one delays events by that much at most.
const sqlHorizon = `least(pg_snapshot_xmax(pg_current_snapshot()),
	(SELECT min(x) FROM pg_snapshot_xip(pg_current_snapshot()) AS x
	 WHERE x::xid NOT IN (SELECT backend_xid FROM pg_stat_activity
		WHERE backend_xid IS NOT NULL AND datname <> current_database())))`

// sqlForward reads the relay's next batch (Relay.Forward): the offsets
// row of the relay's group locked (FOR UPDATE: the relays of the replicas
// take turns), then the rows past it in the order of their transactions,
// only those of transactions older than horizon, up to $2. The row
// comparison on the primary key is one ordered scan that stops at the
// batch's end, however many rows wait behind it.
func sqlForward(horizon string) string {
	return `WITH last AS (
		SELECT last_processed_transaction_id AS tx, offset_acked FROM watermill_offsets_outbox
		WHERE consumer_group = $1 FOR UPDATE)
	SELECT m."offset", m.transaction_id::text, m.payload::text FROM watermill_outbox m
	WHERE (m.transaction_id, m."offset") > ((SELECT tx FROM last), (SELECT offset_acked FROM last))
	  AND m.transaction_id < ` + horizon + `
	ORDER BY m.transaction_id, m."offset"
	LIMIT $2`
}

// sqlMoveOffset moves the relay's offset past the last row it published.
const sqlMoveOffset = `UPDATE watermill_offsets_outbox SET offset_acked = $2, last_processed_transaction_id = $3::xid8
	WHERE consumer_group = $1`
