package bench

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shop-example/shop/harness/testenv"
	"github.com/shop-example/shop/internal/platform/postgres"
)

// The meter counts the commits pg_stat_database's xact_commit counts, from
// PostgreSQL's answers: statements outside a transaction, read-only ones
// too; a COMMIT; a batch outside a transaction. Not a rollback, a failed
// statement, a COMMIT of a failed transaction, nor the statements inside
// a transaction. The server's count is read once the session has ended
// and so reported it.
func TestCostMeter_CommitsAsPostgreSQLCounts(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	name := u.Path[1:]
	u.Path = "/postgres"
	admin, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	serverCount := func() int64 {
		t.Helper()
		// Wait for every session of the database to end: a session
		// reports what it committed when it ends, at the latest.
		deadline := time.Now().Add(10 * time.Second)
		var sessions int
		for {
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, name).Scan(&sessions); err != nil {
				t.Fatal(err)
			}
			if sessions == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		var n int64
		if err := admin.QueryRow(ctx, `SELECT pg_stat_clear_snapshot(), xact_commit FROM pg_stat_database WHERE datname = $1`, name).Scan(nil, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	before := serverCount()
	var m costMeter
	pool, err := postgres.Open(ctx, dbURL, 1, m.poolOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Each step: the round trips and commits the meter sees.
	exec(`CREATE TABLE c (n int PRIMARY KEY)`) // 1, 1: no arguments, so sent unprepared
	var one int
	// 2, 2: the statement prepared (outside a transaction: a commit),
	// then run; a read-only statement commits too.
	if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT n FROM c`).Scan(&one); !errors.Is(err, pgx.ErrNoRows) { // 2, 2: no row, committed
		t.Fatalf("empty read: %v", err)
	}
	const insert = `INSERT INTO c VALUES ($1)`
	// 4, 1: BEGIN, the insert prepared (inside: no commit) and run, COMMIT.
	if err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insert, 1)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insert, 1); err == nil { // 1, 0: a failed statement
		t.Fatal("duplicate insert succeeded")
	}
	// 4, 0: BEGIN (before which pgx closes the failed statement, in a
	// round trip it does not trace), the insert prepared again and run,
	// ROLLBACK.
	rolledBack := errors.New("rolled back")
	if err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insert, 2); err != nil {
			return err
		}
		return rolledBack
	}); !errors.Is(err, rolledBack) {
		t.Fatal(err)
	}
	// 3, 0: BEGIN, a failed insert, and a COMMIT that rolls back.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, insert, 1); err == nil {
		t.Fatal("duplicate insert succeeded")
	}
	if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("commit of a failed transaction: %v", err)
	}
	if _, err := pool.Exec(ctx, insert, 3); err != nil { // 2, 2: prepared again, run
		t.Fatal(err)
	}
	// 1, 1: a batch of prepared statements outside a transaction runs
	// as one.
	batch := &pgx.Batch{}
	batch.Queue(insert, 4)
	batch.Queue(insert, 5)
	if err := pool.SendBatch(ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	// 3, 1: BEGIN, the batch, COMMIT.
	if err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(insert, 6)
		return tx.SendBatch(ctx, b).Close()
	}); err != nil {
		t.Fatal(err)
	}
	// pgx pings with an empty statement, which commits a transaction of
	// its own and tells no tracer; pgxpool pings a connection that sat
	// idle for a second before handing it out.
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Close()

	if got, want := m.commits.Load(), int64(1+2+2+1+0+0+0+2+1+1); got != want {
		t.Errorf("meter counted %d commits, want %d", got, want)
	}
	// Left out, too: the transaction the session's start commits, and
	// the pings (postgres.Open's and the one above).
	if got := serverCount() - before; got != m.commits.Load()+3 {
		t.Errorf("xact_commit rose by %d, the meter counted %d commits on 1 connection with 2 pings", got, m.commits.Load())
	}
	// Round trips: the connection, then the steps'.
	if got, want := m.trips.Load(), int64(1+1+2+2+4+1+4+3+2+1+3); got != want {
		t.Errorf("meter counted %d round trips, want %d", got, want)
	}
}
