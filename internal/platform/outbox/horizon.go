package outbox

import (
	"errors"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// The relay reads the outbox in the order of its rows' transactions
// (transaction_id, then offset) and remembers how far it got. A row of a
// transaction still in flight is invisible; if the relay moved past it,
// it would skip the row once that transaction committed. So it reads only
// rows of transactions older than a horizon, the oldest transaction that
// may still commit a row.
//
// watermill-sql's PostgreSQL schema takes the snapshot's xmin as the
// horizon: the oldest transaction in flight anywhere on the server. Any
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

// sqlHorizonServer is watermill-sql's horizon, the server-wide one.
const sqlHorizonServer = `pg_snapshot_xmin(pg_current_snapshot())`

// sqlLibraryGate is the gate in watermill-sql's select query that the
// relay's schema replaces.
const sqlLibraryGate = `transaction_id < ` + sqlHorizonServer

// relaySchema is watermill-sql's PostgreSQL schema with the relay's
// horizon. The zero value gates on sqlHorizon; a test sets horizon to
// show what another gate lets through.
type relaySchema struct {
	wsql.DefaultPostgreSQLSchema
	horizon string
}

// errGateMoved: the library's query no longer has the gate this schema
// replaces; the relay refuses to read rather than read without one.
var errGateMoved = errors.New("outbox: watermill-sql's select query has no snapshot gate to replace")

func (s relaySchema) SelectQuery(params wsql.SelectQueryParams) (wsql.Query, error) {
	q, err := s.DefaultPostgreSQLSchema.SelectQuery(params)
	if err != nil {
		return q, err
	}
	if strings.Count(q.Query, sqlLibraryGate) != 1 {
		return wsql.Query{}, errGateMoved
	}
	horizon := s.horizon
	if horizon == "" {
		horizon = sqlHorizon
	}
	q.Query = strings.Replace(q.Query, sqlLibraryGate, "transaction_id < "+horizon, 1)
	return q, nil
}
